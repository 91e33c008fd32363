"""The masking rate of objective mlm over a run's steps: one rate, or a piecewise-constant schedule.

`data.masking_rate` is the rate from step 0; `data.masking_rate_schedule` lists later changes
as `STEP:RATE` pairs, each rate holding from its step on (mmBERT's 30% -> 15% -> 5%:
masking_rate 0.3, schedule '100000:0.15,200000:0.05'). A rate is the fraction of a row's real,
non-special tokens that are predicted (`dynamic_masking.mask_rows`).

The compiled step gathers a fixed number of positions per row, so the slots come from the
schedule's highest rate: `prediction_slots` = ceil(highest rate x seq_len), which every
row's count provably fits (see `dynamic_masking.mask_rows`). Imports no TensorFlow: the run
config checks schedules with it.
"""

import dataclasses
import math

from bert_jax.errors import UserError


@dataclasses.dataclass(frozen=True)
class MaskingSchedule:
    """Rates (K + 1,) and the steps (K,) at which each rate after the first begins."""
    rates: tuple[float, ...]
    boundaries: tuple[int, ...] = ()

    def rate_at(self, step: int) -> float:
        """The rate of the batch that trains step `step` (0-based: the step counter before
        the update)."""
        return self.rates[sum(step >= boundary for boundary in self.boundaries)]

    @property
    def highest(self) -> float:
        return max(self.rates)

    def prediction_slots(self, seq_len: int) -> int:
        """Masked-position slots per row: ceil(highest rate x seq_len), in float64 as
        `dynamic_masking.mask_rows` computes each row's count, so the bound is exact."""
        return max(1, math.ceil(self.highest * seq_len))


def _check_rate(rate: float, where: str) -> float:
    if not 0 < rate <= 1:
        raise UserError(f"{where}: a masking rate must be above 0 and at most 1, got {rate!r}")
    return float(rate)


def parse_schedule(masking_rate: float, schedule: str, source: str = "run config"
                   ) -> MaskingSchedule:
    """The schedule of `data.masking_rate` and `data.masking_rate_schedule` ('' = none):
    comma-separated STEP:RATE pairs, steps at least 1 and increasing; a malformed pair is
    an error naming the key and the pair."""
    rates = [_check_rate(masking_rate, f"{source}: data.masking_rate")]
    boundaries = []
    key = f"{source}: data.masking_rate_schedule"
    for pair in filter(None, (part.strip() for part in schedule.split(","))):
        step_text, colon, rate_text = pair.partition(":")
        try:
            step, rate = int(step_text), float(rate_text)
        except ValueError:
            step = rate = None
        if not colon or step is None:
            raise UserError(f"{key}: {pair!r} is not STEP:RATE (e.g. '100000:0.15,"
                            "200000:0.05': from step 100000 on 15%, from 200000 on 5%)")
        if step < 1 or (boundaries and step <= boundaries[-1]):
            raise UserError(f"{key}: step {step} in {pair!r} must be at least 1 and above "
                            "the pair before it (the rate from step 0 is data.masking_rate)")
        rates.append(_check_rate(rate, f"{key} {pair!r}"))
        boundaries.append(step)
    return MaskingSchedule(tuple(rates), tuple(boundaries))


def schedule_of(data, source: str = "run config") -> MaskingSchedule:
    """The schedule of a run config's data section."""
    return parse_schedule(data.masking_rate, data.masking_rate_schedule, source)
