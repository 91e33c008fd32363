"""`bert-jax predict`: run a fine-tuned model over a file, predictions in input order."""

HELP = "predict with a fine-tuned model (finetune's WORKDIR/best, or an HF task model)"
DESCRIPTION = """\
Reads --input (plain text: one text per line, `A<TAB>B` for a pair, an empty line the empty
text; or a file in the format the model was trained on, labels not needed) and writes one
prediction per input (per line of a text file), in input order, to --output: `.jsonl` ->
one object per input with `label` (and `probabilities` for classification, and the input
row's `columns` when it has some);
`.tsv` -> the input's columns (or texts) and a `label` column. Label names are the
training file's. A TSV/CSV/JSONL input is read by the columns the model recorded (extra
columns ignored, kept in the output; a missing one is an error naming it;
--text-columns names this file's own). The output is written under a temporary name and
renamed; it may not be --input, and an existing file there must be of the kind written
(JSON Lines for .jsonl, text for .tsv), never a data file of another kind.

--model may be a fine-tuning run's work directory: its newest finished checkpoint is used,
and stderr says which step, and, while the run is still training, that it is (a later
checkpoint may predict otherwise; WORKDIR/best is the model the run chose).

example:
  bert-jax predict --model runs/sst2/best --input sentences.txt --output predictions.jsonl
"""


def add_arguments(parser) -> None:
    from bert_jax.commands import add_progress_argument

    parser.add_argument("--model", required=True,
                        help="a fine-tuned model: WORKDIR/best, a fine-tuning run, or a Hugging "
                             "Face BertForSequenceClassification/TokenClassification directory")
    parser.add_argument("--input", required=True, metavar="FILE", help="texts to predict")
    parser.add_argument("--output", required=True, metavar="FILE", help=".jsonl or .tsv")
    parser.add_argument("--batch-size", type=int, default=64,
                        help="examples per batch (default 64)")
    parser.add_argument("--max-seq-len", type=int, default=None,
                        help="longest input in tokens (default: the training run's)")
    parser.add_argument("--null-threshold", type=float, default=None,
                        help="qa on SQuAD v2.0: answer \"\" when the null score - the best "
                             "span's exceeds this (default: the one `finetune qa` chose on its "
                             "--eval file and recorded in task.json, else 0.0)")
    from input_pipeline.tasks.columns import add_file_column_arguments, add_reading_arguments

    add_reading_arguments(parser)
    add_file_column_arguments(parser)
    add_progress_argument(parser)


def outputs(args) -> list:
    """The prediction file, checked before the model is loaded (bert_jax/storage/outputs.py)."""
    from bert_jax.storage.file_kinds import kind_by_extension
    from bert_jax.storage.outputs import Output

    return [Output("--output", args.output, inputs=(("--input", args.input),
                                                    ("--model", args.model)),
                   ours=kind_by_extension(args.output))]


def say_which_checkpoint(source) -> None:
    """For a training run given as --model: which step's checkpoint is used (its newest
    finished one), and, while the run still holds its work directory, that it is still going
    (so a later step may predict otherwise). One line on stderr; the predictions are made."""
    import sys

    from bert_jax.interop.source_kinds import finished_steps
    from bert_jax.training.run_lock import running_holder

    if source.kind != "training-run":
        return
    steps = finished_steps(source.directory)
    holder = running_holder(source.directory)
    line = (f"--model {source.name}: a training run; using its newest finished checkpoint, "
            f"step {steps[-1] if steps else '?'}")
    if holder is not None:
        line += (f"; the run is still going (pid {holder.get('pid', '?')} on "
                 f"{holder.get('host', '?')}, started {holder.get('started', '?')}), so a "
                 "later checkpoint may predict otherwise")
    print(line, file=sys.stderr)


def run(args) -> int:
    from bert_jax.interop import model_source
    from bert_jax.tasks import task_from_info
    from bert_jax.commands.evaluate import reading_flags, task_as_told
    from bert_jax.training import prediction
    from bert_jax.training.finetune import load_finetuned

    source = model_source.resolve(args.model)
    say_which_checkpoint(source)
    info = source.task_info()  # task.json: no weights read yet
    if info is not None:  # an output it cannot write is said before any work
        task_from_info(info).check_prediction_path(args.output)
    finetuned = load_finetuned(source, args.batch_size, task_from_info,
                               max_seq_len=args.max_seq_len)
    finetuned = (task_as_told(finetuned[0], args.model, args.header, args.null_threshold,
                              **reading_flags(args)), *finetuned[1:])
    task, examples, predictions = prediction.predict_inputs(
        finetuned,
        lambda task, tokenizer, max_seq_len: task.read_examples(
            args.input, tokenizer, max_seq_len, with_labels=False),
        args.batch_size, args.max_seq_len, progress=not args.no_progress)
    task.write_predictions(args.output, examples, predictions)
    # One per input the user gave (a question, not each of its windows).
    print(f"wrote {task.num_inputs(examples)} predictions to {args.output}")
    return 0
