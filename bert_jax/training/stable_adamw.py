"""StableAdamW (Wortsman et al., 2023, "Stable and low-precision training for large-scale
vision-language models"): AdamW whose step is clipped per tensor by the RMS of g^2 / v.

The arithmetic is torch-optimi's `StableAdamW` (optimi/stableadamw.py), which ModernBERT
trained with, so a run here and one there take the same steps (tests/test_stable_adamw.py):

  t = t + 1;  b1_t = b1 (1 - b1^(t-1)) / (1 - b1^t), likewise b2_t      (debiased betas)
  m = b1_t m + (1 - b1_t) g;  v = b2_t v + (1 - b2_t) g^2     (already bias-corrected moments)
  rms = sqrt(mean(g^2 / max(v, eps^2)))                       (one number per tensor)
  lr_t = lr / max(1, rms)
  p = p (1 - lr_t wd') - lr_t m / (sqrt(v) + eps)

where wd' = weight_decay (torch-optimi's default, PyTorch AdamW's decoupled decay) or, with
`peak_learning_rate` given, weight_decay / peak (its `decouple_lr=True`: the decay follows the
schedule's fraction of the peak, not the rate itself; ModernBERT's `decoupled_stableadamw`
with weight decay 1e-5). The rate in the decay is the clipped lr_t, as there. The moments
are stored bias-corrected (optimi's form), so the state has optax Adam's size.
"""

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax


class StableAdamWState(NamedTuple):
    count: jax.Array  # () int32: updates applied so far
    mu: Any  # bias-corrected first moment, shaped like params
    nu: Any  # bias-corrected second moment, shaped like params


def _debiased_beta(beta: float, count: jax.Array) -> jax.Array:
    """optimi's `debias_beta`: beta (1 - beta^(t-1)) / (1 - beta^t), written as it does;
    0 at t = 1, so the first moments are the first gradient exactly."""
    power = jnp.power(jnp.float32(beta), count.astype(jnp.float32))
    return (power - beta) / (power - 1.0)


def stable_adamw(learning_rate: float | optax.Schedule, b1: float = 0.9, b2: float = 0.99,
                 eps: float = 1e-6, weight_decay: float = 0.0,
                 mask: Callable[[Any], Any] | None = None,
                 peak_learning_rate: float | None = None,
                 layer_axis: Callable[[Any], Any] | None = None) -> optax.GradientTransformation:
    """StableAdamW as an optax transformation (the module docstring has the formula).

    `learning_rate`: a rate or a schedule of the update count (0 for the first update, as
    optax's). `mask(params)`: a tree of bools, True where weight decay applies (None: all).
    `peak_learning_rate`: given, the decay is scaled by lr_t / peak instead of lr_t.
    `layer_axis(params)`: a tree of bools, True where a leaf holds several layers on its first
    axis (a scanned stack's stored weights): its rms is one number a layer (None: none do).
    """
    decay = weight_decay / peak_learning_rate if peak_learning_rate else weight_decay
    if peak_learning_rate == 0:  # a zero peak never steps, so it never decays either
        decay = 0.0

    def init(params):
        return StableAdamWState(count=jnp.zeros([], jnp.int32),
                                mu=optax.tree.zeros_like(params),
                                nu=optax.tree.zeros_like(params))

    def update(grads, state, params=None):
        if params is None and decay:
            raise ValueError("stable_adamw with weight decay needs the parameters")
        count = optax.safe_increment(state.count)
        beta1, beta2 = _debiased_beta(b1, count), _debiased_beta(b2, count)
        # optimi's `lerp_`: m + (1 - b1_t) (g - m), exactly g at the first update.
        mu = jax.tree.map(lambda m, g: m + (1 - beta1) * (g - m), state.mu, grads)
        nu = jax.tree.map(lambda v, g: beta2 * v + (1 - beta2) * (g * g), state.nu, grads)
        rate = learning_rate(state.count) if callable(learning_rate) else learning_rate
        decays = (mask(params) if mask is not None and params is not None
                  else jax.tree.map(lambda _: True, grads))

        stacked = (layer_axis(grads) if layer_axis is not None
                   else jax.tree.map(lambda _: False, grads))

        def tensor_update(g, m, v, p, decays_here, stacked_here):
            axes = tuple(range(1, g.ndim)) if stacked_here else None
            rms = jnp.sqrt(jnp.mean(g * g / jnp.maximum(v, eps * eps), axis=axes,
                                    keepdims=stacked_here))
            clipped_rate = rate / jnp.maximum(1.0, rms)
            step = m / (jnp.sqrt(v) + eps)
            if decay and decays_here:
                step = step + decay * p
            return -clipped_rate * step

        leaves = params if params is not None else grads  # without decay p is not read
        updates = jax.tree.map(tensor_update, grads, mu, nu, leaves, decays, stacked)
        return updates, StableAdamWState(count=count, mu=mu, nu=nu)

    return optax.GradientTransformation(init, update)
