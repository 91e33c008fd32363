"""`bert-jax create-data`: raw text to pre-masked TFRecord shards and a manifest."""

import os
import sys

HELP = "turn raw text into pre-masked TFRecord shards for pre-training"
DESCRIPTION = """\
Make BERT pre-training instances (segment pairs with next-sentence labels and masked
tokens, as google-research/bert's create_pretraining_data.py makes them) from raw text and
write them as TFRecord shards with a manifest.json beside them. Streams in bounded memory
and uses --workers processes; the output depends only on the inputs and --seed.

Input: files in BERT format (one sentence per line, a blank line between documents),
plain prose (--format prose), .gz files, globs, or a prepared TFDS dataset as
tfds:NAME[:SPLIT] (with --tfds-data-dir). Inputs, the vocabulary and the output directory
may be gs:// paths.

examples:
  bert-jax create-data --input ../shared/data/corpus/war_and_peace.bert.txt --vocab vocab/ \
      --output-dir shards/train --num-shards 16 --max-seq-len 128 --dupe-factor 10
  bert-jax create-data --input 'gs://bucket/text/*.txt' --vocab gs://bucket/vocab/vocab.txt \
      --output-dir gs://bucket/shards --num-shards 1024
"""


def add_arguments(parser) -> None:
    from bert_jax.commands import add_progress_argument

    parser.add_argument("--input", nargs="+", required=True, metavar="PATTERN",
                        help="input files, globs (quote them) or tfds:NAME[:SPLIT] specs")
    parser.add_argument("--vocab", required=True,
                        help="vocab.txt, a SentencePiece .model, or a directory holding one")
    parser.add_argument("--output-dir", required=True,
                        help="directory for the shards and manifest.json (created if needed)")
    parser.add_argument("--num-shards", type=int, default=16,
                        help="number of output shards (default: 16); use at least one per "
                             "training host")
    parser.add_argument("--max-seq-len", type=int, default=128,
                        help="tokens per instance including [CLS] and [SEP]s (default: 128)")
    parser.add_argument("--max-predictions", type=int, default=20,
                        help="masked positions stored per instance (default: 20)")
    parser.add_argument("--masked-lm-prob", type=float, default=0.15,
                        help="fraction of tokens to mask (default: 0.15); 0 writes unmasked "
                             "shards for the reader's dynamic masking")
    parser.add_argument("--dupe-factor", type=int, default=10,
                        help="passes over the corpus, each with new pairs and masks "
                             "(default: 10)")
    parser.add_argument("--short-seq-prob", type=float, default=0.1,
                        help="chance that a document targets a shorter random length "
                             "(default: 0.1)")
    parser.add_argument("--random-token", choices=("uniform", "unigram"), default="uniform",
                        help="the 10%% random replacements: uniform over the vocabulary (as "
                             "the original code) or from the corpus unigram distribution "
                             "(default: uniform)")
    parser.add_argument("--pack", action="store_true",
                        help="pack up to --max-sequences-per-row instances into each "
                             "--max-seq-len row (shortest-pack-first), so few tokens are "
                             "padding; train on them with data.max_sequences_per_row unset "
                             "or equal")
    parser.add_argument("--max-sequences-per-row", type=int, default=3,
                        help="with --pack: instances per row at most (default: 3, as MLPerf)")
    parser.add_argument("--whole-word-mask", action="store_true",
                        help="mask every piece of a word together")
    parser.add_argument("--seed", type=int, default=12345,
                        help="random seed; the shards are a function of it and the inputs "
                             "(default: 12345)")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                        help="worker processes (default: all cores); the output does not "
                             "depend on it")
    parser.add_argument("--format", choices=("bert", "prose"), default="bert",
                        dest="input_format",
                        help="bert: one sentence a line, blank line between documents; "
                             "prose: paragraphs split into sentences (default: bert)")
    parser.add_argument("--encoding-errors", choices=("strict", "replace"), default="strict",
                        help="bytes that are not UTF-8: strict stops naming the file, line "
                             "and byte offset; replace substitutes U+FFFD and counts them in "
                             "the manifest (default: strict)")
    case = parser.add_mutually_exclusive_group()
    case.add_argument("--lowercase", dest="lowercase", action="store_true", default=None,
                      help="lower-case and strip accents (default: from the vocabulary)")
    case.add_argument("--no-lowercase", dest="lowercase", action="store_false",
                      help="keep case and accents (cased vocabularies)")
    parser.add_argument("--tfds-data-dir", default=None,
                        help="TFDS data_dir holding prepared datasets for tfds: inputs")
    parser.add_argument("--tfds-feature", default="text",
                        help="the text feature of tfds: inputs (default: text)")
    parser.add_argument("--runner", choices=("local", "beam"), default="local",
                        help="local: this machine's processes; beam: an Apache Beam pipeline "
                             "writing the same shards (pip install 'bert-jax[beam]'; "
                             "default: local)")
    parser.add_argument("--beam-options", default=None, metavar="OPTIONS",
                        help="Beam pipeline options, quoted as one string, e.g. "
                             "\"--runner=DataflowRunner --project P --region R "
                             "--temp_location gs://B/tmp\" (default: the DirectRunner, one "
                             "process per --workers)")
    add_progress_argument(parser)


