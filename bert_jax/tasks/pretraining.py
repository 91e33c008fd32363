"""Pre-training (masked LM + next-sentence prediction) as one task of the training system.

The batch schema is the shards' (`input_pipeline/schema.py`), so the two cannot drift
apart. The terms are those of `bert_jax.losses.pretraining_loss`, kept as sums over the
batch and counts: MLM terms over the real prediction slots, NSP terms over sequences.
"""

import jax.numpy as jnp
import numpy as np

from bert_jax import losses
from bert_jax.config import BertConfig, Precision
from bert_jax.model import BertForPreTraining
from bert_jax.tasks.base import Task
from input_pipeline import schema

# A feature's length key in the shard schema -> its shape in a batch.
_SHAPES = {
    "seq_len": lambda batch, seq_len, predictions: (batch, seq_len),
    "max_predictions": lambda batch, seq_len, predictions: (batch, predictions),
    "one": lambda batch, seq_len, predictions: (batch,),
}


class PretrainingTask(Task):
    name = "pretraining"
    terms = {"mlm_loss": "num_predictions", "mlm_accuracy": "num_predictions",
             "nsp_loss": "num_sequences", "nsp_accuracy": "num_sequences"}
    objective = ("mlm_loss", "nsp_loss")
    logged = ("loss", "mlm_loss", "nsp_loss", "mlm_accuracy", "nsp_accuracy", "grad_norm",
              "learning_rate")
    evaluated = ("loss", "mlm_loss", "nsp_loss", "mlm_accuracy", "nsp_accuracy")

    def __init__(self, max_predictions: int):
        self.max_predictions = max_predictions

    def settings(self):
        return {"max_predictions": self.max_predictions}

    def build_model(self, model_config: BertConfig, precision: Precision):
        return BertForPreTraining(model_config, precision)

    def batch_schema(self):
        return {name: (np.dtype(schema.BATCH_DTYPES[name]),
                       lambda batch, seq_len, length=length: _SHAPES[length](
                           batch, seq_len, self.max_predictions))
                for name, (_, length) in schema.FEATURES.items()}

    def model_inputs(self, batch):
        return (batch["input_ids"], batch["segment_ids"], batch["input_mask"],
                batch["masked_lm_positions"])

    def counts(self, batch):
        return {"num_predictions": jnp.sum(batch["masked_lm_weights"].astype(jnp.float32)),
                "num_sequences": jnp.asarray(batch["next_sentence_labels"].size, jnp.float32)}

    def sums(self, outputs, batch):
        mlm_logits, nsp_logits = outputs
        labels = batch["next_sentence_labels"].reshape(-1)
        mlm = losses.classification_sums(mlm_logits, batch["masked_lm_ids"],
                                         batch["masked_lm_weights"])
        nsp = losses.classification_sums(nsp_logits, labels, jnp.ones(labels.shape))
        return {"mlm_loss": mlm["loss"], "mlm_accuracy": mlm["accuracy"],
                "nsp_loss": nsp["loss"], "nsp_accuracy": nsp["accuracy"]}

    def predictions(self, outputs, batch):
        mlm_logits, nsp_logits = outputs
        return {"masked_lm_ids": np.argmax(mlm_logits, axis=-1),
                "next_sentence_labels": np.argmax(nsp_logits, axis=-1)}

    def train_step_flops(self, model_config, batch_size, seq_len):
        from bert_jax import flops

        return flops.train_step_flops(model_config, batch_size, seq_len, self.max_predictions)


def task_from_run_config(run_config) -> PretrainingTask:
    return PretrainingTask(run_config.data.max_predictions)
