"""The train step of any task: a pure `train_step(state, batch, rng) -> (state, metrics)`, jitted once.

`build_train_step(run_config, mesh, task)` is the one place that turns a run config, a mesh
and a task (the interface in `task.py`) into compiled-ready functions. The trainer runs
them; AOT compilation for a TPU topology lowers them without any device memory:

    bundle = build_train_step(run_config, mesh, task)
    bundle.train_step.lower(bundle.abstract_state, bundle.abstract_batch,
                            bundle.abstract_rng).compile()

Gradient accumulation splits the global batch into `grad_accum_steps` micro-batches inside
the step. The task's counts are taken on the whole global batch first and every
micro-batch's sums are divided by them, so the accumulated loss and gradient are exactly
the big batch's. With a batch-size warm-up (`batch_warmup.py`) the step takes only the
first N micro-batches, N a function of `state.step`, in a loop of N trips, so one program
serves every N; the counts are then those N micro-batches'. A step whose loss or gradient is not finite leaves the state untouched,
and one whose updated parameters are not finite leaves the step counter where it was; both
report `finite = 0`, so the trainer stops without saving them, the last good checkpoint
intact.

The step is traced under `sharding.activation_sharding(mesh)`, so the model's
`with_logical_constraint` calls keep activations split along the batch. Batches of other
sequence lengths (fine-tuning's length buckets) reuse the same shardings; jit compiles one
program per length.
"""

import dataclasses
from typing import Any, Callable

import flax.linen as nn
import flax.struct
import jax
import jax.numpy as jnp
import optax

from bert_jax import sharding
from bert_jax.training import batch_warmup as batch_warmup_lib, global_reductions, optimizer
from bert_jax.models.config import BertConfig, Precision
from bert_jax.models.layers import layer_scan
from bert_jax.models.layers.platform import traced_platform
from bert_jax.errors import UserError
from bert_jax.training.batch_warmup import BatchWarmup
from bert_jax.training.layer_storage import LayerStorage, stacked_plan
from bert_jax.training.task import Task


class TrainState(flax.struct.PyTreeNode):
    step: jax.Array  # () int32: optimizer updates applied so far
    params: Any  # the unboxed parameter tree of the task's model
    opt_state: Any  # optax state, its moment trees shaped (and sharded) like params


@dataclasses.dataclass(frozen=True)
class TrainStepBundle:
    """Everything needed to run, or only compile, the train step on one mesh."""
    train_step: Callable  # jitted (state, batch, rng) -> (state, metrics); donates state
    eval_step: Callable  # jitted (params, batch) -> {'sums': ..., 'counts': ...}
    predict_step: Callable  # jitted (params, batch) -> {'outputs', 'sums', 'counts'}
    init_state: Callable  # jitted (rng) -> state, created directly in its shardings
    abstract_state: TrainState  # ShapeDtypeStructs carrying their shardings, as stored
    abstract_batch: dict  # the global batch as ShapeDtypeStructs with shardings
    abstract_rng: jax.ShapeDtypeStruct  # a raw uint32 (2,) key, replicated
    state_shardings: TrainState
    batch_shardings: dict
    model_config: BertConfig
    schedule: optax.Schedule
    batch_warmup: BatchWarmup | None  # the batch-size warm-up, or None
    mesh: jax.sharding.Mesh
    task: Task
    model: nn.Module
    # The state per layer (what checkpoints and weights are) and the conversions from and to
    # the stored one (layers stacked while the stack is scanned: layer_storage.py).
    layer_storage: LayerStorage


def model_config_of(run_config):
    """The run config's `model` section as its family's config (vocab_size must be resolved)."""
    from bert_jax.models.families import config_from_dict

    return config_from_dict(dict(run_config.model), source="run config 'model'")


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


def _micro_batch_gradient(task, model, counts):
    """(params, micro_batch, key) -> (gradient, term sums) of the micro-batch's share of the
    whole step's loss: its sums over the step's `counts` (the exact denominators)."""
    def micro_loss(params, micro_batch, micro_key):
        sums = task.sums(task.apply(model, params, micro_batch, True, micro_key), micro_batch)
        return task.means(sums, counts)["loss"], sums

    return jax.grad(micro_loss, has_aux=True)


