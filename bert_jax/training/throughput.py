"""How fast a run trains between two log points: tokens/s, steps/s, MFU, instances/s, real tokens/s."""

import time

import jax


class Throughput:
    """Tokens/s and MFU between two log points, from wall time on the host; instances/s and
    real (not padding) tokens/s from the steps' counts where the task counts them (packed
    rows hold several instances, and a row's padding is no work done)."""
    COUNTED = {"num_sequences": "instances_per_second",
               "num_real_tokens": "real_tokens_per_second"}

    def __init__(self, seq_len: int, flops_per_sequence: float, peak_flops_total: float):
        """`flops_per_sequence`: the task's model FLOPs of one step per sequence;
        `peak_flops_total`: every device's peak together (0: no MFU)."""
        self.seq_len = seq_len
        self.peak = peak_flops_total
        self.flops_per_sequence = flops_per_sequence
        self.reset(0)

    def reset(self, step: int) -> None:
        self.step, self.time = step, time.perf_counter()
        self.totals, self.sequences = {}, 0

    def hold(self, seconds: float) -> None:
        """Leaves `seconds` just spent on something else (a compile) out of the rates."""
        self.time += seconds

    def count(self, metrics: dict, sequences: int) -> None:
        """Adds a step's counts and its `sequences` (a batch-size warm-up changes them); the
        counts stay on the device, so this does not wait for the step."""
        self.sequences += sequences
        for name in self.COUNTED:
            if name in metrics:
                self.totals[name] = metrics[name] + self.totals.get(name, 0.0)

    def measure(self, step: int) -> dict:
        elapsed = max(time.perf_counter() - self.time, 1e-9)
        steps = step - self.step
        values = {"tokens_per_second": self.sequences * self.seq_len / elapsed,
                  "steps_per_second": steps / elapsed}
        for name, total in jax.device_get(self.totals).items():
            values[self.COUNTED[name]] = float(total) / elapsed
        if self.peak:
            values["mfu"] = self.sequences * self.flops_per_sequence / elapsed / self.peak
        self.reset(step)
        return values
