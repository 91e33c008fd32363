"""`finetune classify`: one text or a pair -> one of the training file's labels.

With two labels, `f1` is the F1 of the positive label, named in eval_results.json
(`f1_positive_label` and the rule that chose it): the label the other one negates
(`entailment` of entailment/not_entailment, `spam` of not_spam/spam), else the second of
the two in sorted order (`1` of 0/1, `true` of false/true, `pos` of neg/pos), as
scikit-learn's default pos_label=1 takes it for 0/1 labels. More labels: the macro average.

TSV/CSV files may start with a byte-order mark (Excel's "UTF-8" files). With every column
given by index, a first row whose label cell is not a label any other row has (or not a
number where all others are) is taken as a header, said on stderr; `--header/--no-header`
decides it instead. Label cells are stripped of surrounding white space; labels that differ
only by letter case or by how a number is written (`pos`/`Pos`, `1`/`1.0`) are refused in
one error listing them (`--labels-as-written` keeps them as separate classes); an empty
label cell or a row repeating the header is an error naming its line (`--skip-bad-rows`
skips and counts them). A label that occurs on one line only of a training file of 100 rows
or more is reported on stderr with its line.

The model records the columns it read (the text columns resolved: `sentence`, not "every
column but the label") and every later evaluate, predict and `bert_jax.load(...).predict`
reads exactly those; a file without them is an error naming the missing column.

`SentenceTask` is what classification and regression share: the pooled-[CLS] head
(`heads.BertForSequenceClassification`), the column reader, the batch schema and the
prediction files. Labels are the training file's, sorted (numerically when they all are
numbers), and travel with the model (task.json, and id2label in a Hugging Face export).
"""

import collections
import dataclasses
import os
import re
import sys

import jax.numpy as jnp
import numpy as np

from bert_jax.storage import files, json_values
from bert_jax import losses
from bert_jax.errors import UserError
from bert_jax.models.families import family_of
from bert_jax.tasks import arguments
from bert_jax.training.task import Examples, FineTuningTask
from input_pipeline.tasks import columns, label_rules


