"""The roofline bound checked where it can be: on this machine's CPU, against a measured step.

`bert-jax aot` bounds a TPU step by max(FLOPs / peak FLOP/s, bytes / memory bandwidth,
collective bytes / interconnect bandwidth). A bound is only a bound if no step beats it:
here the same formula is applied to the real train step compiled for one CPU device, with
this machine's matmul peak and copy bandwidth measured in this process (medians of several
runs, so a shared machine's load lowers the peaks rather than the step alone), and set
against the step's measured time.

    result = calibrate(base_config("mini"), batch_size=8, seq_len=64, predictions=10)
    result.bound_seconds("xla") <= result.step_seconds  # XLA's bytes
"""

import dataclasses
import statistics
import time

import numpy as np

MATMUL_SIZE = 1024  # square float32 matmuls: past the caches, as the step's largest
COPY_BYTES = 256 * 2**20  # one float32 array this large, read and written: DRAM, not cache


def _median_seconds(function, repeats: int) -> float:
    function()  # compile and warm up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def matmul_peak(repeats: int = 5, size: int = MATMUL_SIZE) -> float:
    """FLOP/s of a jitted float32 (size x size) matmul, the median of `repeats` runs."""
    import jax
    import jax.numpy as jnp

    left = jnp.asarray(np.random.default_rng(0).standard_normal((size, size), np.float32))
    multiply = jax.jit(lambda a: a @ a)
    return 2 * size**3 / _median_seconds(lambda: multiply(left).block_until_ready(), repeats)


def copy_bandwidth(repeats: int = 5, num_bytes: int = COPY_BYTES) -> float:
    """Bytes/s of a jitted elementwise pass over `num_bytes` of float32 (read once, written
    once: 2 x num_bytes moved), the median of `repeats` runs."""
    import jax
    import jax.numpy as jnp

    source = jnp.ones((num_bytes // 4,), jnp.float32)
    scale = jax.jit(lambda x: x * 1.0001)
    return 2 * num_bytes / _median_seconds(lambda: scale(source).block_until_ready(), repeats)


@dataclasses.dataclass(frozen=True)
class Calibration:
    """One CPU step: its cost analysis, this machine's peaks and its measured time."""
    flops: float  # XLA's cost analysis of the compiled step
    xla_bytes: float  # XLA's `bytes accessed`: every op's operands and result, summed
    compulsory_bytes: float  # the step's arguments read once and its outputs written once
    peak_flops_per_second: float
    bytes_per_second: float
    step_seconds: float  # the measured step, median
    load: str  # the machine's load average when measured

    def terms(self, count: str) -> dict[str, float]:
        """The roofline terms, with XLA's bytes ("xla") or the compulsory ones."""
        num_bytes = self.xla_bytes if count == "xla" else self.compulsory_bytes
        return {"compute": self.flops / self.peak_flops_per_second,
                "memory": num_bytes / self.bytes_per_second}

    def bound_seconds(self, count: str) -> float:
        return max(self.terms(count).values())


def _load() -> str:
    import os

    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def calibrate(run_config, batch_size: int, seq_len: int, predictions: int,
              steps: int = 5, copy_bytes: int = COPY_BYTES) -> Calibration:
    """Compiles the run config's train step for one CPU device at (batch_size, seq_len),
    reads its cost analysis, measures the peaks and the step (median of `steps`)."""
    import jax

    from bert_jax import sharding
    from bert_jax.tasks.pretraining import task_from_run_config
    from bert_jax.training import train_step

    run_config.batch_size = batch_size
    run_config.data.seq_len, run_config.data.max_predictions = seq_len, predictions
    mesh = sharding.make_mesh(devices=jax.devices("cpu")[:1])
    bundle = train_step.build_train_step(run_config, mesh, task_from_run_config(run_config))
    compiled = bundle.train_step.lower(
        bundle.abstract_state, bundle.abstract_batch, bundle.abstract_rng).compile()
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    memory = compiled.memory_analysis()
    state = bundle.init_state(jax.random.PRNGKey(0))
    batch = jax.device_put(_batch(run_config, batch_size, seq_len, predictions),
                           bundle.batch_shardings)
    rng = jax.random.PRNGKey(1)

    def step():
        nonlocal state
        state, metrics = compiled(state, batch, rng)
        jax.block_until_ready(metrics)

    step_seconds = _median_seconds(step, steps)
    return Calibration(
        flops=float(cost.get("flops", 0.0)), xla_bytes=float(cost.get("bytes accessed", 0.0)),
        compulsory_bytes=float(memory.argument_size_in_bytes + memory.output_size_in_bytes),
        peak_flops_per_second=matmul_peak(), bytes_per_second=copy_bandwidth(num_bytes=copy_bytes),
        step_seconds=step_seconds, load=_load())


def _batch(run_config, batch_size: int, seq_len: int, predictions: int) -> dict:
    """Random ids at full length (token values do not change a step's work)."""
    rng = np.random.default_rng(0)
    vocab = run_config.model.vocab_size
    positions = np.sort(np.stack([rng.choice(np.arange(1, seq_len), predictions, replace=False)
                                  for _ in range(batch_size)]), axis=1)
    return dict(
        input_ids=rng.integers(0, vocab, (batch_size, seq_len)).astype(np.int32),
        input_mask=np.ones((batch_size, seq_len), np.int32),
        segment_ids=(np.arange(seq_len)[None] >= seq_len // 2).repeat(batch_size, 0)
        .astype(np.int32),
        masked_lm_positions=positions.astype(np.int32),
        masked_lm_ids=rng.integers(0, vocab, (batch_size, predictions)).astype(np.int32),
        masked_lm_weights=np.ones((batch_size, predictions), np.float32),
        next_sentence_labels=rng.integers(0, 2, (batch_size,)).astype(np.int32))


def format_calibration(name: str, result: Calibration) -> str:
    """Two lines: the bound with XLA's bytes and with the corrected count, against the step."""
    def line(count: str, label: str) -> str:
        terms, bound = result.terms(count), result.bound_seconds(count)
        verdict = "holds" if bound <= result.step_seconds else "EXCEEDS the measured step"
        return (f"  bound with {label}: {bound * 1e3:.1f} ms (compute {terms['compute'] * 1e3:.1f}"
                f", memory {terms['memory'] * 1e3:.1f} ms): {verdict}")
    return "\n".join([
        f"{name}: measured step {result.step_seconds * 1e3:.1f} ms (median); matmul peak "
        f"{result.peak_flops_per_second / 1e9:.1f} GFLOP/s, copy {result.bytes_per_second / 1e9:.2f}"
        f" GB/s (medians, this process); FLOPs {result.flops:.3e}; load {result.load}",
        line("xla", f"XLA's bytes ({result.xla_bytes / 2**20:.0f} MiB)"),
        line("compulsory", f"the corrected count, arguments read and outputs written once "
                           f"({result.compulsory_bytes / 2**20:.0f} MiB)")])
