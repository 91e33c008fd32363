"""Learning-rate schedules of the update count, chosen by the run config's `optimizer.schedule`.

  linear  the original BERT schedule: linear warm-up from 0, then a linear decay to 0 at the
          schedule's end, counted from step 0 (google-research/bert `optimization.py`);
  wsd     warm-up, stable, decay ("trapezoidal"; Hägele et al., 2024, ModernBERT): linear
          warm-up from 0 to the peak, the peak held, then over the last `decay_steps` a decay
          to 0 whose shape is linear, cosine or 1-sqrt (ModernBERT's: peak (1 - sqrt(x)),
          x the fraction of the decay done).
"""

import math

import jax.numpy as jnp
import optax

from bert_jax.errors import UserError

# Each shape: the fraction of the decay done (0..1) -> the fraction of the peak left.
DECAY_SHAPES = {
    "linear": lambda done: 1.0 - done,
    "cosine": lambda done: 0.5 * (1.0 + jnp.cos(math.pi * done)),
    "1-sqrt": lambda done: 1.0 - jnp.sqrt(done),
}


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


def warmup_stable_decay_schedule(peak_learning_rate: float, warmup_steps: int,
                                 decay_steps: int, total_steps: int,
                                 shape: str = "1-sqrt") -> optax.Schedule:
    """Warm-up over [0, warmup), the peak until total - decay, then `shape` down to 0 at
    `total_steps` (and 0 after it)."""
    decay_start = total_steps - decay_steps
    fraction_left = DECAY_SHAPES[shape]

    def schedule(step):
        step = jnp.asarray(step, jnp.float32)
        warmup = peak_learning_rate * step / max(warmup_steps, 1)
        done = jnp.clip((step - decay_start) / max(decay_steps, 1), 0.0, 1.0)
        decay = peak_learning_rate * fraction_left(done)
        return jnp.where(step < warmup_steps, warmup,
                         jnp.where(step < decay_start, peak_learning_rate, decay))
    return schedule


def make_schedule(config, total_steps: int) -> optax.Schedule:
    """The schedule the run config's `optimizer` section names, over `total_steps` updates."""
    if config.schedule == "linear":
        return warmup_decay_schedule(config.learning_rate, config.warmup_steps, total_steps)
    if config.warmup_steps + config.decay_steps > total_steps:
        raise UserError(
            f"optimizer.warmup_steps ({config.warmup_steps}) + optimizer.decay_steps "
            f"({config.decay_steps}) exceed the schedule's {total_steps} steps "
            "(schedule_steps, or num_train_steps when it is 0)")
    return warmup_stable_decay_schedule(config.learning_rate, config.warmup_steps,
                                        config.decay_steps, total_steps, config.decay_shape)
