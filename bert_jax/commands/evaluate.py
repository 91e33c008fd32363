"""`bert-jax evaluate TASK`: the metrics of a fine-tuned model on a labelled file."""

HELP = "metrics of a fine-tuned model on a labelled file, without training"
DESCRIPTION = """\
Predicts every example of --data (the training format) with --model and prints the task's
metrics (classify: loss, accuracy, f1, matthews_correlation; regress: loss, pearson,
spearman, mse), also written as JSON to --output (default: none). --data is read by the
columns the model recorded at training (extra columns ignored; a missing one is an error
naming it); --text-columns / --label-column name this file's own columns instead.

TASK `sts` takes any embedding model (a sentence-transformers directory such as
all-MiniLM-L6-v2, any BERT, or a `finetune sentence-embedding` run's best/) and a scored pair
file (STS-B TSV, or JSONL with sentence1/sentence2/score): the Pearson and Spearman
correlation (scipy) of the cosine similarity of the two sentences' embeddings with the scores.

examples:
  bert-jax evaluate classify --model runs/sst2/best --data ../shared/data/tasks/sst2/dev.tsv
  bert-jax evaluate sts --model MODEL --data ../shared/data/tasks/stsb/sts-dev.tsv
"""


def add_arguments(parser) -> None:
    from bert_jax.commands import add_progress_argument

    from bert_jax.tasks import finetuning_task_names  # reads no task module: no JAX

    tasks = [*finetuning_task_names(), "sts"]
    parser.add_argument("task", metavar="TASK", choices=tasks,
                        help="the task the model was fine-tuned for: " + ", ".join(tasks)
                             + " (sts: any embedding model on a scored pair file)")
    parser.add_argument("--model", required=True, help="a fine-tuned model (e.g. WORKDIR/best)")
    parser.add_argument("--data", required=True, metavar="FILE", help="labelled examples")
    parser.add_argument("--output", default=None, metavar="FILE", help="write metrics JSON here")
    parser.add_argument("--batch-size", type=int, default=64,
                        help="examples per batch (default 64)")
    parser.add_argument("--max-seq-len", type=int, default=None,
                        help="longest input in tokens (default: the training run's)")
    parser.add_argument("--null-threshold", type=float, default=None,
                        help="qa on SQuAD v2.0: the null threshold for exact/f1 (default: the "
                             "one `finetune qa` recorded in task.json, else 0.0)")
    from input_pipeline.tasks.columns import add_file_column_arguments, add_reading_arguments

    add_reading_arguments(parser)
    add_file_column_arguments(parser)
    add_progress_argument(parser)


def evaluate_file(model, task_name: str, path: str, batch_size: int = 64,
                  max_seq_len: int | None = None, header: bool | None = None,
                  progress: bool = True, null_threshold: float | None = None,
                  **reading) -> dict:
    """{'loss' (where the file carries the training objective), and the task's metrics} of
    `model` (a `ModelSource`, or a path) on the labelled file `path`; `header` and `reading`
    (delimiter, skip_bad_rows, text_columns, label_column) as `classification.apply_reading`."""
    from bert_jax.tasks import task_from_info
    from bert_jax.training import prediction
    from bert_jax.training.finetune import load_finetuned

    task, bundle, params, tokenizer, info = load_finetuned(model, batch_size, task_from_info,
                                                           task_name, max_seq_len)
    task = task_as_told(task, str(getattr(model, "name", model)), header, null_threshold,
                        **reading)
    max_seq_len = max_seq_len or info.get("max_seq_len", 128)
    examples = task.read_examples(path, tokenizer, max_seq_len)
    predictions, means = prediction.predict(bundle, params, examples, batch_size, max_seq_len,
                                            progress=progress)
    return prediction.file_metrics(task, predictions, means, examples.gold)


def evaluate_sts(model, data_path: str, batch_size: int = 32,
                 max_seq_len: int | None = None, progress: bool = False,
                 skip_bad_rows: bool = False) -> dict[str, float]:
    """`bert-jax evaluate sts`: pearson and spearman of the cosine similarity of any embedding
    model (a `ModelSource` or path: sentence-transformers, Hugging Face, bert-jax, fine-tuned)
    on a scored pair file (STS-B TSV, or JSONL with sentence1/sentence2/score)."""
    from bert_jax.embeddings.encoder import embed_texts, load_embedding_model
    from bert_jax.embeddings.similarity import correlations, pair_cosines
    from bert_jax.errors import UserError
    from bert_jax.tasks.sentence_embedding import read_pair_records, scores_of

    records = read_pair_records(data_path, skip_bad_rows)
    gold = scores_of(records)
    if gold is None:
        raise UserError(f"{data_path}: expected similarity scores (numbers) in the label "
                        "column, found class labels")
    embedding = load_embedding_model(model, max_seq_len=max_seq_len)
    texts = [first for _, first, _, _ in records] + [second for _, _, second, _ in records]
    embeddings = embed_texts(embedding, texts, batch_size, progress)  # (2N, D): one bar
    return correlations(pair_cosines(embeddings[:len(records)], embeddings[len(records):]),
                        gold)


def task_as_told(task, model: str, header: bool | None, null_threshold: float | None,
                 **reading):
    """A loaded task with evaluate's and predict's flags applied: the reading flags
    (`classification.apply_reading`) and a qa model's `--null-threshold`."""
    from bert_jax.tasks.classification import apply_reading
    from bert_jax.tasks.question_answering import with_null_threshold

    apply_reading(task, header, **reading)
    return with_null_threshold(task, null_threshold, model)


def reading_flags(args) -> dict:
    """The reading flags evaluate and predict share, for `classification.apply_reading`."""
    return dict(delimiter=args.delimiter, skip_bad_rows=args.skip_bad_rows,
                text_columns=args.text_columns, label_column=args.label_column)


def outputs(args) -> list:
    """The metrics file if asked for, checked first (bert_jax/storage/outputs.py)."""
    from bert_jax.storage.file_kinds import JSON
    from bert_jax.storage.outputs import Output

    return [Output("--output", args.output, inputs=(("--data", args.data),), ours=JSON)
            ] if args.output else []


def run(args) -> int:
    from bert_jax.storage import files, json_values
    from bert_jax.interop import model_source

    source = model_source.resolve(args.model)
    if args.task == "sts":  # any embedding model: its encoder may sit in a subdirectory
        metrics = evaluate_sts(source, args.data, args.batch_size, args.max_seq_len,
                               progress=not args.no_progress, skip_bad_rows=args.skip_bad_rows)
    else:
        metrics = evaluate_file(source, args.task, args.data, args.batch_size,
                                args.max_seq_len, args.header, progress=not args.no_progress,
                                null_threshold=args.null_threshold, **reading_flags(args))
    for name, value in metrics.items():
        print(f"{name}: {value:.4f}")
    if args.output:
        with files.atomic_write(args.output) as file:
            json_values.dump(dict(model=args.model, data=args.data, metrics=metrics), file,
                             indent=2)
    return 0
