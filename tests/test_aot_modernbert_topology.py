"""`bert-jax aot --recipe modernbert --topology T`: the recipe's phases compiled on T itself
(no stand-in), at the largest micro-batch that fits, and projected at T's own bound. The
projection's arithmetic is checked by hand on a report whose terms are round numbers, the
search on compiles stood in for by reports whose memory follows the tokens held at once (as
tests/test_aot_fit.py does), and one tiny ModernBERT is compiled end to end."""

import argparse

import pytest
from aot_helpers import compile_reports

from bert_jax.commands import aot_recipe_modernbert, aot_search
from bert_jax.compiler import aot, aot_modernbert
from bert_jax.errors import UserError
from bert_jax.run_config import load_run_config

GIB = 2**30
# v5e's datasheet (launch/tpu_types.py): 197 bf16 TFLOP/s, 819 GB/s of HBM, 200 GB/s of ICI.
V5E_FLOPS, V5E_HBM, V5E_ICI = 197e12, 819e9, 200e9

# ModernBERT-tiny cut to one layer (hidden 128; its compile at 8,192 tokens is the test's
# time) in the recipe's phases: its steps are the recipe's.
TINY_RECIPE = """
from bert_jax.run_config.modernbert_recipe import modernbert_config


def get_config(phase="1"):
    config = modernbert_config("tiny", phase, learning_rate=8e-4)
    config.model.vocab_size = 256
    config.model.num_layers = 1
    return config
"""


def _report(batch_size: int, micro_batches: int, seq_len: int, peak: int = GIB,
            devices: int = 8, topology: str = "v5e:2x4") -> aot.CompileReport:
    """A v5e report on `devices` chips whose terms are round: compute 0.5 s, memory 0.3 s,
    ICI 0.2 s a step, 1.0 s a step at 50% MFU."""
    return aot.CompileReport(
        topology=topology, device_kind="TPU v5 lite", num_devices=devices,
        devices_per_chip=1, mesh_shape={"data": 1, "fsdp": devices, "tensor": 1},
        batch_size=batch_size, seq_len=seq_len, max_predictions=0, argument_bytes=peak,
        output_bytes=0, alias_bytes=0, temp_bytes=0, code_bytes=0,
        compiled_flops_per_device=0.5 * V5E_FLOPS,
        model_flops_per_step=devices * V5E_FLOPS * 0.5 * 1.0, collectives={},
        compile_seconds=1.0, bytes_accessed_per_device=0.3 * V5E_HBM,
        collective_bytes={"all-gather": 0.2 * V5E_ICI}, micro_batches=micro_batches)


def test_the_projection_on_a_slice_is_its_steps_at_its_own_bound():
    reports = {"v5e:2x4": [_report(4608, 576, 1024), _report(576, 72, 8192)]}
    # Compiled on the slice: its own terms; the pods' stand-in scaling would widen the ICI
    # term by (63/64) / (7/8) on 64 chips.
    assert aot_modernbert.slice_terms(reports["v5e:2x4"][0], 8) == pytest.approx(
        {"compute": 0.5, "memory": 0.3, "interconnect": 0.2})
    assert aot_modernbert.slice_terms(reports["v5e:2x4"][0], 64)["interconnect"] == (
        pytest.approx(0.2 * (63 / 64) / (7 / 8)))
    rows = aot_modernbert.summary_rows(reports, 0.5, {"v5e:2x4": 8})
    # steps = tokens / (rows x seq_len); seconds = steps x the 0.5 s bound (x 1.0 s at MFU)
    steps = [1.7e12 / (4608 * 1024), 250e9 / (576 * 8192), 50e9 / (576 * 8192)]
    assert [row["seconds"]["bound"] for row in rows[:3]] == pytest.approx(
        [step * 0.5 for step in steps])
    assert [row["seconds"]["mfu"] for row in rows[:3]] == pytest.approx(steps)
    assert rows[3]["seconds"]["bound"] == pytest.approx(sum(steps) * 0.5)
    text = aot_modernbert.format_summary("tiny", reports, 0.5, {"v5e:2x4": 8}).splitlines()
    # 360,277 steps x 0.5 s = 2.08 days, x 8 chips = 400 chip-hours; 4.17 days, 801 at MFU.
    assert text[0] == ("ModernBERT-tiny, 2.0T tokens: fits v5e:2x4, no sooner than 2.45 days "
                       "(471 chip-hours), 4.91 days at 50% MFU; the paper: 8.0 days on 8 H100s")
    assert text[1].startswith("ModernBERT-tiny, the paper's recipe on v5e:2x4 (8 chips, "
                              "compiled on it)")
    assert text[2].startswith("  slice    phase   tokens     rows a chip")
    assert text[3] == ("  v5e:2x4  1       1,700B 1 x 576 of 1024     1.00 G  yes"
                       "                     500 (500/300/200)   2.08      400     4.17      801")
    assert text[4].endswith("0.31       59     0.61      118")  # phase 2: 52,982 steps
    assert text[6].endswith("2.45      471     4.91      942")  # the total


