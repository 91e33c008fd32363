"""BERT's optimizers: AdamW (Devlin et al., 2019) and LAMB (You et al., 2019) for large batches.

Both clip the global gradient norm to `clip_norm` first, decay every weight except
LayerNorm parameters and biases (as the original's `exclude_from_weight_decay`), and
follow the original's learning-rate schedule (`warmup_decay_schedule`).

Unlike the original TF `AdamWeightDecayOptimizer`, Adam's moments are bias-corrected, as in
PyTorch's `AdamW` and `optax.adamw`; with thousands of warm-up steps the two differ only in
the first few updates.
"""

from typing import Any

import jax
import jax.numpy as jnp
import optax

from bert_jax.errors import UserError
from bert_jax.training.global_reductions import clip_by_global_norm

OPTIMIZERS = ("adamw", "lamb")


def warmup_decay_schedule(peak_learning_rate: float, warmup_steps: int,
                          total_steps: int) -> optax.Schedule:
    """The original BERT schedule: linear warm-up from 0, linear decay to 0 at `total_steps`.

    As in google-research/bert `optimization.py`, the decay is counted from step 0, so just
    after warm-up the rate is peak * (1 - warmup / total), not the peak.
    """
    def schedule(step):
        step = jnp.asarray(step, jnp.float32)
        warmup = peak_learning_rate * step / max(warmup_steps, 1)
        decay = peak_learning_rate * jnp.maximum(1.0 - step / total_steps, 0.0)
        return jnp.where(step < warmup_steps, warmup, decay)
    return schedule


def map_parameter_paths(function, params: Any) -> Any:
    """A tree like `params` of `function(names)`, names the leaf's dictionary keys."""
    def call(path, _):
        # Dictionary keys only: a flax `Partitioned` box adds an attribute key (`.value`).
        return function(tuple(str(key.key) for key in path
                              if isinstance(key, jax.tree_util.DictKey)))
    return jax.tree_util.tree_map_with_path(call, params)


def decay_mask(params: Any) -> Any:
    """True for weights that get weight decay: everything but LayerNorm parameters and biases."""
    def decays(names):
        is_layer_norm = any("layer_norm" in name for name in names)
        is_bias = names[-1] in ("bias", "output_bias")
        return not (is_layer_norm or is_bias)
    return map_parameter_paths(decays, params)


# Name scopes of the step's parts, read back from the compiled program's op_name metadata
# (bert_jax.compiler.aot_bytes attributes each op's bytes by them).
CLIPPING, UPDATE, NORM, FINITE = "gradient_clipping", "optimizer_update", "gradient_norm", "finite_check"


def named(transform: optax.GradientTransformation, name: str) -> optax.GradientTransformation:
    """`transform` with its update traced under `jax.named_scope(name)`; same state, same
    numbers: only the op names of the compiled program change."""
    def update(updates, state, params=None):
        with jax.named_scope(name):
            return transform.update(updates, state, params)
    return optax.GradientTransformation(transform.init, update)


def make_optimizer(config, total_steps: int, trainable: Any = None
                   ) -> tuple[optax.GradientTransformation, optax.Schedule]:
    """The run config's `optimizer` section as an optax transformation and its schedule.

    `total_steps` is the length of the whole schedule (both phases of a two-phase run).
    `trainable(path) -> bool` (path: the parameter's names, e.g. ('bert', 'layer_0', ...);
    None: everything trains) freezes the others: no update, no decay, no optimizer slots.
    """
    if config.name not in OPTIMIZERS:
        raise UserError(f"optimizer.name must be one of {list(OPTIMIZERS)}, got {config.name!r}")
    schedule = warmup_decay_schedule(config.learning_rate, config.warmup_steps, total_steps)
    if config.name == "adamw":
        update = optax.adamw(schedule, b1=config.beta1, b2=config.beta2, eps=config.epsilon,
                             weight_decay=config.weight_decay, mask=decay_mask)
    else:
        update = optax.lamb(schedule, b1=config.beta1, b2=config.beta2, eps=config.epsilon,
                            weight_decay=config.weight_decay, mask=decay_mask)
    transform = optax.chain(named(clip_by_global_norm(config.clip_norm), CLIPPING),
                            named(update, UPDATE))
    if trainable is not None:
        transform = optax.multi_transform(
            {"train": transform, "freeze": optax.set_to_zero()},
            lambda params: map_parameter_paths(
                lambda names: "train" if trainable(names) else "freeze", params))
    return transform, schedule
