"""`bert-jax vocab`: train a WordPiece, SentencePiece or byte-level BPE vocabulary on raw text."""

import sys

HELP = "train a WordPiece, SentencePiece or byte-level BPE vocabulary on raw text"
DESCRIPTION = """\
Train a vocabulary with BERT's special tokens [PAD] [UNK] [CLS] [SEP] [MASK] at ids 0-4.
wordpiece writes DIR/vocab.txt (BERT's normalisation; Hugging Face `tokenizers`);
sentencepiece writes DIR/sentencepiece.model and DIR/vocab.txt (its pieces in id order);
bpe writes DIR/tokenizer.json and DIR/tokenizer_config.json, a byte-level BPE of
ModernBERT's kind (NFC, GPT-2's bytes so no text is unknown, [MASK] taking the space before
it, the template [CLS] A [SEP] B [SEP]), which transformers' AutoTokenizer also loads.
Each directory is accepted by `bert-jax create-data --vocab DIR`. --size is a ceiling:
training stops earlier when the text runs out of pieces to add, and says so.

examples:
  bert-jax vocab --size 30522 --input ../shared/data/corpus/war_and_peace.bert.txt --output vocab/
  bert-jax vocab --type sentencepiece --size 8000 --format prose \
      --input '../shared/data/corpus/*_works.txt' --output spm/
  bert-jax vocab --type bpe --size 8000 --format prose \
      --input '../shared/data/corpus/*_works.txt' --output bpe/
"""


def add_arguments(parser) -> None:
    parser.add_argument("--type", choices=("wordpiece", "sentencepiece", "bpe"),
                        default="wordpiece",
                        help="the kind of vocabulary: bpe is ModernBERT's byte-level BPE "
                             "(tokenizer.json) (default: wordpiece)")
    parser.add_argument("--size", type=int, required=True,
                        help="number of tokens in the vocabulary, special tokens included")
    parser.add_argument("--input", nargs="+", required=True, metavar="PATTERN",
                        help="training text: files or globs (quote them), .gz allowed")
    parser.add_argument("--output", required=True, help="directory to write the vocabulary to")
    parser.add_argument("--format", choices=("bert", "prose"), default="bert",
                        dest="input_format",
                        help="bert: one sentence a line; prose: paragraphs (default: bert)")
    parser.add_argument("--encoding-errors", choices=("strict", "replace"), default="strict",
                        help="bytes that are not UTF-8: stop (strict) or replace them "
                             "(default: strict)")
    case = parser.add_mutually_exclusive_group()
    case.add_argument("--lowercase", dest="lowercase", action="store_true", default=None,
                      help="lower-case the text (default for wordpiece)")
    case.add_argument("--no-lowercase", dest="lowercase", action="store_false",
                      help="keep case (default for sentencepiece and bpe)")


def outputs(args) -> list:
    """The vocabulary's directory, checked before training (bert_jax/storage/outputs.py)."""
    from bert_jax.storage.outputs import DIRECTORY, Output

    return [Output("--output", args.output, DIRECTORY,
                   inputs=tuple(("--input", pattern) for pattern in args.input))]


def run(args) -> int:
    from input_pipeline import vocabulary
    from bert_jax.commands.create_data import warn_if_prose
    warn_if_prose(args.input, args.input_format)
    if args.type == "wordpiece":
        lowercase = True if args.lowercase is None else args.lowercase
        path = vocabulary.train_wordpiece(args.input, args.size, args.output, lowercase,
                                          input_format=args.input_format,
                                          encoding_errors=args.encoding_errors)
    else:
        lowercase = bool(args.lowercase)
        train = (vocabulary.train_sentencepiece if args.type == "sentencepiece"
                 else vocabulary.train_bpe)
        path = train(args.input, args.size, args.output, lowercase,
                     input_format=args.input_format, encoding_errors=args.encoding_errors)
    from input_pipeline.tokenization import load_tokenizer
    size = load_tokenizer(args.output).vocab_size
    print(f"wrote {path} ({size} tokens, {'lower-cased' if lowercase else 'cased'})")
    if size < args.size:
        print(smaller_than_asked(size, args.size, args.type), file=sys.stderr)
    return 0


def smaller_than_asked(size: int, asked: int, kind: str) -> str:
    """Why the vocabulary written has fewer tokens than --size asked for."""
    why = ("SentencePiece keeps only pieces the text supports (its limit is soft)"
           if kind == "sentencepiece" else
           f"{'WordPiece' if kind == 'wordpiece' else 'BPE'} training adds the most frequent "
           "pair of pieces until --size is reached or no pair occurs at least twice (every "
           "frequent word is already one token)")
    return (f"note: the vocabulary has {size:,} tokens, fewer than the {asked:,} asked for: "
            f"{why}, and this text ran out first; more (or more varied) text gives more "
            "tokens")