def _zero_gradients(task, params):
    """The accumulators: a float32 zero per parameter and per term."""
    return (jax.tree.map(lambda p: jnp.zeros(p.shape, jnp.float32), params),
            {term: jnp.zeros((), jnp.float32) for term in task.terms})


def _accumulated_gradients(task, model, params, batch, key, num_micro, mesh):
    """Gradients of the whole batch's loss and its term sums, over `num_micro` micro-batches."""
    counts = task.counts(batch)  # of the global batch: the exact denominators
    grad_fn = _micro_batch_gradient(task, model, counts)

    def accumulate(carry, inputs):
        index, micro_batch = inputs
        grads, sums = grad_fn(params, micro_batch, jax.random.fold_in(key, index))
        return jax.tree.map(jnp.add, carry, (grads, sums)), None

    if num_micro == 1:  # no loop: a scan of one step still compiles (and runs) a while loop
        grads, sums = grad_fn(params, batch, key)
    else:
        micro_batches = _split_micro_batches(batch, num_micro, mesh)
        (grads, sums), _ = jax.lax.scan(
            accumulate, _zero_gradients(task, params), (jnp.arange(num_micro), micro_batches))
    return grads, sums, counts


def _warmup_gradients(task, model, params, batch, key, num_micro, num_used, mesh):
    """As `_accumulated_gradients`, over the first `num_used` (traced) of the batch's
    `num_micro` micro-batch slots: only theirs are counted, and a while loop of `num_used`
    trips runs only them, so one compiled program serves every count (batch_warmup.py)."""
    micro_batches = _split_micro_batches(batch, num_micro, mesh)
    used = jnp.arange(num_micro) < num_used  # (k,)
    per_micro = jax.vmap(task.counts)(micro_batches)  # each count: (k,)
    counts = {name: jnp.sum(jnp.where(used, value, 0.0)) for name, value in per_micro.items()}
    grad_fn = _micro_batch_gradient(task, model, counts)

    def accumulate(index, carry):
        micro_batch = jax.tree.map(
            lambda x: jax.lax.dynamic_index_in_dim(x, index, keepdims=False), micro_batches)
        grads, sums = grad_fn(params, micro_batch, jax.random.fold_in(key, index))
        return jax.tree.map(jnp.add, carry, (grads, sums))

    grads, sums = jax.lax.fori_loop(0, num_used, accumulate, _zero_gradients(task, params))
    return grads, sums, counts


def train_step(state: TrainState, batch: dict, rng: jax.Array, *, task: Task, model: nn.Module,
               tx: optax.GradientTransformation, schedule: optax.Schedule, mesh,
               grad_accum_steps: int = 1, batch_warmup: BatchWarmup | None = None
               ) -> tuple[TrainState, dict]:
    """One optimizer update on the global batch; dropout keys are fold_in(rng, step).

    With `batch_warmup`, the update takes the first `batch_warmup.micro_batches(step)` of
    the batch's `grad_accum_steps` micro-batch slots.
    Metrics: each term's mean, `loss`, every count, grad_norm, learning_rate, finite and,
    with a warm-up, batch_size (the sequences the update took).
    """
    key = jax.random.fold_in(rng, state.step)
    if batch_warmup is None:
        grads, sums, counts = _accumulated_gradients(task, model, state.params, batch, key,
                                                     grad_accum_steps, mesh)
    else:
        num_used = batch_warmup.micro_batches(state.step, jnp)
        grads, sums, counts = _warmup_gradients(task, model, state.params, batch, key,
                                                grad_accum_steps, num_used, mesh)
    trainable = task.trainable()
    if trainable is not None:  # frozen gradients are never needed: XLA drops their work
        keep = optimizer.map_parameter_paths(trainable, grads)
        grads = jax.tree.map(lambda grad, kept: grad if kept else jnp.zeros_like(grad),
                             grads, keep)
    with jax.named_scope(optimizer.NORM):
        grad_norm = global_reductions.global_norm(grads)
    metrics = task.means(sums, counts)
    with jax.named_scope(optimizer.FINITE):
        # Known before the update, so the choice between the new and the old state is made
        # with the update (`_update_if`), not in a second pass after a reduction over the new
        # parameters.
        inputs_finite = jnp.isfinite(metrics["loss"]) & jnp.isfinite(grad_norm)
    # A non-finite loss or gradient keeps the old state, so the last good parameters survive it.
    params, opt_state = _update_if(inputs_finite, tx, grads, state.params, state.opt_state)
    with jax.named_scope(optimizer.FINITE):
        # The updated parameters too: a finite gradient can still step them to inf (an
        # overflow in the optimizer). Such a step does not advance the step counter, which
        # is how the trainer sees it (`trainer._check_finite`, before any checkpoint is
        # written), so a checkpoint of those parameters is never saved.
        finite = inputs_finite & global_reductions.all_finite(params)
    new_state = TrainState(step=jnp.where(finite, state.step + 1, state.step), params=params,
                           opt_state=opt_state)
    metrics.update(counts)
    metrics.update(grad_norm=grad_norm, learning_rate=schedule(state.step),
                   finite=finite.astype(jnp.float32))
    if batch_warmup is not None:
        metrics["batch_size"] = jnp.float32(batch_warmup.micro_batch_size) * num_used
    return new_state, metrics


