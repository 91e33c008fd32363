"""Pre-training as one task of the training system: BERT's masked LM + next-sentence
prediction (objective mlm_nsp), or masked LM only (objective mlm, ModernBERT's).

The batch schema is the shards' (`input_pipeline/schema.py`), so the two cannot drift
apart. The terms are those of `bert_jax.losses.pretraining_loss`, kept as sums over the
batch and counts: MLM terms over the real prediction slots, NSP terms over sequences.

Packed rows (`max_sequences_per_row` N > 1) carry up to N instances each: the model reads
NSP at each instance's [CLS], and the NSP terms count the instance slots that hold one
(`next_sentence_weights`), so a packed batch's loss and metrics are those of the same
instances unpacked. The batch size counts rows.

Objective mlm (`MaskedLMPretrainingTask`) reads `create-data --objective mlm`'s rows with
the masks the reader drew (`input_pipeline/dynamic_masking.py`), always as packed rows
(instance and position ids), through the family's masked-LM model: no next-sentence head,
term or metric, and the result exports as a *ForMaskedLM. Its MLM terms are the same sums
over the same counts as mlm_nsp's.
"""

import jax.numpy as jnp
import numpy as np

from bert_jax import losses
from bert_jax.models.config import BertConfig, Precision
from bert_jax.models.families import family_of
from bert_jax.tasks.masked_lm import MaskedLMRows
from bert_jax.training.task import Task
from input_pipeline import schema

# A feature's length key in the shard schema -> its shape in a batch.
_SHAPES = {
    "seq_len": lambda batch, seq_len, predictions: (batch, seq_len),
    "max_predictions": lambda batch, seq_len, predictions: (batch, predictions),
    "one": lambda batch, seq_len, predictions: (batch,),
}
_PACKED_INPUTS = ("instance_ids", "position_ids", "instance_starts")


class PretrainingTask(Task):
    name = "pretraining"
    terms = {"mlm_loss": "num_predictions", "mlm_accuracy": "num_predictions",
             "nsp_loss": "num_sequences", "nsp_accuracy": "num_sequences"}
    objective = ("mlm_loss", "nsp_loss")
    logged = ("loss", "mlm_loss", "nsp_loss", "mlm_accuracy", "nsp_accuracy", "grad_norm",
              "learning_rate")
    evaluated = ("loss", "mlm_loss", "nsp_loss", "mlm_accuracy", "nsp_accuracy")

    def __init__(self, max_predictions: int, max_sequences_per_row: int = 1):
        self.max_predictions = max_predictions
        self.max_sequences_per_row = max_sequences_per_row
        # Masked-position slots of a row: packed rows hold P + N (input_pipeline/packing.py).
        self.row_predictions = max_predictions + (max_sequences_per_row
                                                  if max_sequences_per_row > 1 else 0)

    def settings(self):
        if self.max_sequences_per_row == 1:
            return {"max_predictions": self.max_predictions}
        return {"max_predictions": self.max_predictions,
                "max_sequences_per_row": self.max_sequences_per_row}

    def build_model(self, model_config: BertConfig, precision: Precision):
        return family_of(model_config).pretraining_model(model_config, precision)

    def batch_schema(self):
        rows = self.max_sequences_per_row
        shapes = dict(_SHAPES, max_predictions=lambda batch, seq_len, predictions: (
            batch, self.row_predictions), sequences=lambda batch, seq_len, predictions: (
            batch, rows))
        return {name: (np.dtype(schema.BATCH_DTYPES[name]),
                       lambda batch, seq_len, length=length: shapes[length](
                           batch, seq_len, self.max_predictions))
                for name, (_, length) in schema.features(rows).items()}

    def model_inputs(self, batch):
        return (batch["input_ids"], batch["segment_ids"], batch["input_mask"],
                batch["masked_lm_positions"])

    def model_keywords(self, batch):
        # The slots' weights let a CPU score only the slots that count (slots_in_use).
        weights = {"masked_lm_weights": batch["masked_lm_weights"]}
        if self.max_sequences_per_row == 1:
            return weights
        # The slot count a fused kernel gives each row's instances: static, from the config.
        return {**{name: batch[name] for name in _PACKED_INPUTS}, **weights,
                "max_instances": self.max_sequences_per_row}

    def _nsp_weights(self, batch):
        """1 for each instance (NSP label) that counts: every row unpacked, filled slots packed."""
        if self.max_sequences_per_row == 1:
            return jnp.ones(batch["next_sentence_labels"].size, jnp.float32)
        return batch["next_sentence_weights"].reshape(-1).astype(jnp.float32)

    def counts(self, batch):
        return {"num_predictions": jnp.sum(batch["masked_lm_weights"].astype(jnp.float32)),
                "num_sequences": jnp.sum(self._nsp_weights(batch)),
                # Not a term's count: the tokens that are not padding, for real tokens/s.
                "num_real_tokens": jnp.sum(batch["input_mask"].astype(jnp.float32))}

    def sums(self, outputs, batch):
        mlm_logits, nsp_logits = outputs
        labels = batch["next_sentence_labels"].reshape(-1)
        nsp = losses.classification_sums(nsp_logits.reshape(-1, 2), labels,
                                         self._nsp_weights(batch))
        return {**_masked_lm_sums(mlm_logits, batch), "nsp_loss": nsp["loss"],
                "nsp_accuracy": nsp["accuracy"]}

    def predictions(self, outputs, batch):
        mlm_logits, nsp_logits = outputs
        return {"masked_lm_ids": np.argmax(mlm_logits, axis=-1),
                "next_sentence_labels": np.argmax(nsp_logits, axis=-1)}  # (B,) or (B, N)

    def train_step_flops(self, model_config, batch_size, seq_len):
        from bert_jax.compiler import flops

        return flops.train_step_flops(model_config, batch_size, seq_len, self.row_predictions)


