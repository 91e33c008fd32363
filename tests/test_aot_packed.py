"""`bert-jax aot --recipe original` projects packed rows beside unpacked ones: the same
instances in steps / (instances per row) steps of each one's own compiled step."""


import pytest

from bert_jax.compiler import aot, aot_report
from bert_jax.errors import UserError
from bert_jax.commands.aot import _instances_per_row


def report(seq_len: int, step_seconds: float) -> aot.CompileReport:
    """A v5e-256 report whose step runs `step_seconds` at the roofline bound and at 50% MFU."""
    peak = 256 * 197e12  # v5e chips x bf16 peak (launch/tpu_types.py)
    return aot.CompileReport(
        topology="v5e:16x16", device_kind="TPU v5 lite", num_devices=256, devices_per_chip=1,
        mesh_shape={"data": 256, "fsdp": 1, "tensor": 1}, batch_size=256, seq_len=seq_len,
        max_predictions=20, argument_bytes=2**30, output_bytes=2**30, alias_bytes=2**30,
        temp_bytes=2**30, code_bytes=0, compiled_flops_per_device=197e12 * step_seconds,
        model_flops_per_step=peak * 0.5 * step_seconds, collectives={}, compile_seconds=1.0,
        bytes_accessed_per_device=0.0, collective_bytes={})


def test_packed_days_divide_each_phases_steps_by_its_instances_per_row():
    unpacked = [report(128, 0.1), report(512, 0.4)]
    packed = [report(128, 0.1), report(512, 0.4)]
    days = (900_000 * 0.1 + 100_000 * 0.4) / 86400
    # float64 arithmetic on both sides (tolerances.py).
    assert aot_report.recipe_days(unpacked, 0.5) == pytest.approx(days)
    assert aot_report.recipe_days(unpacked, None) == pytest.approx(days)
    packed_days = (900_000 * 0.1 / 1.1 + 100_000 * 0.4 / 2.0) / 86400
    assert aot_report.recipe_days(packed, 0.5, (1.1, 2.0)) == pytest.approx(packed_days)
    table = aot_report.format_packed_summary({"v5e-256": unpacked}, {"v5e-256": packed}, 0.5,
                                             (1.1, 2.0))
    assert f"{days / packed_days:.2f}x" in table.splitlines()[-1]
    assert "phase 1 1.100, phase 2 2.000" in table


def test_instances_per_row_are_read_and_checked():
    assert _instances_per_row(None) == aot_report.WAR_AND_PEACE_INSTANCES_PER_ROW
    assert _instances_per_row("1.2,1.9") == (1.2, 1.9)
    for text in ("2", "0.5,2", "a,b"):
        with pytest.raises(UserError, match="--instances-per-row"):
            _instances_per_row(text)
