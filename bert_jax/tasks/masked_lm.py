"""`finetune mlm`: domain-adaptive masked-LM training on raw text (no NSP, no shard step).

The text is read, tokenised and packed into blocks as `input_pipeline/tasks/mlm_text.py`
describes; each training epoch draws fresh masks (15%, 80/10/10) from (seed, epoch), and
the held-out file's masks are fixed by the seed, so every evaluation (one before the first
step, then one after every epoch) scores the same positions. Metrics: `perplexity` (exp of
the mean held-out MLM cross-entropy), `mlm_accuracy` and `mlm_loss`; eval_results.json also
holds `perplexity_before` and `mlm_accuracy_before`. A model without an MLM head (such as
all-MiniLM-L6-v2) starts with a fresh one whose decoder is tied to the word embeddings;
the result exports as a Hugging Face BertForMaskedLM (`convert --to hf`) that `fill-mask`
and transformers' fill-mask pipeline use. `--train` / `--eval` may also name a directory of
`create-data` shards, packed (--pack) or not: their rows are the blocks, with fresh masks
per epoch, and attention stays within each instance of a packed row.
"""

import math

import jax.numpy as jnp
import numpy as np

from bert_jax.storage import files, json_values
from bert_jax import losses
from bert_jax.models.families import family_of
from bert_jax.tasks import arguments
from bert_jax.training.task import Examples, FineTuningTask
from bert_jax.training.batching import BucketedBatches
from input_pipeline.tasks import mlm_text


class MaskedFeatures(dict):
    """A file's features (held-out masks) that also carries its blocks, to mask them anew."""
    masked_blocks: mlm_text.MaskedBlocks


class EpochMaskedBatches(BucketedBatches):
    """The driver's batches, with the features re-masked at the start of every epoch.

    `plan(epoch)` runs at each epoch's start and on resume, so a resumed run sees the masks
    of its epoch again: masks depend only on (seed, epoch).
    """

    def __init__(self, features: MaskedFeatures, *args, **options):
        self.masked_blocks = features.masked_blocks
        super().__init__(features, *args, **options)

    def plan(self, epoch: int) -> list[np.ndarray]:
        self.features = self.masked_blocks.epoch(epoch)
        return super().plan(epoch)


class MaskedLMRows:
    """The model and batch of masked-LM rows, packed or not (this task's blocks, and objective
    mlm's pre-training rows): the family's masked-LM model, `max_predictions` slots a row,
    and each row's instance and position ids."""
    max_predictions: int

    def build_model(self, model_config, precision):
        return family_of(model_config).masked_lm_model(model_config, precision)

    def batch_schema(self):
        tokens = lambda batch, seq_len: (batch, seq_len)  # noqa: E731
        slots = lambda batch, seq_len: (batch, self.max_predictions)  # noqa: E731
        return {"input_ids": (np.int32, tokens), "segment_ids": (np.int32, tokens),
                "input_mask": (np.int32, tokens), "instance_ids": (np.int32, tokens),
                "position_ids": (np.int32, tokens), "masked_lm_positions": (np.int32, slots),
                "masked_lm_ids": (np.int32, slots), "masked_lm_weights": (np.float32, slots)}

    def model_inputs(self, batch):
        return (batch["input_ids"], batch["segment_ids"], batch["input_mask"],
                batch["masked_lm_positions"])

    def model_keywords(self, batch):
        # Blocks of packed shards hold several instances; text blocks one (ids = input_mask).
        # The slots' weights let a CPU score only the slots that count (slots_in_use).
        return {"instance_ids": batch["instance_ids"], "position_ids": batch["position_ids"],
                "masked_lm_weights": batch["masked_lm_weights"]}