def _update_if(keep: jax.Array, tx: optax.GradientTransformation, grads: Any, params: Any,
               opt_state: Any) -> tuple[Any, Any]:
    """(params, opt_state) after `tx`'s update from `grads` where `keep`, else as they are.

    On a CPU the choice is a conditional around the update: chosen by selects after it,
    XLA's CPU compiler gave StableAdamW's step separate select passes over the state (its
    profile's `broadcast_select` fusions). Measured side by side on the AMX Xeon
    (2026-12-04), the conditional takes ModernBERT's train step (3 layers, 2 x 1,024) 2.4%
    faster on padded rows (1.4% packed, within that host's noise), and BERT-Base's AdamW step
    as fast, with 2.4% less temporary memory. A GPU's or TPU's compiler fuses the selects
    into the update's own kernels, and on a GPU a conditional waits for its predicate on the
    host, so there the selects stay.
    """
    def updated(operands):
        params, opt_state = operands
        with jax.named_scope(optimizer.UPDATE):
            updates, opt_state = tx.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), opt_state

    if traced_platform() == "cpu":
        return jax.lax.cond(keep, updated, lambda operands: operands, (params, opt_state))
    new = updated((params, opt_state))
    with jax.named_scope(optimizer.UPDATE):
        return jax.tree.map(lambda new_leaf, old_leaf: jnp.where(keep, new_leaf, old_leaf),
                            new, (params, opt_state))


def eval_step(params: Any, batch: dict, *, task: Task, model: nn.Module) -> dict:
    """Deterministic (no dropout) term sums and counts of one batch, to add up over batches."""
    outputs = task.apply(model, params, batch, False)
    return {"sums": task.sums(outputs, batch), "counts": task.counts(batch)}


def predict_step(params: Any, batch: dict, *, task: Task, model: nn.Module) -> dict:
    """The model's deterministic outputs on one batch (the task's predict hook reads them),
    with the term sums and counts, so one pass gives both predictions and the loss."""
    outputs = task.apply(model, params, batch, False)
    return {"outputs": outputs, "sums": task.sums(outputs, batch), "counts": task.counts(batch)}


def _check_batch_size(batch_size: int, grad_accum_steps: int, mesh) -> None:
    """Each micro-batch must split evenly over the data-parallel devices."""
    if batch_size % (grad_accum_steps * sharding.data_parallel_size(mesh)):
        raise UserError(
            f"batch_size {batch_size} must be a multiple of grad_accum_steps "
            f"({grad_accum_steps}) x data-parallel devices "
            f"({sharding.data_parallel_size(mesh)})")


def _abstract_state(boxed, mesh) -> tuple[TrainState, TrainState]:
    """(abstract state as ShapeDtypeStructs carrying their shardings, the shardings), from the
    boxed state's logical axis names."""
    state_shardings = sharding.tree_shardings(boxed, mesh)
    abstract_state = jax.tree.map(
        lambda leaf, leaf_sharding: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype,
                                                         sharding=leaf_sharding),
        nn.meta.unbox(boxed), state_shardings)
    return abstract_state, state_shardings