class SentenceTask(FineTuningTask):
    """A sentence(-pair)-level task over the pooled [CLS] output."""
    label_dtype = np.int32
    problem_type = "single_label_classification"
    numeric_labels = False  # header detection: are the labels numbers?

    def __init__(self, label_names, spec: columns.ColumnSpec):
        self.label_names, self.spec = list(label_names), spec

    @property
    def num_outputs(self) -> int:
        return len(self.label_names)

    # -- the seam -------------------------------------------------------------------------

    def settings(self):
        return dict(label_names=self.label_names, columns=self.spec.to_dict())

    def build_model(self, model_config, precision):
        return family_of(model_config).sequence_classifier(model_config, self.num_outputs,
                                                            precision)

    def batch_schema(self):
        tokens = lambda batch, seq_len: (batch, seq_len)  # noqa: E731
        per_example = lambda batch, seq_len: (batch,)  # noqa: E731
        return {"input_ids": (np.int32, tokens), "segment_ids": (np.int32, tokens),
                "input_mask": (np.int32, tokens), "labels": (self.label_dtype, per_example),
                "weights": (np.float32, per_example)}

    def model_inputs(self, batch):
        return batch["input_ids"], batch["segment_ids"], batch["input_mask"]

    def counts(self, batch):
        return {"num_examples": jnp.sum(batch["weights"].astype(jnp.float32))}

    def head(self) -> dict:
        return dict(architecture="BertForSequenceClassification", label_names=self.label_names,
                    problem_type=self.problem_type, columns=self.spec.to_dict())

    # -- the commands ---------------------------------------------------------------------

    @classmethod
    def add_arguments(cls, parser):
        arguments.sentence_pairs(parser)

    @classmethod
    def spec_from_arguments(cls, args) -> columns.ColumnSpec:
        """The columns the flags name (before `columns.read_table` resolves them)."""
        return columns.ColumnSpec(columns.parse_columns(args.text_columns),
                                  columns.parse_column(args.label_column), args.header,
                                  args.delimiter, args.skip_bad_rows)

    def with_reading(self, header: bool | None = None, **reading) -> None:
        """How this command reads its files: `header` forces (True/False) whether they start
        with a header (None keeps the training run's setting); `reading` sets other
        `ColumnSpec` fields given a value (delimiter, skip_bad_rows, a file's own
        text_columns / label_column)."""
        values = {name: value for name, value in reading.items() if _given(value)}
        trained = self.spec.text_columns
        if "text_columns" in values and trained and len(values["text_columns"]) != len(trained):
            raise UserError(f"--text-columns {','.join(map(str, values['text_columns']))}: the "
                            f"model was trained on {len(trained)} text column(s) {list(trained)}")
        if header is not None:
            values["header"] = header
        self.spec = dataclasses.replace(self.spec, **values)

    @classmethod
    def from_settings(cls, settings):
        return cls(settings["label_names"],
                   columns.ColumnSpec.from_dict(settings.get("columns", {})))

    def read_examples(self, path, tokenizer, max_seq_len, with_labels=True):
        rows = columns.read_rows(path, self.spec, with_labels, self.numeric_labels)
        return self._examples(rows, path, tokenizer, max_seq_len, with_labels)

    def examples_from_inputs(self, inputs, tokenizer, max_seq_len):
        """Each input a text, a (text_a, text_b) pair, or a dict of a row's columns by name
        (its texts taken from the columns the model was trained on, the rest ignored)."""
        rows = []
        for number, value in enumerate(inputs, start=1):
            texts = (self._texts_of_record(value, number) if isinstance(value, dict) else
                     (value,) if isinstance(value, str) else tuple(value))
            if not 1 <= len(texts) <= 2 or not all(isinstance(text, str) for text in texts):
                raise UserError(f"input {number}: expected a text or a (text_a, text_b) pair "
                                f"of strings, got {value!r}")
            rows.append(columns.Row(texts, None, number))
        return self._examples(rows, "input", tokenizer, max_seq_len, with_labels=False)

    def _texts_of_record(self, record: dict, number: int) -> tuple:
        """The texts of a row given as {column name: cell}, by the recorded text columns."""
        text_columns = self.spec.text_columns
        if not text_columns or not all(isinstance(column, str) for column in text_columns):
            reads = list(text_columns) or "every column but the label"
            raise UserError(f"input {number}: a dict input needs a model trained on named "
                            f"columns; this one reads {reads}; give a text or a (text_a, "
                            "text_b) pair")
        missing = [column for column in text_columns if column not in record]
        if missing:
            raise UserError(f"input {number}: no {missing} key(s); the model reads its text from "
                            f"the column(s) {list(text_columns)}, got {sorted(record)}")
        return tuple(record[column] for column in text_columns)

    def _examples(self, rows, path, tokenizer, max_seq_len, with_labels):
        features = columns.encode_rows(tokenizer, rows, max_seq_len)
        labelled = with_labels or all(row.label is not None for row in rows)
        labels = (np.array([self.label_value(row.label, path, row.line) for row in rows],
                           self.label_dtype) if labelled else
                  np.zeros(len(rows), self.label_dtype))
        features.update(labels=labels, weights=np.ones(len(rows), np.float32))
        return Examples(path, features, labels if labelled else None, rows)

    def prediction_values(self, examples, predictions):
        """The records `write_predictions` writes beside each input's texts."""
        return self.prediction_records(predictions)

    def check_prediction_path(self, path):
        kind = os.path.splitext(path)[1].lower()
        if kind not in (".jsonl", ".tsv"):
            raise UserError(f"{path}: unknown output type {kind!r}; expected .jsonl or .tsv")

    def write_predictions(self, path, examples, predictions):
        """.jsonl: one object per input; .tsv: the input's own columns (every one, by its
        name; the texts for plain text) and a `label` column (`predicted_label` when the input
        has a `label`); in input order."""
        records = self.prediction_records(predictions)
        self.check_prediction_path(path)
        kind = os.path.splitext(path)[1].lower()
        with files.atomic_write(path) as file:
            if kind == ".jsonl":
                for row, record in zip(examples.rows, records):
                    kept = dict(columns=dict(row.source)) if row.source else {}
                    file.write(json_values.dumps(dict(texts=list(row.texts), **record, **kept))
                               + "\n")
            else:
                names, cells = _input_columns(examples.rows)
                column = "predicted_label" if "label" in names else "label"
                file.write("\t".join(names + [column]) + "\n")
                for row_cells, record in zip(cells, records):
                    file.write("\t".join(row_cells + [str(record["label"])]) + "\n")


def _input_columns(rows) -> tuple[list[str], list[list[str]]]:
    """(column names, each row's cells) of the input as read: its own columns where the file
    has them (TSV/CSV/JSONL), else the texts as text_0[, text_1]. Tabs and line breaks inside
    a cell become spaces, so that every row stays one TSV line."""
    def clean(cell: str) -> str:
        return " ".join(cell.replace("\t", " ").splitlines())

    if all(row.source for row in rows):
        names = list(dict.fromkeys(name for row in rows for name, _ in row.source))
        return names, [[clean(dict(row.source).get(name, "")) for name in names] for row in rows]
    width = max(len(row.texts) for row in rows)
    return ([f"text_{index}" for index in range(width)],
            [[clean(text) for text in row.texts] + [""] * (width - len(row.texts))
             for row in rows])


