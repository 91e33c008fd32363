"""The nine GLUE tasks' data, as labelled rows, from the three places it is kept.

    GLUE download   DIR/CoLA/train.tsv, DIR/MRPC/dev.tsv, DIR/MNLI/dev_matched.tsv, ...: the
                    layout `download_glue_data.py` writes, each task with its own columns (CoLA
                    without a header, MRPC's `Quality`/`#1 String`/`#2 String` after a
                    byte-order mark, STS-B's `score`, MNLI's `gold_label`, ...).
    tfds            `tfds:glue`: the prepared `glue/cola`, `glue/mrpc`, ... builders of
                    tensorflow-datasets in a local data_dir (`tfds build` first: offline).
    HF datasets     DIR/cola/, DIR/mrpc/, ... as the `datasets` library saves a DatasetDict
                    (`save_to_disk`: train/data-00000-of-00001.arrow, ...) or as the Hub's
                    `nyu-mll/glue` repository stores it (train-00000-of-00001.parquet, ...).
                    Read with pyarrow, the library `datasets` itself stores and reads these
                    tables with (Arrow IPC streams, Parquet), so that reading one needs no
                    `datasets` install (it would add dill, multiprocess, pandas and xxhash).

Every source gives the same rows: (text[, text]) and the label as the GLUE download spells it
(`0`/`1`, `entailment`/`not_entailment`, MNLI's three names, STS-B's score), so a table does
not depend on where its data came from. tfds and HF store labels as class ids; their class
names (GLUE's own order, the same in both) map them back. `write_jsonl` writes rows where a
fine-tuning run reads them (`text_a`, `text_b`, `label`).
"""

import dataclasses
import json

from bert_jax.errors import UserError
from bert_jax.storage import files
from input_pipeline.tasks import columns

TFDS_PREFIX = "tfds:"
TEXT_KEYS = ("text_a", "text_b")  # the columns `write_jsonl` writes and a run reads


@dataclasses.dataclass(frozen=True)
class GlueTask:
    name: str  # as the tfds/HF configs spell it: cola, sst2, ...
    directory: str  # the GLUE download's directory: CoLA, SST-2, ...
    tsv_columns: columns.ColumnSpec  # the download's text and label columns
    dataset_columns: tuple[str, ...]  # the tfds/HF text features
    class_names: tuple[str, ...]  # label id -> the download's spelling; () = a score
    dev_splits: tuple[str, ...] = ("validation",)  # tfds/HF split names of its dev sets
    dev_files: tuple[str, ...] = ("dev.tsv",)  # the download's, in the same order

    @property
    def regression(self) -> bool:
        return not self.class_names


def _named(texts, label) -> columns.ColumnSpec:
    return columns.ColumnSpec(tuple(texts), label, header=True)


_BINARY = ("0", "1")
_NLI = ("entailment", "not_entailment")
TASKS = {task.name: task for task in [
    # CoLA's download has no header: source, label, the original label, sentence.
    GlueTask("cola", "CoLA", columns.ColumnSpec((3,), 1, header=False), ("sentence",), _BINARY),
    GlueTask("sst2", "SST-2", _named(["sentence"], "label"), ("sentence",), _BINARY),
    GlueTask("mrpc", "MRPC", _named(["#1 String", "#2 String"], "Quality"),
             ("sentence1", "sentence2"), _BINARY),
    GlueTask("stsb", "STS-B", _named(["sentence1", "sentence2"], "score"),
             ("sentence1", "sentence2"), ()),
    GlueTask("qqp", "QQP", _named(["question1", "question2"], "is_duplicate"),
             ("question1", "question2"), _BINARY),
    GlueTask("mnli", "MNLI", _named(["sentence1", "sentence2"], "gold_label"),
             ("premise", "hypothesis"), ("entailment", "neutral", "contradiction"),
             ("validation_matched", "validation_mismatched"),
             ("dev_matched.tsv", "dev_mismatched.tsv")),
    GlueTask("qnli", "QNLI", _named(["question", "sentence"], "label"),
             ("question", "sentence"), _NLI),
    GlueTask("rte", "RTE", _named(["sentence1", "sentence2"], "label"),
             ("sentence1", "sentence2"), _NLI),
    # WNLI's ids are 0 not_entailment, 1 entailment, its download's labels 0 and 1.
    GlueTask("wnli", "WNLI", _named(["sentence1", "sentence2"], "label"),
             ("sentence1", "sentence2"), _BINARY),
]}


def task(name: str) -> GlueTask:
    if name not in TASKS:
        raise UserError(f"--tasks: unknown GLUE task {name!r}; expected some of "
                        f"{','.join(TASKS)}")
    return TASKS[name]


def source_kind(data: str, glue_task: GlueTask) -> str:
    """'tfds', 'tsv' (the GLUE download), 'arrow' (`save_to_disk`) or 'parquet' for one task;
    a directory holding none of them is an error naming what was looked for."""
    if data.startswith(TFDS_PREFIX):
        return "tfds"
    if files.exists(files.join(data, glue_task.directory, "train.tsv")):
        return "tsv"
    directory = files.join(data, glue_task.name)
    if files.exists(files.join(directory, "train", "state.json")):
        return "arrow"
    if files.glob(files.join(directory, "train-*.parquet")):
        return "parquet"
    raise UserError(f"{data}: no {glue_task.directory}/train.tsv (the GLUE download), "
                    f"{glue_task.name}/train/ (datasets' save_to_disk) or "
                    f"{glue_task.name}/train-*.parquet (the Hub's files) for task "
                    f"{glue_task.name}")


