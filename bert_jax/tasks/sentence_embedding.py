"""`finetune sentence-embedding`: a siamese bi-encoder (Sentence-BERT) trained on sentence pairs.

Both texts of a pair go through the one shared encoder and are pooled (mean over real
tokens by default) into u and v. Losses (`--loss`):
  cosine   MSE between cos(u, v) and the gold score / --score-max (STS-B: scores 0..5)
  cosent   CoSENT: every pair with a higher gold score should have a higher cosine
  mnrl     multiple negatives ranking: each anchor against every positive of the global
           batch (scale 20), plus each row's hard negative with --hard-negatives; trained on
           the entailment pairs of an NLI file (hard negative: a contradiction of the premise);
           no batch holds a text twice (`training/distinct_batches.py`)
  softmax  SBERT's NLI classifier on (u, v, |u - v|), cross-entropy over the NLI labels
Evaluation (every epoch, best/ kept by it): Spearman and Pearson (scipy) of cos(u, v)
against the gold scores of an STS file.

Files: TSV as STS-B ships it (no header; score in column 4, sentences in 5 and 6), or JSONL
with sentence1/sentence2/score or premise/hypothesis/label keys. A file whose labels are all
numbers is scored (STS); otherwise its labels are classes (NLI).
"""

import json

import flax.linen as nn
import jax.numpy as jnp
import numpy as np

from bert_jax.storage import files, json_values
from bert_jax.models.config import BertConfig, Precision
from bert_jax.embeddings import losses
from bert_jax.embeddings.pooling import pool
from bert_jax.embeddings.similarity import correlations, pair_cosines
from bert_jax.errors import UserError
from bert_jax.models.bert import BertModel
from bert_jax.models.layers.dense import FLOAT32, Dense
from bert_jax.tasks import arguments
from bert_jax.tasks.arguments import LOSSES  # defined with the --loss flag
from bert_jax.training.task import Examples, FineTuningTask

_TERMS = {"cosine": "cosine_mse", "cosent": "cosent", "mnrl": "mnrl", "softmax": "softmax_loss"}
_TSV_COLUMNS = (5, 6, 4)  # STS-B: sentence1, sentence2, score
_JSONL_KEYS = (("sentence1", "sentence2", "score"), ("premise", "hypothesis", "label"))


class SiameseEncoder(nn.Module):
    """The shared encoder over every side of a batch: (sides, B, H * len(pooling)) embeddings,
    and with `num_labels` the softmax classifier's (B, num_labels) logits (else None)."""
    config: BertConfig
    pooling: tuple[str, ...] = ("mean",)
    num_labels: int = 0
    precision: Precision = FLOAT32

    @nn.compact
    def __call__(self, input_ids: tuple, input_masks: tuple, train: bool = False):
        sides, batch = len(input_ids), input_ids[0].shape[0]
        ids = jnp.concatenate(input_ids)  # (sides * B, T): one encoder call for all sides
        # Filler rows are all padding; one real slot keeps their softmax and pooling finite.
        mask = jnp.concatenate(input_masks).at[:, 0].set(1)
        hidden, _ = BertModel(self.config, self.precision, with_pooler=False, name="bert")(
            ids, jnp.zeros_like(ids), mask, train)  # (sides * B, T, H)
        vectors = pool(hidden.astype(jnp.float32), mask, self.pooling)
        embeddings = vectors.reshape(sides, batch, -1)  # (sides, B, D)
        logits = None
        if self.num_labels:
            features = losses.softmax_features(embeddings[0], embeddings[1])  # (B, 3D)
            logits = Dense(self.config, (self.num_labels,), ("embed",), ("classes",),
                           self.precision, name="classifier")(features).astype(jnp.float32)
        return embeddings, logits


def _column_spec(path: str, skip_bad_rows: bool = False):
    """STS-B's columns for TSV; for JSONL, the key set the first object has."""
    from bert_jax.embeddings.encoder import read_lines
    from input_pipeline.tasks import columns
    from input_pipeline.tasks.record_files import file_format

    kind = file_format(path)
    if kind == "tsv":
        return columns.ColumnSpec(_TSV_COLUMNS[:2], _TSV_COLUMNS[2], header=False,
                                  skip_bad_rows=skip_bad_rows)
    if kind != "jsonl":
        raise UserError(f"{path}: expected STS-B-style .tsv or .jsonl sentence pairs")
    first = next((line for line in read_lines(path, "pair") if line.strip()), "")
    try:
        value = json.loads(first)
    except json.JSONDecodeError:
        value = None  # read_rows names the line
    for keys in _JSONL_KEYS:
        if isinstance(value, dict) and all(key in value for key in keys):
            return columns.ColumnSpec(keys[:2], keys[2], skip_bad_rows=skip_bad_rows)
    raise UserError(f"{path}: expected objects with keys "
                    f"{' or '.join('/'.join(keys) for keys in _JSONL_KEYS)}")


