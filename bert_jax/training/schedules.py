"""Learning-rate schedules of the update count, chosen by the run config's `optimizer.schedule`.

  linear  the original BERT schedule: linear warm-up from 0, then a linear decay to 0 at the
          schedule's end, counted from step 0 (google-research/bert `optimization.py`);
  wsd     warm-up, stable, decay ("trapezoidal"; Hägele et al., 2024, ModernBERT): linear
          warm-up from 0 to the peak, the peak held, then over the last `decay_steps` a decay
          to `final_learning_rate_ratio` x the peak (0 by default; Composer's alpha_f: mmBERT
          and Ettin stop at 0.02 and 0.04) whose shape is linear, cosine or 1-sqrt
          (ModernBERT's: peak (1 - sqrt(x)), x the fraction of the decay done).

Either is counted from `schedule_start_step` (0: the run's first update) to the step the
schedule ends at (`schedule_steps`, or num_train_steps when it is 0), so a phase of a phased
run can start a learning-rate shape of its own, as Composer's `reset_time` does between the
published recipes' phases (tasks/phases.py); the optimizer's update count carries on.
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
                                 shape: str = "1-sqrt",
                                 final_ratio: float = 0.0) -> optax.Schedule:
    """Warm-up over [0, warmup), the peak until total - decay, then `shape` down to
    final_ratio x the peak at `total_steps` (and that after it)."""
    decay_start = total_steps - decay_steps
    shape_left = DECAY_SHAPES[shape]

    def fraction_left(done):  # Composer's alpha_f + (1 - alpha_f) * shape
        return final_ratio + (1.0 - final_ratio) * shape_left(done)

    def schedule(step):
        step = jnp.asarray(step, jnp.float32)
        warmup = peak_learning_rate * step / max(warmup_steps, 1)
        done = jnp.clip((step - decay_start) / max(decay_steps, 1), 0.0, 1.0)
        decay = peak_learning_rate * fraction_left(done)
        return jnp.where(step < warmup_steps, warmup,
                         jnp.where(step < decay_start, peak_learning_rate, decay))
    return schedule


def make_schedule(config, total_steps: int) -> optax.Schedule:
    """The schedule the run config's `optimizer` section names, from its
    `schedule_start_step` to update `total_steps`."""
    start = config.schedule_start_step
    length = total_steps - start
    if length <= 0:
        raise UserError(f"optimizer.schedule_start_step ({start}) must be before the step the "
                        f"schedule ends at ({total_steps}: schedule_steps, or num_train_steps "
                        "when it is 0)")
    if config.schedule == "linear":
        if config.final_learning_rate_ratio:
            raise UserError("optimizer.final_learning_rate_ratio is a wsd option; the linear "
                            "schedule (BERT's) decays to 0")
        inner = warmup_decay_schedule(config.learning_rate, config.warmup_steps, length)
    else:
        if config.warmup_steps + config.decay_steps > length:
            raise UserError(
                f"optimizer.warmup_steps ({config.warmup_steps}) + optimizer.decay_steps "
                f"({config.decay_steps}) exceed the schedule's {length} steps (schedule_steps, "
                "or num_train_steps when it is 0, less optimizer.schedule_start_step)")
        inner = warmup_stable_decay_schedule(config.learning_rate, config.warmup_steps,
                                             config.decay_steps, length, config.decay_shape,
                                             config.final_learning_rate_ratio)
    if not start:
        return inner
    return lambda count: inner(jnp.maximum(jnp.asarray(count, jnp.float32) - start, 0.0))
