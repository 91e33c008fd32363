"""`bert-jax probe`: which heads track syntax? The probe of Clark et al. (2019) on a treebank."""

HELP = "score every attention head as a dependency parser on a CoNLL-U treebank (Clark et al.)"
DESCRIPTION = """\
Treats each attention head as a classifier that gives every word the word it attends to most
(or the word that attends to it most) as its syntactic head, and scores it against the gold
dependencies of --treebank (CoNLL-U, e.g. Universal Dependencies English-EWT), per relation,
next to fixed-offset baselines (-3..+3). Follows "What Does BERT Look At?" (Clark,
Khandelwal, Levy and Manning, 2019): word-level attention from word pieces (attention to a
word summed over its pieces, from a word averaged), [CLS]/[SEP] and self-attention ignored,
a nmod:poss word followed by 's scored by the clitic's prediction (the paper's special
case); `root` gets no row, since no head can point at the root.
Also measures each head's attention entropy and its attention to [CLS], [SEP], punctuation
and the token itself (section 3 of the paper).

Writes to --output (a directory, built under a temporary name and renamed when complete):
  report.json                 every relation's accuracy per direction, layer and head, the
                              offset baselines, the summary rows, the head statistics
  report.md                   the summary table: for each relation with at least --min-count
                              words, the best head vs the best offset; then the statistics
  best_heads.png              accuracy of every layer x head for the main relations
  attention_statistics.png    the head statistics as heatmaps
Sentences with more than --max-seq-len word pieces (incl. [CLS]/[SEP]) are skipped and
counted; multi-word tokens (1-2) and empty nodes (1.1) are not words and are skipped.

example:
  bert-jax probe --model runs/demo --treebank en_ewt-ud-test.conllu --output probe/
"""

# Shown in best_heads.png when the treebank has enough of them (UD relation names).
MAIN_RELATIONS = ("det", "nsubj", "obj", "amod", "case", "nmod:poss", "obl", "aux", "advmod",
                  "compound", "mark", "all")


def add_arguments(parser) -> None:
    parser.add_argument("--model", required=True,
                        help="model directory (any source `bert-jax convert` reads)")
    parser.add_argument("--treebank", required=True, help="CoNLL-U file")
    parser.add_argument("--output", required=True, help="directory to write")
    parser.add_argument("--max-seq-len", type=int, default=128,
                        help="skip sentences longer than this many word pieces incl. "
                             "[CLS]/[SEP] (default 128)")
    parser.add_argument("--batch-size", type=int, default=32,
                        help="sentences per forward pass (default 32)")
    parser.add_argument("--min-count", type=int, default=100,
                        help="report relations with at least this many words (default 100)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace --output if it exists and is not empty")


def outputs(args) -> list:
    """The output directory, checked before the model is loaded (bert_jax/storage/outputs.py)."""
    from bert_jax.storage.outputs import PUBLISHED, Output

    return [Output("--output", args.output, PUBLISHED,
                   inputs=(("--model", args.model), ("--treebank", args.treebank)))]


def run(args) -> int:
    import os

    from bert_jax.storage import json_values
    from bert_jax.analysis import figures
    from bert_jax.analysis.probe_report import report_dict, report_markdown
    from bert_jax.analysis.treebank import probe_treebank
    from bert_jax.errors import UserError
    from bert_jax.interop.model_source import load_text_model
    from bert_jax.interop.model_writers import write_directory_atomically
    from input_pipeline.tasks.conllu import read_conllu

    if args.batch_size < 1 or args.min_count < 1:
        raise UserError("--batch-size and --min-count must be at least 1")
    # A first pass validates the whole file before the model runs and sizes the progress bar.
    total = sum(1 for _ in read_conllu(args.treebank))
    if total == 0:
        raise UserError(f"{args.treebank}: no sentences found (expected CoNLL-U)")
    model = load_text_model(args.model, args.max_seq_len)  # resolved and read once
    config, params, tokenizer = model.config, model.params, model.tokenizer
    probe = probe_treebank(config, params, tokenizer, read_conllu(args.treebank),
                           args.max_seq_len, args.batch_size, total=total)
    if probe.sentences == 0:
        raise UserError(f"{args.treebank}: every sentence is longer than --max-seq-len "
                        f"{args.max_seq_len} word pieces")
    settings = dict(model=args.model, treebank=args.treebank, sentences=probe.sentences,
                    skipped_longer_than_max_seq_len=probe.skipped, max_seq_len=args.max_seq_len,
                    layers=config.num_layers, heads=config.num_heads,
                    sentences_per_second=round(probe.sentences / probe.seconds, 1))
    report = report_dict(probe.result, probe.statistics, settings, args.min_count)
    shown = [relation for relation in MAIN_RELATIONS
             if any(row["relation"] == relation for row in report["rows"])]

    def fill(directory: str) -> None:
        with open(os.path.join(directory, "report.json"), "w", encoding="utf-8") as file:
            json_values.dump(report, file, indent=1)
        with open(os.path.join(directory, "report.md"), "w", encoding="utf-8") as file:
            file.write(report_markdown(report, probe.statistics))
        figures.save(figures.probe_figure(probe.result, shown),
                     os.path.join(directory, "best_heads.png"))
        figures.save(figures.statistics_figure(probe.statistics),
                     os.path.join(directory, "attention_statistics.png"))

    write_directory_atomically(args.output, fill, args.overwrite)
    print(f"probed {probe.sentences} sentences ({probe.skipped} skipped as longer than "
          f"{args.max_seq_len} pieces) in {probe.seconds:.1f} s "
          f"({probe.sentences / probe.seconds:.1f} sentences/s)")
    print(f"{report['relations_beating_offset_by_10_points']} relations have a head beating "
          f"their best offset by >= 10 points; wrote {args.output}: report.json, report.md, "
          "best_heads.png, attention_statistics.png")
    return 0
