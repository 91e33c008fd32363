"""The roofline bound of `bert-jax aot`, calibrated on this CPU: no measured step beats it."""

from test_training_support import tiny_run_config

from bert_jax.compiler import calibration


def test_the_corrected_bound_does_not_exceed_the_measured_cpu_step():
    """The formula of `aot` (max of FLOPs / matmul peak and bytes / copy bandwidth) on a
    one-layer BERT's real step, with this process's measured peaks: with the corrected byte
    count (arguments read once, outputs written once) it stays under the measured step. XLA's
    count, every op's operands and results, is larger: the caches serve most of it."""
    result = calibration.calibrate(tiny_run_config(), batch_size=8, seq_len=16, predictions=4,
                                   steps=5, copy_bytes=32 * 2**20)
    assert result.bound_seconds("compulsory") <= result.step_seconds, \
        calibration.format_calibration("tiny", result)
    assert result.xla_bytes > result.compulsory_bytes > 0
    assert result.flops > 0 and result.peak_flops_per_second > 1e8
    assert "holds" in calibration.format_calibration("tiny", result).splitlines()[2]
