"""`bert-jax features`: contextual embeddings from chosen layers, saved as one .npz file."""

HELP = "extract hidden-state features (and attention) from chosen layers into an .npz file"
DESCRIPTION = """\
Reads --input (UTF-8, one text per line, or `sentence A<TAB>sentence B` for a pair), runs the
encoder and writes --output, an .npz holding:
  layer_L            (lines, seq_len, hidden) for each L in --layers, as written there
                     (0 = embedding output, 1..N = encoder layers, -1 = last layer);
                     zero at padding positions; (lines, hidden) with --pool mean|cls|max
  features           with --combine concat|sum: the layers joined into one array instead of
                     the layer_L arrays (the feature-based approach of the BERT paper, Table 7)
  attention_layer_L  with --attention: (lines, heads, seq_len, seq_len) for layers L >= 1
  input_ids, attention_mask  (lines, seq_len) int32; seq_len is the longest input's length
The file is written under a temporary name and renamed when complete.

example:
  bert-jax features --model runs/demo --input sentences.txt --layers=-1,-2,-3,-4 \\
      --pool mean --combine concat --output features.npz
"""


def add_arguments(parser) -> None:
    from bert_jax.commands import add_progress_argument

    parser.add_argument("--model", required=True,
                        help="model directory (any source `bert-jax convert` reads)")
    parser.add_argument("--input", required=True, help="text file: one text (or A<TAB>B) a line")
    parser.add_argument("--output", required=True, help=".npz file to write")
    parser.add_argument("--layers", default="-1",
                        help="comma-separated layers, e.g. --layers=-1,-2 (default -1: the last); "
                             "0 is the embedding output, negatives count back from the last")
    parser.add_argument("--max-seq-len", type=int, default=128,
                        help="truncate each input to this many tokens incl. [CLS]/[SEP] "
                             "(default 128)")
    parser.add_argument("--batch-size", type=int, default=32,
                        help="texts per forward pass (default 32)")
    from bert_jax.commands import POOLING

    parser.add_argument("--pool", choices=("none", *POOLING), default="none",
                        help="reduce over tokens as `embed --pool` does: the mean or maximum "
                             "over real (non-padding) tokens, or the [CLS] vector (default "
                             "none: keep every token)")
    parser.add_argument("--combine", choices=("none", "concat", "sum"), default="none",
                        help="join the requested layers into one `features` array by "
                             "concatenating their feature axes or summing them (default none)")
    parser.add_argument("--attention", action="store_true",
                        help="also save attention probabilities of each requested layer >= 1")
    add_progress_argument(parser)


def read_texts(path: str) -> list[str | tuple[str, str]]:
    """One text per line; a line with a tab is a (first, second) pair."""
    from bert_jax.storage import files
    from bert_jax.errors import UserError

    lines = files.split_lines(files.read_user_text(path, "input"))  # not at U+2028
    texts = []
    for number, line in enumerate(lines, start=1):
        parts = line.split("\t")
        if len(parts) > 2 or not all(part.strip() for part in parts):
            raise UserError(f"{path}:{number}: expected a non-empty text, or two separated by "
                            "one tab")
        texts.append(parts[0] if len(parts) == 1 else (parts[0], parts[1]))
    if not texts:
        raise UserError(f"{path}: no lines to encode")
    return texts


def write_npz(path: str, arrays: dict) -> None:
    """np.savez, published only when complete (local or gs://)."""
    import numpy as np

    from bert_jax.storage import files

    with files.atomic_write(path, "wb") as file:
        np.savez(file, **arrays)


def outputs(args) -> list:
    """The .npz file, checked before the model is loaded (bert_jax/storage/outputs.py)."""
    from bert_jax.storage.file_kinds import NPZ
    from bert_jax.storage.outputs import Output

    return [Output("--output", args.output, inputs=(("--input", args.input),), ours=NPZ)]


def run(args) -> int:
    from bert_jax import inference
    from bert_jax.errors import UserError
    from bert_jax.interop.model_source import load_text_model

    requested = inference.parse_layers(args.layers)
    if args.batch_size < 1:
        raise UserError(f"--batch-size must be at least 1, got {args.batch_size}")
    texts = read_texts(args.input)
    model = load_text_model(args.model, args.max_seq_len)  # resolved and read once
    config, params, tokenizer = model.config, model.params, model.tokenizer
    layers = inference.resolve_layers(requested, config.num_layers)
    encoded = tokenizer.encode_for_model(texts, args.max_seq_len)
    results = inference.extract_features(
        config, params, encoded, layers, args.max_seq_len, args.pool, args.batch_size,
        args.attention, progress=len(texts) > args.batch_size and not args.no_progress)
    arrays = dict(input_ids=encoded["input_ids"], attention_mask=encoded["input_mask"])
    if args.combine == "none":
        arrays.update({f"layer_{name}": results["hidden"][layer]
                       for name, layer in zip(requested, layers)})
    else:
        arrays["features"] = inference.combine([results["hidden"][layer] for layer in layers],
                                               args.combine)
    arrays.update({f"attention_layer_{name}": results["attention"][layer]
                   for name, layer in zip(requested, layers) if layer in results["attention"]})
    write_npz(args.output, arrays)
    shapes = ", ".join(f"{name} {tuple(array.shape)}" for name, array in arrays.items())
    print(f"wrote {args.output}: {shapes}")
    return 0