def _masked_lm_sums(mlm_logits, batch) -> dict:
    """The MLM terms of both objectives: sums over the weighted prediction slots."""
    mlm = losses.classification_sums(mlm_logits, batch["masked_lm_ids"],
                                     batch["masked_lm_weights"])
    return {"mlm_loss": mlm["loss"], "mlm_accuracy": mlm["accuracy"]}


class MaskedLMPretrainingTask(MaskedLMRows, Task):
    """Objective mlm: masked LM only, on packed rows of `[CLS] text [SEP]` sequences (the
    model and batch of `finetune mlm`'s blocks).

    `max_predictions` is a row's slots (the masking schedule's, `masking_schedule.py`);
    `max_sequences_per_row` (the shards' manifest's) is the most instances a row holds, which
    the model's fused attention kernels are told (on a GPU, 1 takes cuDNN with per-row
    lengths for the global layers, as BERT's unpacked rows do); no head has per-sequence slots.
    """
    name = "mlm_pretraining"
    terms = {"mlm_loss": "num_predictions", "mlm_accuracy": "num_predictions"}
    objective = ("mlm_loss",)
    logged = ("loss", "mlm_accuracy", "grad_norm", "learning_rate")
    evaluated = ("loss", "mlm_loss", "mlm_accuracy")

    def __init__(self, max_predictions: int, max_sequences_per_row: int = 1):
        self.max_predictions = max_predictions
        self.max_sequences_per_row = max_sequences_per_row

    def settings(self):
        return {"objective": "mlm", "max_predictions": self.max_predictions,
                "max_sequences_per_row": self.max_sequences_per_row}

    def model_keywords(self, batch):
        return {**super().model_keywords(batch), "max_instances": self.max_sequences_per_row}

    def counts(self, batch):
        # A row's sequences are numbered 1..k, so its largest instance id counts them.
        return {"num_predictions": jnp.sum(batch["masked_lm_weights"].astype(jnp.float32)),
                "num_sequences": jnp.sum(jnp.max(batch["instance_ids"], axis=1)
                                         .astype(jnp.float32)),
                "num_real_tokens": jnp.sum(batch["input_mask"].astype(jnp.float32))}

    def sums(self, outputs, batch):
        return _masked_lm_sums(outputs, batch)

    def predictions(self, outputs, batch):
        return {"masked_lm_ids": np.argmax(outputs, axis=-1)}

    def train_step_flops(self, model_config, batch_size, seq_len):
        from bert_jax.compiler import flops

        # The pre-training count, NSP head included: 2H + 2 FLOPs a row against the MLM
        # head's P x H x V, far below what MFU can tell apart.
        return flops.train_step_flops(model_config, batch_size, seq_len, self.max_predictions)


def task_from_run_config(run_config) -> Task:
    """The task of the run config's objective (its data section completed)."""
    per_row = run_config.data.get("max_sequences_per_row") or 1
    if run_config.get("objective", "mlm_nsp") == "mlm":
        return MaskedLMPretrainingTask(run_config.data.max_predictions, per_row)
    return PretrainingTask(run_config.data.max_predictions, per_row)


# Each evaluated metric's column: its heading and width.
_COLUMNS = {"loss": ("loss", 8), "mlm_loss": ("mlm_loss", 9), "mlm_accuracy": ("mlm_acc", 8),
            "nsp_loss": ("nsp_loss", 9), "nsp_accuracy": ("nsp_acc", 8)}


def format_evaluations(evaluations, names=PretrainingTask.evaluated) -> str:
    """The evaluation history as a table: step, then the task's evaluated metrics `names`
    (mlm_nsp: loss, MLM loss and accuracy, NSP loss and accuracy; mlm: no NSP columns)."""
    shown = sorted(names, key=list(_COLUMNS).index)
    lines = [f"{'step':>8} " + " ".join(f"{_COLUMNS[name][0]:>{_COLUMNS[name][1]}}"
                                        for name in shown)]
    for step, metrics in evaluations:
        lines.append(f"{step:>8} " + " ".join(f"{metrics[name]:>{_COLUMNS[name][1]}.4f}"
                                             for name in shown))
    return "\n".join(lines)