class MaskedLMTask(MaskedLMRows, FineTuningTask):
    name = "mlm"
    terms = {"mlm_loss": "num_predictions", "mlm_accuracy": "num_predictions"}
    objective = ("mlm_loss",)
    logged = ("loss", "mlm_accuracy", "grad_norm", "learning_rate")
    evaluated = ("loss", "mlm_accuracy")
    best_metric, greater_is_better = "perplexity", False
    evaluate_before_training = True  # perplexity_before
    training_batches = EpochMaskedBatches

    def __init__(self, max_seq_len: int = 128, masked_lm_prob: float = 0.15, seed: int = 0):
        self.max_seq_len, self.masked_lm_prob, self.seed = max_seq_len, masked_lm_prob, seed
        self.max_predictions = min(max_seq_len, math.ceil(max_seq_len * masked_lm_prob))

    # -- the seam -------------------------------------------------------------------------

    def settings(self):
        return dict(max_seq_len=self.max_seq_len, masked_lm_prob=self.masked_lm_prob,
                    seed=self.seed)

    def head(self):
        return None  # exports as BertForMaskedLM, the architecture its parameters imply

    def counts(self, batch):
        return {"num_predictions": jnp.sum(batch["masked_lm_weights"].astype(jnp.float32))}

    def sums(self, outputs, batch):
        weights = batch["masked_lm_weights"].astype(jnp.float32)  # (B, P)
        ids = batch["masked_lm_ids"]
        correct = losses.top_class_is(outputs, ids)
        return {"mlm_loss": jnp.sum(losses.cross_entropy(outputs, ids) * weights),
                "mlm_accuracy": jnp.sum(correct * weights)}

    def predictions(self, outputs, batch):
        """Per block: summed cross-entropy, correct tokens and masked tokens."""
        logits = np.asarray(outputs, np.float32)  # (B, P, V): float64 would double 150 MB
        shifted = logits - logits.max(axis=-1, keepdims=True)
        log_normaliser = np.log(np.exp(shifted).sum(axis=-1, dtype=np.float64))  # (B, P)
        ids = np.asarray(batch["masked_lm_ids"])
        nll = log_normaliser - np.take_along_axis(shifted, ids[..., None], axis=-1)[..., 0]
        weights = np.asarray(batch["masked_lm_weights"], np.float64)
        return {"nll": (nll * weights).sum(axis=1),
                "correct": ((logits.argmax(axis=-1) == ids) * weights).sum(axis=1),
                "masked": weights.sum(axis=1)}

    def evaluate(self, predictions, gold):
        masked = float(np.sum(predictions["masked"]))
        loss = float(np.sum(predictions["nll"])) / max(masked, 1.0)
        return {"perplexity": math.exp(loss), "mlm_accuracy":
                float(np.sum(predictions["correct"])) / max(masked, 1.0), "mlm_loss": loss}

    def summary(self, history: list[dict]) -> dict:
        """perplexity_before / mlm_accuracy_before (step 0) and the last evaluation's."""
        names = {}
        if history and history[0]["step"] == 0:
            names.update(perplexity_before=history[0]["metrics"]["perplexity"],
                         mlm_accuracy_before=history[0]["metrics"]["mlm_accuracy"])
        if history:
            names.update(perplexity=history[-1]["metrics"]["perplexity"],
                         mlm_accuracy=history[-1]["metrics"]["mlm_accuracy"])
        return names

    # -- the commands ---------------------------------------------------------------------

    @classmethod
    def add_arguments(cls, parser):
        arguments.masked_lm(parser)

    @classmethod
    def from_arguments(cls, args, tokenizer):
        return cls(args.max_seq_len, args.masked_lm_prob, args.seed)

    @classmethod
    def from_settings(cls, settings):
        return cls(**settings)

    def read_examples(self, path, tokenizer, max_seq_len, with_labels=True):
        """Blocks of `max_seq_len` tokens with the held-out masks (training re-masks them)."""
        blocks = mlm_text.load_masked_blocks(path, tokenizer, max_seq_len, self.seed,
                                             self.masked_lm_prob)
        blocks.max_predictions = self.max_predictions
        features = MaskedFeatures(blocks.heldout())
        features.masked_blocks = blocks
        return Examples(path, features, None, list(range(len(blocks))))

    def write_predictions(self, path, examples, predictions):
        """One JSON line per block: masked tokens, correct ones and their cross-entropy."""
        with files.atomic_write(path) as file:
            for index, (masked, correct, nll) in enumerate(zip(
                    predictions["masked"], predictions["correct"], predictions["nll"])):
                file.write(json_values.dumps(dict(block=index, masked=int(masked),
                                                  correct=int(correct), nll=float(nll))) + "\n")


TASK = MaskedLMTask
