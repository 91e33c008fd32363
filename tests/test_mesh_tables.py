"""bench/mesh_tables.py: an 8-chip stand-in's roofline terms carried to the pod
(bert_jax/compiler/aot_pod.py), and the table naming the fastest layout that fits."""

import json

import pytest

from bench import mesh_tables
from bert_jax.compiler import aot, aot_pod, aot_report
from launch.tpu_types import generation_for_device_kind

V4 = generation_for_device_kind("TPU v4")
PEAK, HBM, ICI = (V4.peak_bf16_flops_per_chip, V4.hbm_bytes_per_second_per_chip,
                  V4.interconnect_bytes_per_second_per_chip)


def _report(mesh: dict, sent: dict, compute=1e-3, memory=2e-3, interconnect=4e-3, fits=True,
            update_bytes=0.0) -> aot.CompileReport:
    """An 8-chip v4 stand-in's report with these roofline terms, in seconds, read back from
    its `aot --json` as bench/mesh_tables.py reads it."""
    scale = interconnect * ICI / sum(sent.values())
    report = aot.CompileReport(
        topology="v4:2x2x2 (megacore)", device_kind="TPU v4", num_devices=8,
        devices_per_chip=1, mesh_shape=mesh, batch_size=64, seq_len=128, max_predictions=20,
        argument_bytes=1, output_bytes=1, alias_bytes=1,
        temp_bytes=2**30 if fits else 64 * 2**30, code_bytes=0,
        compiled_flops_per_device=compute * PEAK, model_flops_per_step=0.0, collectives={},
        compile_seconds=1.0, bytes_accessed_per_device=4 * 2**30,
        collective_bytes={kind: sent_bytes * scale for kind, sent_bytes in sent.items()},
        hbm_traffic_per_device=memory * HBM,
        bytes_by_purpose={"MLP": {"forward": 2**31, "backward": 2**31, "step": 0, "hbm": 0},
                          "optimizer update": {"forward": 0, "backward": 0, "step": 0,
                                               "hbm": update_bytes}})
    written = json.dumps(aot_report.report_to_json(report, 0.5))
    return aot_report.report_from_json(json.loads(written))


@pytest.mark.parametrize("layout, mesh, pod_chips, scale", [
    # every collective over all devices: (n - 1) / n from 8 chips to 32 or 256
    ("data", {"data": 8, "fsdp": 1, "tensor": 1}, 32, (31 / 32) / (7 / 8)),
    ("fsdp", {"data": 1, "fsdp": 8, "tensor": 1}, 256, (255 / 256) / (7 / 8)),
])
def test_collectives_over_every_device_grow_by_n_minus_one_over_n(layout, mesh, pod_chips, scale):
    report = _report(mesh, {"all-reduce": 100.0, "all-gather": 300.0})
    terms = aot_pod.pod_terms(report, pod_chips)
    # float64 products and quotients on both sides (tolerances.py): approx's default.
    assert terms["interconnect"] == pytest.approx(4e-3 * scale)
    assert terms["compute"] == pytest.approx(1e-3)
    assert terms["memory"] == pytest.approx(2e-3)


def test_mixed_widens_only_its_data_axis():
    """data=2 fsdp=4 at 8 chips is data=8 fsdp=4 on v4-64: its all-reduces go from a group
    of 2 to one of 8, its gathers stay within the 4-chip host."""
    report = _report({"data": 2, "fsdp": 4, "tensor": 1},
                     {"all-reduce": 100.0, "all-gather": 300.0})
    terms = aot_pod.pod_terms(report, 32)
    expected = (100.0 * (7 / 8) / (1 / 2) + 300.0) / 400.0
    assert terms["interconnect"] == pytest.approx(4e-3 * expected)  # float64 arithmetic


@pytest.mark.parametrize("layout, mesh, share", [
    ("fsdp", {"data": 1, "fsdp": 8, "tensor": 1}, 8 / 32),  # 1/8 of the parameters -> 1/32
    ("data", {"data": 8, "fsdp": 1, "tensor": 1}, 1.0),  # every chip updates all of them
    ("mixed", {"data": 2, "fsdp": 4, "tensor": 1}, 1.0),  # 1/4 at 8 chips and on the pod
])
def test_only_fsdp_updates_a_smaller_share_of_the_parameters_on_the_pod(layout, mesh, share):
    update = 0.5e-3 * HBM  # half a millisecond of the 2 ms memory term is the update
    report = _report(mesh, {"all-reduce": 1.0}, update_bytes=update)
    terms = aot_pod.pod_terms(report, 32)
    assert terms["memory"] == pytest.approx(2e-3 - 0.5e-3 * (1 - share))  # float64


def test_the_table_marks_the_fastest_layout_that_fits(tmp_path):
    reports = {
        "data": _report({"data": 8, "fsdp": 1, "tensor": 1}, {"all-reduce": 1.0}, memory=9e-3),
        "fsdp": _report({"data": 1, "fsdp": 8, "tensor": 1}, {"all-gather": 1.0}, memory=3e-3,
                        interconnect=1e-3),
        "mixed": _report({"data": 2, "fsdp": 4, "tensor": 1}, {"all-reduce": 1.0}, memory=1e-3,
                         interconnect=1e-3, fits=False),
    }
    for layout, report in reports.items():
        path = tmp_path / (mesh_tables.name_of("large", 1, "v4-64", layout) + ".json")
        path.write_text(json.dumps({"reports": [aot_report.report_to_json(report, 0.5)]}))
    rows = mesh_tables.table(str(tmp_path), "large", 1)
    v4 = [row for row in rows[2:] if "v4-64" in row or row.startswith("|  |")][:3]
    assert "**fsdp**" in v4[1] and "**" not in v4[0] and "**" not in v4[2]
    assert "| **3.00** |" in v4[1]  # FSDP's bound on the pod: its memory term
    assert "does not fit" in v4[2]
    assert "(100%)" in v4[0]  # the share of XLA's bytes the purpose table names
    assert any("v5e-256" in row and "not compiled" in row for row in rows)
