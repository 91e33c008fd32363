"""`aot` where the config's step does not fit: the largest micro-batch that does, else the
smallest slice, found by compiling (bert_jax/compiler/aot_fit.py). The compiles are stood in
for by reports whose memory follows the rows held at once, so the search's logic, its number
of compiles and its answer lines are checked in milliseconds; the real compiles behind it are
the ones test_aot.py checks."""

import argparse

import pytest

from bert_jax.commands import aot_search
from bert_jax.compiler import aot, aot_fit

GIB = 2**30


def test_micro_batch_counts_split_the_rows_into_whole_rows():
    assert aot_fit.micro_batch_counts(12) == [1, 2, 3, 4, 6, 12]
    assert aot_fit.micro_batch_counts(1) == [1]


@pytest.mark.parametrize("fewest", [1, 2, 6, 12, 96, 192, None])
def test_bisection_finds_the_fewest_that_fit_in_logarithmic_compiles(fewest):
    counts = aot_fit.micro_batch_counts(192)  # 14 counts
    calls = []

    def fits(count):
        calls.append(count)
        return fewest is not None and count >= fewest

    assert aot_fit.fewest_fitting(counts, fits) == fewest
    assert len(calls) <= 1 + 4  # the largest count first, then ceil(log2(14)) halvings


def test_larger_slices_double_the_smallest_side_up_to_64_chips():
    assert aot_fit.larger_slices("v5e:2x2") == ["v5e:2x4", "v5e:4x4", "v5e:4x8", "v5e:8x8"]
    assert aot_fit.larger_slices("v4:2x2x1") == ["v4:2x2x2", "v4:2x2x4", "v4:2x4x4",
                                                  "v4:4x4x4"]
    assert aot_fit.larger_slices("v5e:8x8") == []


def _report(topology, devices, batch_size, micro_batches, mesh, bytes_per_row, fixed):
    """A v5e report whose peak is `fixed` (weights, optimizer state) plus the rows one device
    holds at once times `bytes_per_row`."""
    rows_at_once = batch_size // (mesh["data"] * mesh["fsdp"]) // micro_batches
    return aot.CompileReport(
        topology=topology, device_kind="TPU v5 lite", num_devices=devices, devices_per_chip=1,
        mesh_shape=mesh, batch_size=batch_size, seq_len=128, max_predictions=20,
        argument_bytes=fixed, output_bytes=0, alias_bytes=0,
        temp_bytes=rows_at_once * bytes_per_row, code_bytes=0, compiled_flops_per_device=1.0,
        model_flops_per_step=1.0, collectives={}, compile_seconds=1.0,
        micro_batches=micro_batches)


def _fake_compiles(monkeypatch, fixed_by_devices, bytes_per_row):
    """aot's compile stood in for: reads the overrides as the real run config would."""
    compiled = []

    def compile_stand_in(config, overrides, topology, chip_config, devices, memory_check):
        values = dict(override[len("--config."):].split("=") for override in overrides)
        num_devices = len(devices)
        fsdp = num_devices if values.get("mesh.fsdp") == "-1" else 1
        mesh = {"data": num_devices // fsdp, "fsdp": fsdp, "tensor": 1}
        report = _report(topology, num_devices, int(values.get("batch_size", 768)),
                         int(values.get("grad_accum_steps", 1)), mesh, bytes_per_row,
                         fixed_by_devices(num_devices))
        compiled.append((topology, overrides))
        return None, report

    chips = {"v5e:2x2": 4, "v5e:2x4": 8, "v5e:4x4": 16, "v5e:4x8": 32, "v5e:8x8": 64}
    monkeypatch.setattr(aot_search, "compile_step", compile_stand_in)
    monkeypatch.setattr(aot, "topology_devices", lambda topology, chip: [None] * chips[topology])
    monkeypatch.setattr(aot_search, "format_report", lambda report, mfu, steps: "(report)")
    return compiled


def _arguments():
    return argparse.Namespace(config="configs/c.py", overrides=[], topology="v5e:2x2",
                              chip_config=None, mfu=0.5, steps=None, json=None,
                              memory_check=True)


def test_a_step_too_big_is_answered_with_the_largest_micro_batch_that_fits(monkeypatch, capsys):
    # 192 rows a device a step; 1 GiB a row: 16 GiB of HBM holds the 8 GiB fixed and 8 rows.
    compiled = _fake_compiles(monkeypatch, lambda devices: 8 * GIB, GIB)
    first = _report("v5e:2x2", 4, 768, 1, {"data": 4, "fsdp": 1, "tensor": 1}, GIB, 8 * GIB)
    reports, status = aot_search.search_fit(_arguments(), first, [None] * 4, 100)
    answer = capsys.readouterr().out.splitlines()[-1]
    assert status == 0
    assert answer.startswith("v5e:2x2: the config's 1 micro-batches of 192 rows a device do "
                             "NOT fit; the largest that does is 24 micro-batches of 8 rows")
    assert answer.endswith("--config.grad_accum_steps=24")
    assert len(compiled) <= 5 and len(reports) == len(compiled)


def test_nothing_fits_at_one_row_names_the_smallest_slice_and_fails(monkeypatch, capsys):
    # 256 GiB of weights and optimizer state sharded over the devices, and 1 GiB for the one
    # row: 16 GiB of HBM holds it from 32 chips on (8 GiB + 1 GiB), not at 16 (16 + 1 GiB).
    compiled = _fake_compiles(monkeypatch, lambda devices: 256 * GIB // devices, GIB)
    first = _report("v5e:2x2", 4, 768, 1, {"data": 4, "fsdp": 1, "tensor": 1}, GIB, 64 * GIB)
    _, status = aot_search.search_fit(_arguments(), first, [None] * 4, 100)
    error = capsys.readouterr().err
    assert status == 2
    assert error.strip() == (
        "bert-jax aot: configs/c.py does NOT fit v5e:2x2 at any micro-batch, one row a device "
        "included; the smallest slice that fits it at one row a device, fully sharded: v5e:4x8")
    # One compile on v5e:2x2 (one row a device: no micro-batch fits), then each slice in turn.
    assert [topology for topology, _ in compiled] == ["v5e:2x2", "v5e:2x4", "v5e:4x4",
                                                      "v5e:4x8"]


@pytest.mark.parametrize("fewest", [None, *aot_fit.micro_batch_counts(576)])
def test_a_search_from_a_guess_finds_the_same_count_and_two_compiles_a_right_guess(fewest):
    counts = aot_fit.micro_batch_counts(576)  # 21 counts: phase 1's rows a chip on 8 chips
    for first in range(len(counts)):
        calls = []

        def fits(count):
            calls.append(count)
            return fewest is not None and count >= fewest

        assert aot_fit.fewest_fitting(counts, fits, first) == fewest
        assert len(calls) == len(set(calls))  # no count compiled twice
        if fewest is not None and counts[first] == fewest and first > 0:
            assert calls == [fewest, counts[first - 1]]  # it fits, the next larger does not