def read_split(data: str, glue_task: GlueTask, split: int | str,
               tfds_data_dir: str | None = None) -> list[columns.Row]:
    """The rows of `split`: 'train', or the index of one of the task's dev sets."""
    kind = source_kind(data, glue_task)
    if kind == "tsv":
        name = "train.tsv" if split == "train" else glue_task.dev_files[split]
        path = files.join(data, glue_task.directory, name)
        rows = columns.read_rows(path, glue_task.tsv_columns,
                                 numeric_labels=glue_task.regression)
        _check_labels(rows, path, glue_task)
        return rows
    split_name = "train" if split == "train" else glue_task.dev_splits[split]
    if kind == "tfds":
        records, where = _tfds_records(data, glue_task, split_name, tfds_data_dir)
    else:
        records, where = _arrow_records(data, glue_task, split_name, kind)
    return [_dataset_row(record, glue_task, where, number)
            for number, record in enumerate(records, start=1)]


def _check_labels(rows: list[columns.Row], path: str, glue_task: GlueTask) -> None:
    """Every label one of the task's classes (a typo, "O" for "0", would otherwise train as a
    class of its own and score as a wrong answer) or, STS-B, a number."""
    expected = ("a similarity score, a number" if glue_task.regression
                else f"one of {', '.join(glue_task.class_names)}")
    for row in rows:
        if not (columns.is_number(row.label) if glue_task.regression
                else row.label in glue_task.class_names):
            raise UserError(f"{path}:{row.line}: label {row.label!r}; GLUE's {glue_task.name} "
                            f"expects {expected}")


def _dataset_row(record: dict, glue_task: GlueTask, where: str, number: int) -> columns.Row:
    """A tfds/HF example (text features as str or bytes, `label` an id or a score) as a row."""
    missing = [key for key in (*glue_task.dataset_columns, "label") if key not in record]
    if missing:
        raise UserError(f"{where}: example {number} has no {missing}; GLUE's {glue_task.name} "
                        f"has {[*glue_task.dataset_columns, 'label']}, found {sorted(record)}")
    texts = tuple(_text(record[key]) for key in glue_task.dataset_columns)
    label = record["label"]
    if glue_task.regression:
        return columns.Row(texts, repr(float(label)), number)
    if not 0 <= int(label) < len(glue_task.class_names):  # the test split's -1
        raise UserError(f"{where}: example {number} has label {label}; expected a class id "
                        f"0..{len(glue_task.class_names) - 1} (the test split has no labels)")
    return columns.Row(texts, glue_task.class_names[int(label)], number)


def _text(value) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def _tfds_records(data: str, glue_task: GlueTask, split: str, data_dir: str | None):
    import tensorflow_datasets as tfds

    name = f"{data[len(TFDS_PREFIX):] or 'glue'}/{glue_task.name}"
    where = f"tfds:{name}:{split}"
    try:
        dataset = tfds.load(name, split=split, data_dir=data_dir, shuffle_files=False,
                            download=False)
    except Exception as error:  # tfds raises many kinds; all mean "not there"
        raise UserError(f"{where}: cannot open this TFDS dataset in data_dir {data_dir!r} "
                        f"({type(error).__name__}: {str(error).splitlines()[0][:200]}); "
                        "prepare it there first (`tfds build`) or pass --tfds-data-dir") from None
    return tfds.as_numpy(dataset), where


def _arrow_records(data: str, glue_task: GlueTask, split: str, kind: str):
    """The examples of one split of a `save_to_disk` directory or the Hub's parquet files."""
    import pyarrow
    import pyarrow.parquet

    directory = files.join(data, glue_task.name)
    pattern = (files.join(directory, split, "data-*.arrow") if kind == "arrow" else
               files.join(directory, f"{split}-*.parquet"))
    paths = sorted(files.glob(pattern))
    if not paths:
        raise UserError(f"{pattern}: no such files; GLUE's {glue_task.name} has the splits "
                        f"train, {', '.join(glue_task.dev_splits)}")
    tables = []
    for path in paths:
        try:
            with files.open_file(path, "rb") as file:
                tables.append(pyarrow.ipc.open_stream(file).read_all() if kind == "arrow"
                              else pyarrow.parquet.read_table(file))
        except pyarrow.ArrowInvalid as error:
            raise UserError(f"{path}: not an Arrow {'stream' if kind == 'arrow' else 'Parquet'}"
                            f" file ({str(error).splitlines()[0][:200]})") from None
    return pyarrow.concat_tables(tables).to_pylist(), paths[0]


def write_jsonl(rows: list[columns.Row], path: str) -> None:
    """`rows` as JSONL (`text_a`[, `text_b`], `label`), written atomically."""
    with files.atomic_write(path) as file:
        for row in rows:
            record = dict(zip(TEXT_KEYS, row.texts), label=row.label)
            file.write(json.dumps(record, ensure_ascii=False) + "\n")


def jsonl_columns(glue_task: GlueTask) -> columns.ColumnSpec:
    """How a run reads the files `write_jsonl` wrote."""
    return columns.ColumnSpec(TEXT_KEYS[:len(glue_task.dataset_columns)], "label")
