"""`bert-jax attention`: one input's attention maps as figures, arrays and an HTML head view."""

HELP = "draw every layer's attention for one text (or pair): PNG grids, .npz, HTML head view"
DESCRIPTION = """\
Runs the model on `[CLS] TEXT [SEP]` (or `[CLS] TEXT [SEP] TEXT_B [SEP]`) and writes to
--output (a directory, built under a temporary name and renamed when complete):
  layer_L.png      for each layer L = 1..N: a grid of its heads, each a heatmap with the
                   word pieces on both axes (rows attend to columns)
  heads.png        every layer x head as one small panel
  attention.npz    attention (layers, heads, tokens, tokens) float32, tokens (str),
                   segment_ids (int32)
  head_view.html   a self-contained page (no network needed): pick a layer and heads and see
                   lines from each token to the tokens it attends to, as in bertviz
A text longer than --max-seq-len tokens (default: the model's positions) is truncated with
a warning.

example:
  bert-jax attention --model runs/demo --text "the cat sat on the mat ." --output attn/
"""


def add_arguments(parser) -> None:
    parser.add_argument("--model", required=True,
                        help="model directory (any source `bert-jax convert` reads)")
    parser.add_argument("--text", required=True, help="the text (quote it)")
    parser.add_argument("--text-b", default=None,
                        help="optional second text of a sentence pair (segment B)")
    parser.add_argument("--output", required=True, help="directory to write")
    parser.add_argument("--max-seq-len", type=int, default=None,
                        help="truncate to this many tokens incl. [CLS]/[SEP] "
                             "(default: the model's max positions)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace --output if it exists and is not empty")


def outputs(args) -> list:
    """The output directory, checked before the model is loaded (bert_jax/storage/outputs.py)."""
    from bert_jax.storage.outputs import PUBLISHED, Output

    return [Output("--output", args.output, PUBLISHED, inputs=(("--model", args.model),))]


def run(args) -> int:
    import os
    import sys
    import warnings

    import numpy as np

    from bert_jax.analysis import figures
    from bert_jax.analysis.attention_maps import TruncationWarning, text_attention
    from bert_jax.analysis.head_view import head_view_html
    from bert_jax.commands.features import write_npz
    from bert_jax.errors import UserError
    from bert_jax.interop.model_source import load_text_model
    from bert_jax.interop.model_writers import write_directory_atomically

    if not args.text.strip():
        raise UserError("--text is empty; expected some text to analyse")
    model = load_text_model(args.model, args.max_seq_len)  # resolved and read once
    config, params, tokenizer = model.config, model.params, model.tokenizer
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", TruncationWarning)
        result = text_attention(config, params, tokenizer, args.text, args.text_b,
                                args.max_seq_len)
    for warning in caught:
        print(f"bert-jax attention: warning: {warning.message}", file=sys.stderr)

    def fill(directory: str) -> None:
        for layer in range(config.num_layers):
            figure = figures.layer_figure(result.attention[layer], result.tokens, layer + 1)
            figures.save(figure, os.path.join(directory, f"layer_{layer + 1}.png"))
        figures.save(figures.heads_figure(result.attention), os.path.join(directory, "heads.png"))
        write_npz(os.path.join(directory, "attention.npz"), dict(
            attention=result.attention, tokens=np.array(result.tokens),
            segment_ids=result.segment_ids))
        title = args.text if args.text_b is None else f"{args.text} | {args.text_b}"
        with open(os.path.join(directory, "head_view.html"), "w", encoding="utf-8") as file:
            file.write(head_view_html(result.tokens, result.attention, title=title))

    write_directory_atomically(args.output, fill, args.overwrite)
    print(f"wrote {args.output}: layer_1..{config.num_layers}.png, heads.png, attention.npz "
          f"({config.num_layers} layers x {config.num_heads} heads x {len(result.tokens)} "
          "tokens), head_view.html")
    return 0
