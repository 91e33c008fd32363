"""The training task interface: what one training run optimises, and how it is judged.

The training system (`bert_jax/training/`) owns everything every task shares: the jitted
step, the mesh and logical-axis table, the optimizer, orbax checkpoints with exact resume,
SIGTERM saves, TensorBoard, the progress bar and the NaN stop. A task owns the rest:

  model        `build_model(model_config, precision)`: encoder + head, a Flax module whose
               parameters carry logical axis names; `model_inputs(batch)` are its arguments.
  batch        `batch_schema()`: name -> (dtype, shape as a function of (batch, seq_len)).
  loss         `counts(batch)` and `sums(outputs, batch)`: named terms as (sum, count) in
               float32. A count depends only on the batch (never on the parameters), so
               the step takes the whole global batch's counts first and divides every
               micro-batch's sums by them: gradient accumulation and multi-host means are
               then exact (Flax lm1b's (sum, denominator) metrics). The loss is the sum of
               the means of the `objective` terms (pre-training: mlm_loss + nsp_loss).
  metrics      `logged` (each log step) and `evaluated` (the mean of each term over the
               evaluation data) are metric names.
  predict      `predictions(outputs, batch)`: host-side numpy outputs -> numpy predictions.
  evaluate     `evaluate(predictions, gold)`: host-side, with the library that defines each
               metric (scikit-learn, scipy, seqeval) -> {name: float}.
  trainable    `trainable()`: a predicate on parameter paths, False for frozen parameters
               (default None: everything trains).
"""

import abc
import dataclasses
from typing import Any, Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from bert_jax.models.config import BertConfig, Precision
from bert_jax.errors import UserError

# name -> (numpy dtype, shape as a function of (batch_size, seq_len)).
BatchSchema = dict[str, tuple[Any, Callable[[int, int], tuple[int, ...]]]]


def safe_mean(total, count, xp=jnp):
    """total / count, and 0 (not NaN, with finite gradients) where count is 0.

    `xp` is jax.numpy inside the step, numpy for host-side float64 sums over many batches.
    """
    return total / xp.where(count > 0, count, 1.0)


class Task(abc.ABC):
    """One training objective; see the module docstring for what each part is for."""

    name: str = ""
    # term name -> the name of its count (several terms may share one, e.g. loss and accuracy).
    terms: dict[str, str] = {}
    objective: tuple[str, ...] = ()  # terms whose means add up to the loss
    logged: tuple[str, ...] = ("loss", "grad_norm", "learning_rate")
    evaluated: tuple[str, ...] = ("loss",)

    @abc.abstractmethod
    def build_model(self, model_config: BertConfig, precision: Precision) -> nn.Module:
        """The encoder with this task's head."""

    @abc.abstractmethod
    def batch_schema(self) -> BatchSchema:
        """Every feature of a batch."""

    @abc.abstractmethod
    def model_inputs(self, batch: dict) -> tuple:
        """The positional arguments of the model (before `train`)."""

    def model_keywords(self, batch: dict) -> dict:
        """Keyword arguments of the model after `train` (packed rows' instance ids)."""
        return {}

    @abc.abstractmethod
    def counts(self, batch: dict) -> dict[str, jax.Array]:
        """Each count name -> a float32 scalar that depends only on the batch."""

    @abc.abstractmethod
    def sums(self, outputs: Any, batch: dict) -> dict[str, jax.Array]:
        """Each term -> its float32 sum over the batch."""

    def predictions(self, outputs: Any, batch: dict) -> dict[str, np.ndarray]:
        """Host-side: the model's numpy outputs -> predictions, one row per example."""
        raise NotImplementedError(f"task {self.name!r} has no predict hook")

    def evaluate(self, predictions: dict[str, np.ndarray], gold: Any) -> dict[str, float]:
        """Host-side: predictions and the gold labels -> metrics."""
        raise NotImplementedError(f"task {self.name!r} has no host-side evaluation")

    def settings(self) -> dict:
        """What distinguishes this task instance (JSON), e.g. its number of labels."""
        return {}

    def trainable(self) -> Callable[[tuple[str, ...]], bool] | None:
        """`(parameter path names) -> bool`, False = frozen; None: everything trains."""
        return None

    # -- shared by every task: do not override --------------------------------------------

    def apply(self, model: nn.Module, params: Any, batch: dict, train: bool,
              key: jax.Array | None = None) -> Any:
        """The model's outputs on a batch (dropout from `key` when training)."""
        rngs = {"dropout": key} if train else {}
        return model.apply({"params": params}, *self.model_inputs(batch), train=train,
                           rngs=rngs, **self.model_keywords(batch))

    def means(self, sums: dict, counts: dict, xp=jnp) -> dict[str, jax.Array]:
        """Each term's mean and the loss (the sum of the objective's means)."""
        means = {term: safe_mean(sums[term], counts[count], xp)
                 for term, count in self.terms.items()}
        means["loss"] = sum(means[term] for term in self.objective)
        return means

    def abstract_batch(self, batch_size: int, seq_len: int, sharding_of) -> dict:
        """The batch as ShapeDtypeStructs; `sharding_of(ndim)` places each feature."""
        specs = {}
        for name, (dtype, shape_of) in self.batch_schema().items():
            shape = shape_of(batch_size, seq_len)
            specs[name] = jax.ShapeDtypeStruct(shape, dtype, sharding=sharding_of(len(shape)))
        return specs

    def train_step_flops(self, model_config: BertConfig, batch_size: int, seq_len: int) -> float:
        """Model FLOPs of one train step (3x forward), for MFU; the encoder's by default."""
        from bert_jax.compiler import flops

        return 3 * batch_size * flops.encoder_flops_per_sequence(model_config, seq_len)