def test_the_pods_table_keeps_its_heading():
    reports = dict.fromkeys(("v5e-64", "v5p-128"), [_report(576, 6, 1024), _report(72, 9, 8192)])
    text = aot_modernbert.format_summary("base", reports, 0.5).splitlines()
    assert text[1].startswith("ModernBERT-base, the paper's recipe on 64-chip pods (each "
                              "compiled as an 8-chip stand-in at the pod's rows a chip)")
    assert text[2].startswith("  pod      phase   tokens")
    assert "fastest v5e-64: no sooner than" in text[0]


def test_a_slice_whose_chips_do_not_split_the_step_is_refused():
    assert aot_modernbert.DIVIDING_CHIPS == (1, 2, 3, 4, 6, 8, 9, 12, 16, 18, 24, 32, 36, 48,
                                             64, 72, 96, 144, 192, 288, 576)
    aot_modernbert.check_slice("v5e:8x8", 64, 64)
    aot_modernbert.check_slice("v4:2x2x2", 8, 16)  # 2 devices a chip: 288 and 36 rows each
    with pytest.raises(UserError) as refused:
        aot_modernbert.check_slice("v5e:8x16", 128, 128)
    assert str(refused.value) == (
        "--topology v5e:8x16: 128 chips do not split the recipe's steps of 4,608 and 576 rows "
        "into whole rows a chip; chip counts that do: 1, 2, 3, 4, 6, 8, 9, 12, 16, 18, 24, 32, "
        "36, 48, 64, 72, 96, 144, 192, 288, 576")


