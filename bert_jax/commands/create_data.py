"""`bert-jax create-data`: raw text to TFRecord shards (pre-masked, or masked-LM only) and a
manifest."""

import os
import sys

HELP = "turn raw text into TFRecord shards for pre-training (pre-masked, or masked-LM only)"
DESCRIPTION = """\
Make BERT pre-training instances (segment pairs with next-sentence labels and masked
tokens, as google-research/bert's create_pretraining_data.py makes them) from raw text and
write them as TFRecord shards with a manifest.json beside them. Streams in bounded memory
and uses --workers processes; the output depends only on the inputs and --seed.

--objective mlm makes masked-LM-only rows instead (ModernBERT's objective): each document
cut into [CLS] text [SEP] sequences of up to --max-seq-len tokens, packed up to
--max-sequences-per-row to a row, no pairs, no next-sentence labels and no masks: training
draws them when it reads the rows (run config objective mlm, data.masking_rate), so one set
of shards serves any masking rate. The mask, pair and dupe flags do not apply to it.

Input: files in BERT format (one sentence per line, a blank line between documents),
plain prose (--format prose), .gz files, globs, or a prepared TFDS dataset as
tfds:NAME[:SPLIT] (with --tfds-data-dir). The vocabulary is a vocab.txt, a SentencePiece
model or a tokenizer.json (each sentence tokenized as transformers' AutoTokenizer does);
manifest.json records its fingerprint, and training refuses shards made with another.
Inputs, the vocabulary and the output directory may be gs:// paths.

examples:
  bert-jax create-data --input ../shared/data/corpus/war_and_peace.bert.txt --vocab vocab/ \
      --output-dir shards/train --num-shards 16 --max-seq-len 128 --dupe-factor 10
  bert-jax create-data --input 'gs://bucket/text/*.txt' --vocab gs://bucket/vocab/vocab.txt \
      --output-dir gs://bucket/shards --num-shards 1024
  bert-jax create-data --input ../shared/data/corpus/war_and_peace.bert.txt --vocab vocab/ \
      --output-dir shards/mlm --objective mlm --max-seq-len 1024
"""

# The flags of objective mlm_nsp's masks and pairs, with their defaults: objective mlm
# refuses them when given (None = not given), since its rows have neither.
MASK_AND_PAIR_DEFAULTS = {"max_predictions": 20, "masked_lm_prob": 0.15, "dupe_factor": 10,
                          "short_seq_prob": 0.1, "random_token": "uniform",
                          "whole_word_mask": False}


