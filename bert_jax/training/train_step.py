"""The pre-training step: a pure `train_step(state, batch, rng) -> (state, metrics)`, jitted once.

`build_train_step(run_config, mesh)` is the one place that turns a run config and a mesh
into compiled-ready functions. The trainer runs them; AOT compilation for a TPU topology
lowers them without any device memory:

    bundle = build_train_step(run_config, mesh)
    bundle.train_step.lower(bundle.abstract_state, bundle.abstract_batch,
                            bundle.abstract_rng).compile()

Gradient accumulation splits the global batch into `grad_accum_steps` micro-batches inside
the step and weights each one so that the summed loss is exactly the big batch's loss. A
step whose loss or gradient is not finite leaves the state untouched (and reports
`finite = 0`), so the trainer can stop with the last good parameters intact.

The step is traced under `sharding.activation_sharding(mesh)`, so the model's
`with_logical_constraint` calls keep activations split along the batch.
"""

import dataclasses
from typing import Any, Callable

import flax.linen as nn
import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
import optax

from bert_jax import losses, sharding
from bert_jax.training import optimizer
from bert_jax.config import BertConfig
from bert_jax.errors import UserError
from bert_jax.model import BertForPreTraining

# name -> (dtype, shape as a function of (batch, seq_len, max_predictions)).
BATCH_FEATURES = {
    "input_ids": (np.int32, lambda b, t, p: (b, t)),
    "input_mask": (np.int32, lambda b, t, p: (b, t)),
    "segment_ids": (np.int32, lambda b, t, p: (b, t)),
    "masked_lm_positions": (np.int32, lambda b, t, p: (b, p)),
    "masked_lm_ids": (np.int32, lambda b, t, p: (b, p)),
    "masked_lm_weights": (np.float32, lambda b, t, p: (b, p)),
    "next_sentence_labels": (np.int32, lambda b, t, p: (b,)),
}


class TrainState(flax.struct.PyTreeNode):
    step: jax.Array  # () int32: optimizer updates applied so far
    params: Any  # the unboxed BertForPreTraining parameter tree
    opt_state: Any  # optax state, its moment trees shaped (and sharded) like params


@dataclasses.dataclass(frozen=True)
class TrainStepBundle:
    """Everything needed to run, or only compile, the train step on one mesh."""
    train_step: Callable  # jitted (state, batch, rng) -> (state, metrics); donates state
    eval_step: Callable  # jitted (params, batch) -> metrics
    init_state: Callable  # jitted (rng) -> state, created directly in its shardings
    abstract_state: TrainState  # ShapeDtypeStructs carrying their shardings
    abstract_batch: dict  # the global batch as ShapeDtypeStructs with shardings
    abstract_rng: jax.ShapeDtypeStruct  # a raw uint32 (2,) key, replicated
    state_shardings: TrainState
    batch_shardings: dict
    model_config: BertConfig
    schedule: optax.Schedule
    mesh: jax.sharding.Mesh


def model_config_of(run_config) -> BertConfig:
    """The run config's `model` section as a BertConfig (vocab_size must be resolved)."""
    return BertConfig.from_dict(dict(run_config.model), source="run config 'model'")


def _forward(model, params, batch, train, key=None):
    rngs = {"dropout": key} if train else {}
    mlm_logits, nsp_logits = model.apply(
        {"params": params}, batch["input_ids"], batch["segment_ids"], batch["input_mask"],
        batch["masked_lm_positions"], train=train, rngs=rngs)
    return losses.pretraining_loss(
        mlm_logits, nsp_logits, batch["masked_lm_ids"], batch["masked_lm_weights"],
        batch["next_sentence_labels"])