def warn_if_prose(inputs, input_format) -> None:
    """Hard-wrapped prose given as BERT format is cut into line-sized sentences: say so."""
    from input_pipeline.sources import prose_format_warning
    warning = prose_format_warning(inputs) if input_format == "bert" else None
    if warning:
        print(warning, file=sys.stderr)


def outputs(args) -> list:
    """The shard directory, checked before any input is read (bert_jax/storage/outputs.py)."""
    from bert_jax.storage.outputs import DIRECTORY, Output

    return [Output("--output-dir", args.output_dir, DIRECTORY)]


def run(args) -> int:
    if args.pack and args.max_sequences_per_row < 2:
        from bert_jax.errors import UserError
        raise UserError(f"--max-sequences-per-row {args.max_sequences_per_row}: --pack needs "
                        "at least 2 (1 is the unpacked format: leave out --pack)")
    warn_if_prose(args.input, args.input_format)
    if args.runner == "beam":
        from input_pipeline.beam import create_pretraining_data_beam as create
        engine = dict(beam_options=args.beam_options)
    else:
        from input_pipeline.create_data import create_pretraining_data as create
        engine = dict(show_progress=not args.no_progress)
    manifest = create(
        args.input, args.vocab, args.output_dir, num_shards=args.num_shards,
        max_seq_len=args.max_seq_len, max_predictions=args.max_predictions,
        masked_lm_prob=args.masked_lm_prob, dupe_factor=args.dupe_factor,
        short_seq_prob=args.short_seq_prob, random_token=args.random_token,
        whole_word_mask=args.whole_word_mask, seed=args.seed, workers=args.workers,
        input_format=args.input_format,
        encoding_errors=args.encoding_errors, lowercase=args.lowercase,
        tfds_data_dir=args.tfds_data_dir, tfds_feature=args.tfds_feature,
        max_sequences_per_row=args.max_sequences_per_row if args.pack else 1, **engine)
    replaced = sum(manifest["replaced_bytes"].values())
    rows = (f" packed into {manifest['num_records']} rows of up to "
            f"{args.max_sequences_per_row}" if manifest["packed"] else "")
    print(f"wrote {manifest['num_instances']} instances{rows} from "
          f"{manifest['num_documents']} documents to {len(manifest['shards'])} shards in "
          f"{args.output_dir}" + (f" ({replaced} non-UTF-8 bytes replaced)" if replaced else ""))
    print(f"real-token fraction {manifest['real_token_fraction']:.3f} (tokens that are not "
          f"padding, of {manifest['num_records']} x {args.max_seq_len})")
    if manifest["num_long_sentences"]:
        budget = args.max_seq_len - 3
        print(f"warning: {manifest['num_long_sentences']} sentence(s) (lines, in the bert "
              f"format) were longer than the {budget} tokens an instance holds; "
              f"{manifest['num_dropped_tokens']} of the corpus's {manifest['num_tokens']} tokens "
              "were dropped (a sentence is never split across instances). Put one sentence "
              "per line, or use --format prose", file=sys.stderr)
    return 0
