"""BERT's optimizers: AdamW (Devlin et al., 2019), LAMB (You et al., 2019) for large batches,
and StableAdamW (Wortsman et al., 2023; ModernBERT's, `stable_adamw.py`).

Each clips the global gradient norm to `clip_norm` first (0: no clip; StableAdamW clips its
step per tensor by itself), decays every weight except normalisation parameters and biases
(as the original's `exclude_from_weight_decay`), and follows the learning-rate schedule the
config names (`schedules.py`: BERT's linear warm-up and decay, or warmup-stable-decay).

Unlike the original TF `AdamWeightDecayOptimizer`, Adam's moments are bias-corrected, as in
PyTorch's `AdamW` and `optax.adamw`; with thousands of warm-up steps the two differ only in
the first few updates.
"""

from typing import Any

import jax
import optax

from bert_jax.errors import UserError
from bert_jax.models.layers.layer_scan import is_stored_key
from bert_jax.run_config.ranges import check_ranges
from bert_jax.training.schedules import make_schedule
from bert_jax.training.stable_adamw import stable_adamw
from bert_jax.training.global_reductions import clip_by_global_norm


def map_parameter_paths(function, params: Any) -> Any:
    """A tree like `params` of `function(names)`, names the leaf's dictionary keys."""
    def call(path, _):
        # Dictionary keys only: a flax `Partitioned` box adds an attribute key (`.value`).
        return function(tuple(str(key.key) for key in path
                              if isinstance(key, jax.tree_util.DictKey)))
    return jax.tree_util.tree_map_with_path(call, params)


def layer_axis_mask(params: Any) -> Any:
    """True for leaves that hold several layers on their first axis (a scanned stack's stored
    weights, `layer_scan.store_stacked`): a per-tensor statistic (LAMB's trust ratio,
    StableAdamW's clipping) is taken per layer there, as it is for per-layer leaves."""
    return map_parameter_paths(lambda names: any(map(is_stored_key, names)), params)


def per_layer_statistics(transform: optax.GradientTransformation
                         ) -> optax.GradientTransformation:
    """A stateless transform that treats each leaf as one tensor (optax's trust ratio),
    applied to each layer of a leaf that holds several (`layer_axis_mask`)."""
    def update(updates, state, params=None):
        def leaf_update(update, param, stacked):
            one = lambda update, param: transform.update(update, state, param)[0]  # noqa: E731
            return jax.vmap(one)(update, param) if stacked else one(update, param)
        return jax.tree.map(leaf_update, updates, params, layer_axis_mask(params)), state
    return optax.GradientTransformation(transform.init, update)


def decay_mask(params: Any) -> Any:
    """True for weights that get weight decay: everything but normalisation parameters (any
    module named *norm*: BERT's LayerNorms, a pre-norm encoder's final norm) and biases."""
    def decays(names):
        is_norm = any("norm" in name for name in names)
        is_bias = names[-1] in ("bias", "output_bias")
        return not (is_norm or is_bias)
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
    check_ranges({f"optimizer.{key}": value for key, value in config.items()},
                 source="run config")
    schedule = make_schedule(config, total_steps)
    transform = optax.chain(named(_clipping(config.clip_norm), CLIPPING),
                            named(_update(config, schedule), UPDATE))
    if trainable is not None:
        transform = optax.multi_transform(
            {"train": transform, "freeze": optax.set_to_zero()},
            lambda params: map_parameter_paths(
                lambda names: "train" if trainable(names) else "freeze", params))
    return transform, schedule


def _clipping(clip_norm: float) -> optax.GradientTransformation:
    """The global-norm clip; 0 turns it off (a norm of 0 would zero every update)."""
    return clip_by_global_norm(clip_norm) if clip_norm > 0 else optax.identity()


def _update(config, schedule: optax.Schedule) -> optax.GradientTransformation:
    """The optimizer `config.name` names, its weight decay masked by `decay_mask`."""
    if config.decouple_learning_rate and config.name != "stable_adamw":
        raise UserError(f"optimizer.decouple_learning_rate is a StableAdamW option (torch-optimi's "
                        f"decouple_lr); optimizer.name is {config.name!r}")
    if config.name == "stable_adamw":
        peak = config.learning_rate if config.decouple_learning_rate else None
        return stable_adamw(schedule, b1=config.beta1, b2=config.beta2, eps=config.epsilon,
                            weight_decay=config.weight_decay, mask=decay_mask,
                            peak_learning_rate=peak, layer_axis=layer_axis_mask)
    if config.name == "adamw":
        return optax.adamw(schedule, b1=config.beta1, b2=config.beta2, eps=config.epsilon,
                           weight_decay=config.weight_decay, mask=decay_mask)
    # optax.lamb's chain, its trust ratio taken per layer.
    return optax.chain(
        optax.scale_by_adam(b1=config.beta1, b2=config.beta2, eps=config.epsilon),
        optax.add_decayed_weights(config.weight_decay, decay_mask),
        per_layer_statistics(optax.scale_by_trust_ratio()),
        optax.scale_by_learning_rate(schedule))