@dataclasses.dataclass
class Examples:
    """A labelled (or unlabelled) file, read and encoded for one fine-tuning task."""
    source: str  # the file it came from
    features: dict[str, np.ndarray]  # the batch schema's features, one row per example
    gold: Any  # what `evaluate` compares predictions with (None without labels)
    rows: list  # the input rows, so predictions can be written beside them, in input order


class FineTuningTask(Task):
    """A task `bert-jax finetune NAME`, `predict` and `evaluate` run.

    The commands know only this interface, so a task is added by adding its module to
    `bert_jax/tasks/` (and its name to TASKS): the module defines `TASK = TheTaskClass`.
    What the task needs to rebuild itself (label names, column choices) is `settings()`,
    saved as task.json with every model directory it writes.
    """
    # The metric `DIR/best/` and early stopping follow, and whether greater is better.
    best_metric: str = "loss"
    greater_is_better: bool = False
    # The settings `tuned_settings` may choose: a rerun in the same work directory may
    # differ in these (the run chose them), and in no other (`workdir.check_run`).
    tuned_setting_names: tuple[str, ...] = ()

    @classmethod
    def add_arguments(cls, parser) -> None:
        """The task's own `finetune` flags (the common ones are the command's)."""

    @classmethod
    @abc.abstractmethod
    def from_arguments(cls, args, tokenizer) -> "FineTuningTask":
        """The task for `finetune`'s parsed flags (labels may come from args.train)."""

    @classmethod
    @abc.abstractmethod
    def from_settings(cls, settings: dict) -> "FineTuningTask":
        """The task a saved model was trained for (`settings()` of that run)."""

    @abc.abstractmethod
    def read_examples(self, path: str, tokenizer, max_seq_len: int,
                      with_labels: bool = True) -> Examples:
        """A training-format file (or, for prediction, also plain text) as Examples."""

    @abc.abstractmethod
    def write_predictions(self, path: str, examples: Examples, predictions: dict) -> None:
        """Predictions in input order, the format chosen by the extension of `path`."""

    def check_prediction_path(self, path: str) -> None:
        """Refuses (UserError) a prediction file name `write_predictions` has no format for,
        so that `predict` says so before any work; every name is fine by default."""

    def tuned_settings(self, metrics: dict) -> dict:
        """Settings chosen on the evaluation file from its `metrics` (SQuAD v2.0's null
        threshold), recorded in the task.json of the model they were measured on so that
        `predict` and `evaluate` use them; {} for a task that tunes nothing."""
        return {}

    def num_inputs(self, examples: Examples) -> int:
        """How many inputs the user gave (rows, sentences, questions), not the windows they
        became: what `predict` says it wrote predictions for."""
        return len(examples.rows)

    def examples_from_inputs(self, inputs: list, tokenizer, max_seq_len: int) -> Examples:
        """Python values to predict (as the API's `Model.predict` takes them) as Examples,
        unlabelled; the same encoding `read_examples` gives the same inputs in a file."""
        raise UserError(f"task {self.name!r} does not predict from Python values; use "
                        "bert-jax predict on a file")

    def prediction_values(self, examples: Examples, predictions: dict) -> list:
        """One plain Python value per input, in input order: what `write_predictions`
        writes for it (so the API's `Model.predict` and `bert-jax predict` agree)."""
        raise UserError(f"task {self.name!r} does not predict from Python values; use "
                        "bert-jax predict on a file")