def _jitted_steps(step_fn, eval_fn, predict_fn, init_fn, state_shardings, batch_shardings,
                  mesh) -> dict:
    """The four functions jitted with their shardings; the train step donates its state."""
    replicated = sharding.replicated(mesh)

    def under_mesh(function, name):  # the model's activation constraints need the mesh's rules
        def traced(*args):
            with sharding.activation_sharding(mesh):
                return function(*args)
        traced.__name__ = traced.__qualname__ = name  # XLA names the program jit_NAME
        return traced

    return dict(
        train_step=jax.jit(under_mesh(step_fn, "train_step"),
                           in_shardings=(state_shardings, batch_shardings, replicated),
                           out_shardings=(state_shardings, replicated), donate_argnums=0),
        eval_step=jax.jit(under_mesh(eval_fn, "eval_step"),
                          in_shardings=(state_shardings.params, batch_shardings),
                          out_shardings=replicated),
        predict_step=jax.jit(under_mesh(predict_fn, "predict_step"),
                             in_shardings=(state_shardings.params, batch_shardings),
                             out_shardings=replicated),
        init_state=jax.jit(init_fn, in_shardings=replicated, out_shardings=state_shardings))


def build_train_step(run_config, mesh, task: Task,
                     model_config: BertConfig | None = None) -> TrainStepBundle:
    """Jitted train/eval/predict/init functions of `task`, abstract state and shardings for
    `mesh`.

    Reads run_config.model (unless `model_config` is given), .precision, .optimizer,
    .batch_size, .grad_accum_steps, .batch_warmup, .num_train_steps, .schedule_steps and
    .data.seq_len.
    """
    model_config = model_config or model_config_of(run_config)
    model_config.check_seq_len(run_config.data.seq_len, "data.seq_len")
    precision = Precision.from_run_config(run_config)
    model = task.build_model(model_config, precision)
    total_steps = run_config.schedule_steps or run_config.num_train_steps
    tx, schedule = optimizer.make_optimizer(run_config.optimizer, total_steps, task.trainable())
    batch = task.abstract_batch(run_config.batch_size, run_config.data.seq_len,
                                lambda ndim: sharding.batch_sharding(mesh, ndim))
    _check_batch_size(run_config.batch_size, run_config.grad_accum_steps, mesh)
    warmup = batch_warmup_lib.from_run_config(run_config)
    plan = stacked_plan(model, model_config, precision, task.trainable())

    def boxed_state(rng, stacked: bool = plan is not None):
        dummy = {name: jnp.zeros((1, *spec.shape[1:]), spec.dtype) for name, spec in batch.items()}
        params = model.init(rng, *task.model_inputs(dummy),
                            **task.model_keywords(dummy))["params"]
        if stacked:  # initialised per layer (a seed's weights either way), then stacked
            params = layer_scan.store_stacked(params, plan)
        # Optimizer moments built from boxed params inherit their logical axis names.
        return TrainState(step=jnp.zeros((), jnp.int32), params=params,
                          opt_state=tx.init(params))

    rng_spec = jax.ShapeDtypeStruct((2,), jnp.uint32, sharding=sharding.replicated(mesh))
    abstract_state, state_shardings = _abstract_state(jax.eval_shape(boxed_state, rng_spec), mesh)
    if plan is None:
        storage = LayerStorage.build(None, abstract_state, state_shardings, state_shardings)
    else:
        per_layer_state, per_layer_shardings = _abstract_state(
            jax.eval_shape(lambda rng: boxed_state(rng, stacked=False), rng_spec), mesh)
        storage = LayerStorage.build(plan, per_layer_state, per_layer_shardings, state_shardings)
    batch_shardings = {name: spec.sharding for name, spec in batch.items()}
    steps = _jitted_steps(
        lambda state, batch, rng: train_step(
            state, batch, rng, task=task, model=model, tx=tx, schedule=schedule, mesh=mesh,
            grad_accum_steps=run_config.grad_accum_steps, batch_warmup=warmup),
        lambda params, batch: eval_step(params, batch, task=task, model=model),
        lambda params, batch: predict_step(params, batch, task=task, model=model),
        lambda rng: nn.meta.unbox(boxed_state(rng)), state_shardings, batch_shardings, mesh)
    return TrainStepBundle(
        **steps, abstract_state=abstract_state, abstract_batch=batch, abstract_rng=rng_spec,
        state_shardings=state_shardings, batch_shardings=batch_shardings,
        model_config=model_config, schedule=schedule, batch_warmup=warmup, mesh=mesh, task=task,
        model=model, layer_storage=storage)
