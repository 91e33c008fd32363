"""Batch-size warm-up by gradient-accumulation counts (ModernBERT's 768 -> 4,608 sequences).

The micro-batch keeps one shape, batch_size / grad_accum_steps sequences; a step takes
`start` micro-batches at step 0 and one more each time a threshold passes, until it takes
all `grad_accum_steps` at `batch_warmup.steps` and after. The count is a function of the
step alone, evaluated from one table by the host (how many micro-batches to read) and by
the compiled step (how many to run, from `state.step`), so the two always agree, a resumed
run reads and runs what the uninterrupted one did, and one program serves every count: the
step's global batch always has grad_accum_steps micro-batch slots, those past the count
zero-filled by the host and skipped by the step's loop (bert_jax/training/train_step.py).
"""

import dataclasses

import numpy as np

from bert_jax.errors import UserError


@dataclasses.dataclass(frozen=True)
class BatchWarmup:
    micro_batch_size: int  # global sequences per micro-batch: batch_size / grad_accum_steps
    full: int  # micro-batches per step once warmed up: grad_accum_steps
    start: int  # micro-batches per step at step 0
    steps: int  # the first step at which the batch is full

    @property
    def thresholds(self) -> tuple[int, ...]:
        """The steps at which the i-th extra micro-batch joins: ceil(i * steps / (full -
        start)), i = 1 .. full - start. So the count at step s < steps is start +
        floor((full - start) * s / steps): the batch grows linearly in whole micro-batches."""
        added = self.full - self.start
        return tuple(-(-index * self.steps // added) for index in range(1, added + 1))

    def micro_batches(self, step, xp=np):
        """Micro-batches in the update at `step` (the number of updates before it); `xp` is
        numpy on the host (an int), jax.numpy inside the step (an int32 of a traced step)."""
        joined = xp.sum(xp.asarray(self.thresholds, xp.int32) <= step)
        return self.start + (int(joined) if xp is np else joined)

    def batch_size(self, step: int) -> int:
        """Sequences in the update at `step`."""
        return self.micro_batches(step) * self.micro_batch_size


def from_run_config(run_config) -> BatchWarmup | None:
    """The run config's `batch_warmup` section, checked against batch_size and
    grad_accum_steps; None without a warm-up (steps 0)."""
    section = run_config.get("batch_warmup")
    if section is None or section.steps == 0:
        return None
    batch_size, full = run_config.batch_size, run_config.grad_accum_steps
    if full == 1:
        raise UserError("batch_warmup.steps is set but grad_accum_steps is 1: the batch grows "
                        "one micro-batch (batch_size / grad_accum_steps sequences) at a time, so "
                        "set grad_accum_steps to the micro-batches of the full batch")
    if batch_size % full:
        raise UserError(f"batch_size {batch_size} must be a multiple of grad_accum_steps {full}")
    micro = batch_size // full
    start_size = section.start_batch_size or micro
    if start_size % micro or start_size > batch_size:
        raise UserError(f"batch_warmup.start_batch_size {start_size} must be a multiple of the "
                        f"micro-batch (batch_size / grad_accum_steps = {micro}) and at most "
                        f"batch_size {batch_size}")
    return BatchWarmup(micro_batch_size=micro, full=full, start=start_size // micro,
                       steps=section.steps)


def step_batch(micro_batches: list[dict], full: int) -> dict:
    """One process's rows of a warm-up step from its rows of each micro-batch read (each
    (m, ...)): micro-batch j at rows j, j + full, j + 2 full, ... of a (full * m, ...) batch,
    where the step's split (`train_step._split_micro_batches`) takes micro-batch j from, and
    zeros in the slots of the micro-batches the step does not take."""
    batch = {}
    for name, first in micro_batches[0].items():
        rows = np.zeros((full * first.shape[0], *first.shape[1:]), first.dtype)
        for index, micro_batch in enumerate(micro_batches):
            rows[index::full] = micro_batch[name]
        batch[name] = rows
    return batch