class ClassificationTask(SentenceTask):
    name = "classify"
    terms = {"cross_entropy": "num_examples", "accuracy": "num_examples"}
    objective = ("cross_entropy",)
    logged = ("loss", "accuracy", "grad_norm", "learning_rate")
    evaluated = ("loss", "accuracy")
    best_metric, greater_is_better = "accuracy", True

    @classmethod
    def add_arguments(cls, parser):
        arguments.classify(parser)

    @classmethod
    def from_arguments(cls, args, tokenizer):
        rows, spec = columns.read_table(args.train, cls.spec_from_arguments(args))
        labels = [(row.label, row.line) for row in rows]
        label_rules.check_spellings(labels, args.train, as_written=args.labels_as_written)
        label_rules.check_label_count(labels, args.train)
        warn_single_labels(rows, args.train)
        return cls(sorted_labels([row.label for row in rows]), spec)

    @property
    def positive_label(self) -> tuple[str, str] | None:
        """(label, why) of the label whose F1 a two-label task reports; None otherwise."""
        return positive_label(self.label_names) if self.num_outputs == 2 else None

    def label_value(self, label: str, path: str, line: int) -> int:
        if not hasattr(self, "_label_ids"):
            self._label_ids = {name: index for index, name in enumerate(self.label_names)}
            for index, name in enumerate(self.label_names):  # a model from before labels
                self._label_ids.setdefault(name.strip(), index)  # were stripped: 'pos '
        if label not in self._label_ids:
            raise UserError(f"{path}:{line}: label {label!r} does not occur in the training "
                            f"data; its labels are {self.label_names}")
        return self._label_ids[label]

    def sums(self, outputs, batch):
        sums = losses.classification_sums(outputs, batch["labels"], batch["weights"])
        return {"cross_entropy": sums["loss"], "accuracy": sums["accuracy"]}

    def predictions(self, outputs, batch):
        logits = np.asarray(outputs, np.float64)  # (B, num_labels)
        probabilities = np.exp(logits - logits.max(axis=-1, keepdims=True))
        probabilities /= probabilities.sum(axis=-1, keepdims=True)
        return {"label": logits.argmax(axis=-1), "probabilities": probabilities}

    def prediction_records(self, predictions):
        return [dict(label=self.label_names[label],
                     probabilities={name: round(float(p), 6) for name, p in
                                    zip(self.label_names, probabilities)})
                for label, probabilities in zip(predictions["label"],
                                                predictions["probabilities"])]

    def evaluate(self, predictions, gold):
        """accuracy, f1 (two labels: of the positive label, `positive_label`; else the macro
        average) and matthews_correlation."""
        from sklearn import metrics

        predicted = np.asarray(predictions["label"])
        f1 = (dict(average="binary", pos_label=self.label_names.index(self.positive_label[0]))
              if self.num_outputs == 2 else
              dict(average="macro", labels=list(range(self.num_outputs))))
        return {"accuracy": float(metrics.accuracy_score(gold, predicted)),
                "f1": float(metrics.f1_score(gold, predicted, **f1)),
                "matthews_correlation": float(metrics.matthews_corrcoef(gold, predicted))}


    def summary(self, history) -> dict:
        """eval_results.json's note of which label a binary F1 is of, and why."""
        if self.positive_label is None:
            return {}
        label, why = self.positive_label
        return {"f1_positive_label": label, "f1_positive_label_rule": why}


# `not_entailment`, `non-spam`, `not duplicate`, `NOT_X`: the negation of another label.
_NEGATION = re.compile(r"(?:not|non|no)[ _-]?(?P<rest>.+)", re.IGNORECASE)


def positive_label(label_names) -> tuple[str, str]:
    """(label, why) of the positive one of two labels, as `finetune --help` documents: the
    label the other one negates (`entailment` of entailment/not_entailment), else the second
    in label order (`1` of 0/1, `true` of false/true, `pos` of neg/pos), as scikit-learn's
    pos_label=1 takes it for 0/1 labels."""
    first, second = label_names
    for label, other in ((first, second), (second, first)):
        match = _NEGATION.fullmatch(other)
        if match and match["rest"].lower() == label.lower():
            return label, f"{other!r} is its negation"
    return second, "the second of the two labels in sorted order (numeric when numbers)"


def warn_single_labels(rows, path: str, min_rows: int = 100) -> None:
    """Says on stderr which labels occur exactly once in a file of `min_rows` or more: in a
    large file that is more often a stray cell (a header, a typo) than a class."""
    if len(rows) < min_rows:
        return
    counts = collections.Counter(row.label for row in rows)
    for row in rows:
        if counts[row.label] == 1:
            print(f"{path}:{row.line}: warning: label {row.label!r} occurs only on this line "
                  f"of {len(rows)} rows; it becomes a class of its own", file=sys.stderr)


def _given(value) -> bool:
    """Whether a reading flag was given: not None, False or () (column 0 is given)."""
    return value is not None and value is not False and value != ()


def apply_reading(task, header: bool | None = None, **reading) -> None:
    """Applies evaluate/predict's reading flags (`--header/--no-header`, `--delimiter`,
    `--skip-bad-rows`, `--text-columns`, `--label-column`) to a loaded task; None or False
    keeps how the training run read its files."""
    if header is None and not any(_given(value) for value in reading.values()):
        return
    if not hasattr(task, "with_reading"):
        raise UserError(f"--header, --delimiter, --skip-bad-rows, --text-columns, "
                        f"--label-column: task {task.name!r} reads no TSV/CSV/JSONL columns")
    task.with_reading(header, **reading)


def sorted_labels(labels) -> list[str]:
    """The distinct labels, numerically sorted when all are numbers ('2' before '10')."""
    distinct = sorted(set(labels))
    try:
        return sorted(distinct, key=float)
    except ValueError:
        return distinct


TASK = ClassificationTask