def add_arguments(parser) -> None:
    from bert_jax.commands import add_progress_argument

    parser.add_argument("--input", nargs="+", required=True, metavar="PATTERN",
                        help="input files, globs (quote them) or tfds:NAME[:SPLIT] specs")
    parser.add_argument("--vocab", required=True,
                        help="vocab.txt, a SentencePiece .model, a tokenizer.json (e.g. "
                             "ModernBERT's byte-level BPE), or a directory holding one (a "
                             "model directory: its own tokenizer)")
    parser.add_argument("--output-dir", required=True,
                        help="directory for the shards and manifest.json (created if needed)")
    parser.add_argument("--num-shards", type=int, default=16,
                        help="number of output shards (default: 16); use at least one per "
                             "training host")
    parser.add_argument("--max-seq-len", type=int, default=128,
                        help="tokens per instance including [CLS] and [SEP]s (default: 128)")
    parser.add_argument("--objective", choices=("mlm_nsp", "mlm"), default="mlm_nsp",
                        help="mlm_nsp: BERT's segment pairs with next-sentence labels and "
                             "masks drawn now; mlm: masked-LM-only sequences, packed, masks "
                             "drawn when training reads them (default: mlm_nsp)")
    parser.add_argument("--max-predictions", type=int, default=None,
                        help="masked positions stored per instance (default: 20)")
    parser.add_argument("--masked-lm-prob", type=float, default=None,
                        help="fraction of tokens to mask (default: 0.15); 0 writes unmasked "
                             "shards for the reader's dynamic masking")
    parser.add_argument("--dupe-factor", type=int, default=None,
                        help="passes over the corpus, each with new pairs and masks "
                             "(default: 10)")
    parser.add_argument("--short-seq-prob", type=float, default=None,
                        help="chance that a document targets a shorter random length "
                             "(default: 0.1)")
    parser.add_argument("--random-token", choices=("uniform", "unigram"), default=None,
                        help="the 10%% random replacements: uniform over the vocabulary (as "
                             "the original code) or from the corpus unigram distribution "
                             "(default: uniform)")
    parser.add_argument("--pack", action="store_true",
                        help="pack up to --max-sequences-per-row instances into each "
                             "--max-seq-len row (shortest-pack-first), so few tokens are "
                             "padding; train on them with data.max_sequences_per_row unset "
                             "or equal (--objective mlm always packs)")
    parser.add_argument("--max-sequences-per-row", type=int, default=3,
                        help="with --pack or --objective mlm: instances per row at most "
                             "(default: 3, as MLPerf)")
    parser.add_argument("--whole-word-mask", action="store_true", default=None,
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


def mask_and_pair_settings(args) -> dict:
    """The mask and pair flags' values (defaults where not given); objective mlm refuses
    any that was given, naming it."""
    from bert_jax.errors import UserError

    given = [name for name in MASK_AND_PAIR_DEFAULTS if getattr(args, name) is not None]
    if args.objective == "mlm" and given:
        flags = ", ".join("--" + name.replace("_", "-") for name in given)
        raise UserError(f"{flags}: not used with --objective mlm, whose rows hold no masks or "
                        "pairs (training draws the masks: data.masking_rate) and each "
                        "document once (every epoch draws new masks)")
    return {name: default if getattr(args, name) is None else getattr(args, name)
            for name, default in MASK_AND_PAIR_DEFAULTS.items()}


def sequences_per_row(args) -> int:
    """Rows of how many instances: 1 unless packed (--pack, or objective mlm, which packs
    up to --max-sequences-per-row, 1 meaning one sequence a row)."""
    from bert_jax.errors import UserError

    if args.objective == "mlm":
        if args.max_sequences_per_row < 1:
            raise UserError(f"--max-sequences-per-row {args.max_sequences_per_row}: need at "
                            "least 1")
        return args.max_sequences_per_row
    if args.pack and args.max_sequences_per_row < 2:
        raise UserError(f"--max-sequences-per-row {args.max_sequences_per_row}: --pack needs "
                        "at least 2 (1 is the unpacked format: leave out --pack)")
    return args.max_sequences_per_row if args.pack else 1


def outputs(args) -> list:
    """The shard directory, checked before any input is read (bert_jax/storage/outputs.py)."""
    from bert_jax.storage.outputs import DIRECTORY, Output

    return [Output("--output-dir", args.output_dir, DIRECTORY,
                   inputs=(*(("--input", pattern) for pattern in args.input),
                           ("--vocab", args.vocab)))]


def run(args) -> int:
    per_row = sequences_per_row(args)
    settings = mask_and_pair_settings(args)
    warn_if_prose(args.input, args.input_format)
    if args.runner == "beam":
        from input_pipeline.beam import create_pretraining_data_beam as create
        engine = dict(beam_options=args.beam_options)
    else:
        from input_pipeline.create_data import create_pretraining_data as create
        engine = dict(show_progress=not args.no_progress)
    manifest = create(
        args.input, args.vocab, args.output_dir, num_shards=args.num_shards,
        max_seq_len=args.max_seq_len, **settings, seed=args.seed, workers=args.workers,
        input_format=args.input_format,
        encoding_errors=args.encoding_errors, lowercase=args.lowercase,
        tfds_data_dir=args.tfds_data_dir, tfds_feature=args.tfds_feature,
        max_sequences_per_row=per_row, objective=args.objective, **engine)
    replaced = sum(manifest["replaced_bytes"].values())
    rows = (f" packed into {manifest['num_records']} rows of up to "
            f"{args.max_sequences_per_row}" if manifest["packed"] else "")
    kind = ("masked-LM-only sequences (masks are drawn when training reads them)"
            if args.objective == "mlm" else "instances")
    print(f"wrote {manifest['num_instances']} {kind}{rows} from "
          f"{manifest['num_documents']} documents to {len(manifest['shards'])} shards in "
          f"{args.output_dir}" + (f" ({replaced} non-UTF-8 bytes replaced)" if replaced else ""))
    print(f"real-token fraction {manifest['real_token_fraction']:.3f} (tokens that are not "
          f"padding, of {manifest['num_records']} x {args.max_seq_len})")
    if manifest["num_long_sentences"]:
        budget = args.max_seq_len - 3
        # --format prose already splits paragraphs into sentences: a long one is in the text.
        advice = ("Put one sentence per line, or use --format prose"
                  if args.input_format == "bert" else "Shorten them, or raise --max-seq-len")
        print(f"warning: {manifest['num_long_sentences']} sentence(s) (lines, in the bert "
              f"format) were longer than the {budget} tokens an instance holds; "
              f"{manifest['num_dropped_tokens']} of the corpus's {manifest['num_tokens']} tokens "
              f"were dropped (a sentence is never split across instances). {advice}",
              file=sys.stderr)
    return 0