def read_pair_records(path: str, skip_bad_rows: bool = False
                      ) -> list[tuple[int, str, str, str]]:
    """(line, first text, second text, label cell) of every row, read by the shared column
    reader (`input_pipeline/tasks/columns.py`, its label rules included)."""
    from input_pipeline.tasks import columns

    rows = columns.read_rows(path, _column_spec(path, skip_bad_rows))
    return [(row.line, row.texts[0], row.texts[1], row.label) for row in rows]


def scores_of(records) -> np.ndarray | None:
    """The labels as floats if every one is a number (a scored STS file), else None."""
    try:
        return np.array([float(label) for *_, label in records], np.float64)
    except ValueError:
        return None


class SentenceEmbeddingTask(FineTuningTask):
    name = "sentence-embedding"
    best_metric, greater_is_better = "spearman", True

    def __init__(self, loss: str = "cosent", pooling: tuple[str, ...] = ("mean",),
                 label_names: tuple[str, ...] = (), hard_negatives: bool = False,
                 score_max: float = 5.0):
        if loss not in LOSSES:
            raise UserError(f"--loss {loss!r}: expected one of {', '.join(LOSSES)}")
        if loss == "softmax" and not label_names:
            raise UserError("--loss softmax needs class labels (an NLI file for --train)")
        self.loss, self.pooling, self.score_max = loss, tuple(pooling), score_max
        self.label_names = tuple(label_names)
        self.skip_bad_rows = False  # --skip-bad-rows: how this command reads, not saved
        self.hard_negatives = hard_negatives and loss == "mnrl"
        self.sides = ("a", "b", "c") if self.hard_negatives else ("a", "b")
        count = "num_batches" if loss == "cosent" else "num_pairs"
        self.terms = {_TERMS[loss]: count}
        if loss == "softmax":
            self.terms["accuracy"] = count
        self.objective = (_TERMS[loss],)
        self.logged = ("loss", *(("accuracy",) if loss == "softmax" else ()), "grad_norm",
                       "learning_rate")

    @property
    def training_batches(self):
        """mnrl's batches never hold a text twice (it would be its own in-batch negative)."""
        from bert_jax.training.distinct_batches import DistinctTextBatches
        from bert_jax.training.batching import BucketedBatches

        return DistinctTextBatches if self.loss == "mnrl" else BucketedBatches

    # -- the command line ------------------------------------------------------------------

    @classmethod
    def add_arguments(cls, parser):
        arguments.sentence_embedding(parser)

    @classmethod
    def from_arguments(cls, args, tokenizer):
        """Class labels (an NLI file) follow `label_rules` whatever the loss: mnrl reads
        `entailment` and `contradiction` by name."""
        from input_pipeline.tasks.label_rules import check_label_count, check_spellings

        records = read_pair_records(args.train, args.skip_bad_rows)
        if scores_of(records) is None:
            labels = [(label, line) for line, *_, label in records]
            check_spellings(labels, args.train, as_written=args.labels_as_written)
            if args.loss == "softmax":  # its classifier tells the labels apart
                check_label_count(labels, args.train)
        labels = (tuple(sorted({label for *_, label in records}))
                  if args.loss == "softmax" else ())
        task = cls(args.loss, (args.pooling,), labels, args.hard_negatives, args.score_max)
        task.skip_bad_rows = args.skip_bad_rows
        return task

    def settings(self):
        return dict(loss=self.loss, pooling=list(self.pooling), label_names=list(
            self.label_names), hard_negatives=self.hard_negatives, score_max=self.score_max)

    @classmethod
    def from_settings(cls, settings):
        return cls(settings["loss"], tuple(settings["pooling"]), tuple(settings["label_names"]),
                   settings["hard_negatives"], settings["score_max"])

    def head(self) -> dict:
        return dict(architecture="SentenceTransformer", pooling=list(self.pooling))

    # -- the model and its loss ----------------------------------------------------------------

    def build_model(self, model_config, precision):
        return SiameseEncoder(model_config, self.pooling, len(self.label_names)
                              if self.loss == "softmax" else 0, precision)

    def batch_schema(self):
        sequence = lambda batch, seq_len: (batch, seq_len)  # noqa: E731
        schema = {"input_mask": (np.int32, sequence)}  # any side's tokens: sets the bucket
        for side in self.sides:
            schema[f"input_ids_{side}"] = (np.int32, sequence)
            schema[f"input_mask_{side}"] = (np.int32, sequence)
        schema["labels"] = (np.float32, lambda batch, seq_len: (batch,))
        schema["weights"] = (np.float32, lambda batch, seq_len: (batch,))
        return schema

    def model_inputs(self, batch):
        return (tuple(batch[f"input_ids_{side}"] for side in self.sides),
                tuple(batch[f"input_mask_{side}"] for side in self.sides))

    def counts(self, batch):
        weights = batch["weights"].astype(jnp.float32)
        if self.loss == "cosent":  # one ranking loss per batch
            return {"num_batches": (weights.sum() > 0).astype(jnp.float32)}
        return {"num_pairs": weights.sum()}

    def sums(self, outputs, batch):
        embeddings, logits = outputs
        weights, labels = batch["weights"].astype(jnp.float32), batch["labels"]
        if self.loss == "cosine":
            total, _ = losses.cosine_loss(embeddings[0], embeddings[1], labels, weights)
        elif self.loss == "cosent":
            total, _ = losses.cosent_loss(embeddings[0], embeddings[1], labels, weights)
        elif self.loss == "mnrl":
            negatives = embeddings[2] if self.hard_negatives else None
            total, _ = losses.mnrl_loss(embeddings[0], embeddings[1], weights, negatives)
        else:
            classes = labels.astype(jnp.int32)
            total, _ = losses.softmax_loss(logits, classes, weights)
            correct = (jnp.argmax(logits, axis=-1) == classes).astype(jnp.float32)
            return {"softmax_loss": total, "accuracy": (correct * weights).sum()}
        return {_TERMS[self.loss]: total}

    def train_step_flops(self, model_config, batch_size, seq_len):
        return len(self.sides) * super().train_step_flops(model_config, batch_size, seq_len)

    # -- data, predictions, metrics --------------------------------------------------------

    def _pairs_and_labels(self, records, path: str):
        """(rows of texts, labels, weights, gold scores or None) for this loss."""
        scores = scores_of(records)
        if scores is not None:  # an STS file: trains cosine/cosent, evaluates every loss
            trains = self.loss in ("cosine", "cosent")
            rows = [(first, second) + ((first,) if self.hard_negatives else ())
                    for _, first, second, _ in records]
            labels = scores / self.score_max if trains else np.zeros(len(rows))
            return rows, labels, np.full(len(rows), float(trains)), scores
        if self.loss in ("cosine", "cosent"):
            raise UserError(f"{path}: --loss {self.loss} trains on scored pairs (STS); this "
                            "file's labels are classes")
        if self.loss == "softmax":
            unknown = sorted({label for *_, label in records} - set(self.label_names))
            if unknown:
                raise UserError(f"{path}: label(s) {unknown} were not in the training file "
                                f"({list(self.label_names)})")
            rows = [(first, second) for _, first, second, _ in records]
            labels = [self.label_names.index(label) for *_, label in records]
            return rows, np.array(labels), np.ones(len(rows)), None
        contradictions = {first: second for _, first, second, label in records
                          if label == "contradiction"}
        rows = [(first, second) + ((contradictions[first],) if self.hard_negatives else ())
                for _, first, second, label in records if label == "entailment"
                and (not self.hard_negatives or first in contradictions)]
        if not rows:
            needed = " with a contradiction" if self.hard_negatives else ""
            raise UserError(f"{path}: no entailment pairs{needed} to train --loss mnrl on")
        return rows, np.zeros(len(rows)), np.ones(len(rows)), None

    def read_examples(self, path, tokenizer, max_seq_len, with_labels=True):
        rows, labels, weights, gold = self._pairs_and_labels(
            read_pair_records(path, self.skip_bad_rows), path)
        encoded = [tokenizer.encode_for_model([row[index] for row in rows], max_seq_len)
                   for index in range(len(self.sides))]
        seq_len = max(side["input_ids"].shape[1] for side in encoded)
        features = {}
        for side, arrays in zip(self.sides, encoded):
            width = seq_len - arrays["input_ids"].shape[1]
            for name in ("input_ids", "input_mask"):
                features[f"{name}_{side}"] = np.pad(arrays[name], ((0, 0), (0, width)))
        features["input_mask"] = np.max([features[f"input_mask_{side}"] for side in self.sides],
                                        axis=0)
        features.update(labels=labels.astype(np.float32), weights=weights.astype(np.float32))
        return Examples(path, features, gold, rows)

    def predictions(self, outputs, batch):
        first, second = np.asarray(outputs[0], np.float64)[:2]  # (B, D) each
        return {"cosine": pair_cosines(first, second)}

    def evaluate(self, predictions, gold):
        """spearman and pearson (scipy) of the pairs' cosine similarity against gold scores."""
        if gold is None:
            raise UserError("sentence-embedding evaluation needs scored pairs (an STS file, "
                            "e.g. sts-dev.tsv), not class labels")
        return correlations(np.asarray(predictions["cosine"]), np.asarray(gold))

    def write_predictions(self, path, examples, predictions):
        with files.atomic_write(path) as file:
            for row, cosine in zip(examples.rows, predictions["cosine"]):
                file.write(json_values.dumps(dict(text_a=row[0], text_b=row[1],
                                                  cosine=round(float(cosine), 6))) + "\n")


TASK = SentenceEmbeddingTask
