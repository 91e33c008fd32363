"""`bert-jax embed`: one sentence embedding per line of a text file, saved as a .npy array."""

HELP = "sentence embeddings (mean/cls/max pooling) of each line of a file, into a .npy file"
DESCRIPTION = """\
Reads --input (UTF-8, one text per line) and writes --output, a float32 .npy array of shape
(lines, dimension) in input order: row i is the embedding of line i+1. An empty line is kept
as a row: the embedding of the empty text ([CLS] [SEP]), as sentence-transformers gives.

How a model pools comes from its directory: a sentence-transformers directory (modules.json,
1_Pooling/config.json, sentence_bert_config.json, a Normalize module) is applied as
SentenceTransformer(dir).encode applies it, so --model on all-MiniLM-L6-v2 gives its
embeddings (mean pooling, normalised, 256 tokens). A model trained by `bert-jax finetune
sentence-embedding` (WORKDIR/best) pools as it was trained. Any other model directory pools
by the mean over real tokens, unnormalised, up to the model's 512 positions. --pool, --normalize
and --max-seq-len override the directory's settings.

Inputs are sorted by length and batched into a few padded lengths (16, 32, 64, ...), so
short lines waste little work and the encoder compiles once per length. The output is
written under a temporary name and renamed when complete.

example:
  bert-jax embed --model path/to/all-MiniLM-L6-v2 --input sentences.txt --output embeddings.npy
"""


def add_arguments(parser) -> None:
    from bert_jax.commands import add_progress_argument

    import argparse

    parser.add_argument("--model", required=True,
                        help="model directory: sentence-transformers, Hugging Face, bert-jax "
                             "(any source `bert-jax convert` reads)")
    parser.add_argument("--input", required=True, help="text file: one text a line")
    parser.add_argument("--output", required=True, help=".npy file to write")
    from bert_jax.commands import POOLING

    parser.add_argument("--pool", choices=POOLING, default=None,
                        help="the mean or maximum over real (non-padding) tokens, or the "
                             "[CLS] vector, as `features --pool` (default: the model "
                             "directory's pooling, else mean)")
    parser.add_argument("--normalize", action=argparse.BooleanOptionalAction, default=None,
                        help="scale each embedding to unit length (default: as the model "
                             "directory says, i.e. if it lists a Normalize module)")
    parser.add_argument("--batch-size", type=int, default=32,
                        help="texts per forward pass (default 32)")
    parser.add_argument("--max-seq-len", type=int, default=None,
                        help="truncate each text to this many tokens incl. [CLS]/[SEP] "
                             "(default: the directory's max_seq_length, else the model's "
                             "positions)")
    add_progress_argument(parser)


def write_npy(path: str, array) -> None:
    """np.save, published only when complete, with the user's umask (the file layer's
    writer; mkstemp's had made it -rw------- where every other output is -rw-r--r--)."""
    import numpy as np

    from bert_jax.storage import files

    with files.atomic_write(path, "wb") as file:
        np.save(file, array)


def outputs(args) -> list:
    """The .npy file, checked before the model is loaded (bert_jax/storage/outputs.py)."""
    from bert_jax.storage.file_kinds import NPY
    from bert_jax.storage.outputs import Output

    return [Output("--output", args.output, inputs=(("--input", args.input),), ours=NPY)]


def run(args) -> int:
    from bert_jax.embeddings.encoder import embed_texts, load_embedding_model, read_lines
    from bert_jax.errors import UserError
    from bert_jax.storage.outputs import check_space

    if args.batch_size < 1:
        raise UserError(f"--batch-size must be at least 1, got {args.batch_size}")
    if not args.output.endswith(".npy"):
        raise UserError(f"--output {args.output}: expected a .npy file name")
    texts = read_lines(args.input)
    model = load_embedding_model(args.model, (args.pool,) if args.pool else None,
                                 args.normalize, args.max_seq_len)
    # N x H float32 and the header: known before the work, so a full disk is said now.
    check_space("--output", args.output, len(texts) * model.dimension * 4 + 128)
    embeddings = embed_texts(model, texts, args.batch_size,
                             progress=len(texts) > args.batch_size and not args.no_progress)
    write_npy(args.output, embeddings)
    print(f"wrote {args.output}: {embeddings.shape[0]} x {embeddings.shape[1]} float32 "
          f"({model.settings.describe()})")
    return 0