def _fake_compiles(monkeypatch, fixed_bytes, bytes_per_kilotoken):
    """aot's compile stood in for: the run config is loaded as the real compile loads it, and
    the report's peak is `fixed_bytes(devices)` plus the tokens one device holds at once."""
    compiled = []

    def compile_stand_in(config, overrides, topology, chip_config, devices, memory_check):
        run_config = load_run_config(config, overrides)
        batch, micro = run_config.batch_size, run_config.grad_accum_steps
        at_once = batch // len(devices) // micro * run_config.data.seq_len // 1024
        compiled.append((topology, batch // len(devices) // micro, run_config.data.seq_len))
        return run_config, _report(batch, micro, run_config.data.seq_len,
                                   fixed_bytes(len(devices)) + at_once * bytes_per_kilotoken,
                                   len(devices), topology)

    chips = {"v5e:2x4": 8, "v5e:4x4": 16, "v5e:4x8": 32, "v5e:8x8": 64}
    monkeypatch.setattr(aot_search, "compile_step", compile_stand_in)
    monkeypatch.setattr(aot_search, "format_report", lambda report, mfu, steps: "(report)")
    monkeypatch.setattr(aot, "topology_devices", lambda topology, chip: [None] * chips[topology])
    monkeypatch.setattr(aot, "devices_per_chip", lambda device: 1)
    return compiled


def _arguments(config_path, rows_per_chip=None):
    return argparse.Namespace(config=str(config_path), overrides=[], topology="v5e:2x4",
                              chip_config=None, mfu=0.5, steps=None, json=None, memory_check=True,
                              rows_per_chip=rows_per_chip, recipe="modernbert")


def test_the_largest_micro_batch_is_searched_from_the_stand_ins_rows(tmp_path, monkeypatch,
                                                                      capsys):
    # Named as the base recipe, so the search starts at its v5e stand-in's 6 and 1 rows a
    # chip. 4.5 GiB fixed and 1 GiB per 1,024 tokens at once: 16 GiB holds 9 rows of 1,024
    # (576 rows a chip a step: 6, 8 and 9 fit, 12 does not) and 1 row of 8,192 (2 do not).
    config = tmp_path / "modernbert_base.py"
    config.write_text(TINY_RECIPE)
    compiled = _fake_compiles(monkeypatch, lambda devices: 9 * GIB // 2, GIB)
    assert aot_recipe_modernbert.run_recipe(_arguments(config)) == 0
    assert compiled == [("v5e:2x4", rows, 1024) for rows in (6, 8, 12, 9)] + [
        ("v5e:2x4", rows, 8192) for rows in (1, 2)]
    out = capsys.readouterr().out
    assert ("v5e:2x4, phase 1: the largest micro-batch that fits is 9 rows a device (64 "
            "micro-batches a step") in out
    assert "  v5e:2x4  1       1,700B  9 x 64 of 1024" in out
    assert "  v5e:2x4  2         250B  1 x 72 of 8192" in out
    assert out.rstrip().endswith("(--rows-per-chip 9,1 compiles just these)")
    # Given rows a chip that fit, one compile a phase.
    compiled.clear()
    assert aot_recipe_modernbert.run_recipe(_arguments(config, "4,1")) == 0
    assert compiled == [("v5e:2x4", 4, 1024), ("v5e:2x4", 1, 8192)]


def test_nothing_fitting_at_one_row_names_the_smallest_slice_and_fails(tmp_path, monkeypatch,
                                                                       capsys):
    # 160 GiB of state sharded over the chips: 20 GiB a chip on 8, 10 GiB on 16.
    config = tmp_path / "tiny_recipe.py"
    config.write_text(TINY_RECIPE)
    compiled = _fake_compiles(monkeypatch, lambda devices: 160 * GIB // devices, GIB)
    assert aot_recipe_modernbert.run_recipe(_arguments(config)) == 2
    # No stand-in's rows to start from: one row a device first, then the larger slices.
    assert compiled == [("v5e:2x4", 1, 1024), ("v5e:4x4", 1, 1024)]
    assert capsys.readouterr().err.strip() == (
        f"bert-jax aot: {config}:1 does NOT fit v5e:2x4 at any micro-batch, one row a device "
        "included; the smallest slice that fits it at one row a device, fully sharded: v5e:4x4")


def test_a_config_off_the_recipes_step_is_refused(tmp_path, monkeypatch):
    config = tmp_path / "tiny_recipe.py"
    config.write_text(TINY_RECIPE)
    _fake_compiles(monkeypatch, lambda devices: GIB, GIB)
    arguments = _arguments(config)
    arguments.overrides = ["--config.data.seq_len=512"]
    with pytest.raises(UserError, match=r"steps 4608 rows of 512; the recipe's phase 1 steps "
                                        r"4608 rows of 1024"):
        aot_recipe_modernbert.run_recipe(arguments)


def test_the_recipe_compiles_on_the_topology_itself(tmp_path):
    written, stdout = compile_reports(tmp_path, TINY_RECIPE, "--recipe", "modernbert",
                                      "--topology", "v5e:2x2", "--rows-per-chip", "1,1")
    assert (written["slice"], written["chips"]) == ("v5e:2x2", 4)
    first, second = written["reports"]
    # the recipe's whole steps on the slice's 4 chips, one row a chip a micro-batch
    assert (first["batch_size"], first["seq_len"], first["micro_batches"]) == (4608, 1024, 1152)
    assert (second["batch_size"], second["seq_len"], second["micro_batches"]) == (576, 8192, 144)
    days = 1.7e12 / (4608 * 1024) * first["roofline_seconds"] / 86400
    line = next(line for line in stdout.splitlines() if line.startswith("  v5e:2x2  1 "))
    assert line.split()[-4] == f"{days:.2f}"
    assert "1 x 1152 of 1024" in line