def _split_micro_batches(batch: dict, num_micro: int, mesh) -> dict:
    """(B, ...) -> (k, B/k, ...), micro-batch j = examples j, j+k, j+2k, ...

    Interleaving keeps each device's rows on that device: a contiguous block of B splits
    into k contiguous blocks of B/k, so no data moves between devices.
    """
    def split(x):
        x = x.reshape(x.shape[0] // num_micro, num_micro, *x.shape[1:])  # (B/k, k, ...)
        x = jnp.swapaxes(x, 0, 1)  # (k, B/k, ...)
        return jax.lax.with_sharding_constraint(x, sharding.micro_batch_sharding(mesh, x.ndim))
    return jax.tree.map(split, batch)


def _accumulated_gradients(model, params, batch, key, num_micro, mesh):
    """Gradients and metrics of the whole batch, summed over `num_micro` micro-batches."""
    total_predictions = jnp.sum(batch["masked_lm_weights"].astype(jnp.float32))

    def micro_loss(params, micro_batch, micro_key):
        _, metrics = _forward(model, params, micro_batch, True, micro_key)
        # (n_i + 1e-5) / (N + 1e-5) turns the micro-batch mean into its share of the
        # big batch's sum(nll * w) / (N + 1e-5); NSP means have equal weights 1/k.
        mlm_share = (metrics["num_predictions"] + 1e-5) / (total_predictions + 1e-5)
        mlm_loss = metrics["mlm_loss"] * mlm_share
        nsp_loss = metrics["nsp_loss"] / num_micro
        parts = dict(mlm_loss=mlm_loss, nsp_loss=nsp_loss,
                     mlm_accuracy=metrics["mlm_accuracy"] * mlm_share,
                     nsp_accuracy=metrics["nsp_accuracy"] / num_micro,
                     num_predictions=metrics["num_predictions"])
        return mlm_loss + nsp_loss, parts

    grad_fn = jax.grad(micro_loss, has_aux=True)

    def accumulate(carry, inputs):
        index, micro_batch = inputs
        grads, parts = grad_fn(params, micro_batch, jax.random.fold_in(key, index))
        return jax.tree.map(jnp.add, carry, (grads, parts)), None

    if num_micro == 1:  # no loop: a scan of one step still compiles (and runs) a while loop
        grads, metrics = grad_fn(params, batch, key)
    else:
        micro_batches = _split_micro_batches(batch, num_micro, mesh)
        zeros = jax.tree.map(lambda p: jnp.zeros(p.shape, jnp.float32), params)
        zero_parts = {name: jnp.zeros((), jnp.float32) for name in (
            "mlm_loss", "nsp_loss", "mlm_accuracy", "nsp_accuracy", "num_predictions")}
        (grads, metrics), _ = jax.lax.scan(
            accumulate, (zeros, zero_parts), (jnp.arange(num_micro), micro_batches))
    metrics["loss"] = metrics["mlm_loss"] + metrics["nsp_loss"]
    return grads, metrics


def train_step(state: TrainState, batch: dict, rng: jax.Array, *, model: nn.Module,
               tx: optax.GradientTransformation, schedule: optax.Schedule, mesh,
               grad_accum_steps: int = 1) -> tuple[TrainState, dict]:
    """One optimizer update on the global batch; dropout keys are fold_in(rng, step)."""
    key = jax.random.fold_in(rng, state.step)
    grads, metrics = _accumulated_gradients(model, state.params, batch, key, grad_accum_steps,
                                            mesh)
    grad_norm = optax.tree.norm(grads)
    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    finite = jnp.isfinite(metrics["loss"]) & jnp.isfinite(grad_norm)
    new_state = TrainState(step=state.step + 1, params=params, opt_state=opt_state)
    # A non-finite step keeps the old state, so the last good parameters survive it.
    new_state = jax.tree.map(lambda new, old: jnp.where(finite, new, old), new_state, state)
    metrics.update(grad_norm=grad_norm, learning_rate=schedule(state.step),
                   finite=finite.astype(jnp.float32))
    return new_state, metrics


def eval_step(params: Any, batch: dict, *, model: nn.Module) -> dict:
    """Deterministic (no dropout) loss and accuracies of one batch."""
    _, metrics = _forward(model, params, batch, False)
    return metrics


def abstract_batch(batch_size: int, seq_len: int, max_predictions: int, mesh) -> dict:
    """The global batch as ShapeDtypeStructs sharded along the batch over the mesh."""
    specs = {}
    for name, (dtype, shape_of) in BATCH_FEATURES.items():
        shape = shape_of(batch_size, seq_len, max_predictions)
        specs[name] = jax.ShapeDtypeStruct(shape, dtype,
                                           sharding=sharding.batch_sharding(mesh, len(shape)))
    return specs


def build_train_step(run_config, mesh, model_config: BertConfig | None = None
                     ) -> TrainStepBundle:
    """Jitted train/eval/init functions, abstract state and shardings for `mesh`.

    Reads run_config.model (unless `model_config` is given), .optimizer, .batch_size,
    .grad_accum_steps, .num_train_steps, .schedule_steps and .data.seq_len/max_predictions.
    """
    model_config = model_config or model_config_of(run_config)
    model = BertForPreTraining(model_config)
    total_steps = run_config.schedule_steps or run_config.num_train_steps
    tx, schedule = optimizer.make_optimizer(run_config.optimizer, total_steps)
    batch = abstract_batch(run_config.batch_size, run_config.data.seq_len,
                           run_config.data.max_predictions, mesh)
    if run_config.batch_size % (run_config.grad_accum_steps * sharding.data_parallel_size(mesh)):
        raise UserError(
            f"batch_size {run_config.batch_size} must be a multiple of grad_accum_steps "
            f"({run_config.grad_accum_steps}) x data-parallel devices "
            f"({sharding.data_parallel_size(mesh)})")

    def boxed_state(rng):
        dummy = {name: jnp.zeros(spec.shape, spec.dtype) for name, spec in batch.items()}
        variables = model.init(rng, dummy["input_ids"][:1], dummy["segment_ids"][:1],
                               dummy["input_mask"][:1], dummy["masked_lm_positions"][:1])
        params = variables["params"]
        # Optimizer moments built from boxed params inherit their logical axis names.
        return TrainState(step=jnp.zeros((), jnp.int32), params=params,
                          opt_state=tx.init(params))

    rng_spec = jax.ShapeDtypeStruct((2,), jnp.uint32, sharding=sharding.replicated(mesh))
    boxed = jax.eval_shape(boxed_state, rng_spec)
    state_shardings = sharding.tree_shardings(boxed, mesh)
    abstract_state = jax.tree.map(
        lambda leaf, leaf_sharding: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype,
                                                         sharding=leaf_sharding),
        nn.meta.unbox(boxed), state_shardings)
    batch_shardings = {name: spec.sharding for name, spec in batch.items()}
    replicated = sharding.replicated(mesh)

    def step_fn(state, batch, rng):
        with sharding.activation_sharding(mesh):
            return train_step(state, batch, rng, model=model, tx=tx, schedule=schedule,
                              mesh=mesh, grad_accum_steps=run_config.grad_accum_steps)

    def eval_fn(params, batch):
        with sharding.activation_sharding(mesh):
            return eval_step(params, batch, model=model)

    return TrainStepBundle(
        train_step=jax.jit(step_fn, in_shardings=(state_shardings, batch_shardings, replicated),
                           out_shardings=(state_shardings, replicated), donate_argnums=0),
        eval_step=jax.jit(eval_fn,
                          in_shardings=(state_shardings.params, batch_shardings),
                          out_shardings=replicated),
        init_state=jax.jit(lambda rng: nn.meta.unbox(boxed_state(rng)),
                           in_shardings=replicated, out_shardings=state_shardings),
        abstract_state=abstract_state, abstract_batch=batch, abstract_rng=rng_spec,
        state_shardings=state_shardings, batch_shardings=batch_shardings,
        model_config=model_config, schedule=schedule, mesh=mesh)
