"""`bert-jax aot --recipe modernbert`: ModernBERT's recipe compiled on the pods' stand-ins, or
on --topology itself, and projected in days (bert_jax/compiler/aot_modernbert.py)."""

import argparse
import os

from bert_jax.commands import aot_search


def run_recipe(args: argparse.Namespace) -> int:
    """Compiles phases 1 and 2 of a ModernBERT recipe config on each pod's stand-in (or on
    --topology itself), prints every report, then the days and chip-hours of all three
    phases."""
    from bert_jax.compiler import aot, aot_modernbert as projection
    from bert_jax.errors import UserError

    path = args.config.split(":")[0]
    size = next((size for size in ("base", "large") if f"modernbert_{size}" in path), None)
    if args.topology:
        return _modernbert_on_topology(args, path, size)
    if size is None:
        raise UserError("--recipe modernbert without --topology takes configs/modernbert_base.py "
                        "or configs/modernbert_large.py (it compiles stand-ins of "
                        + ", ".join(name for name, _, _ in projection.TARGETS) + ")")
    reports, all_reports = {}, []
    for name, topology, chip_config in projection.TARGETS:
        rows = _rows_per_chip(args.rows_per_chip, projection.POD_CHIPS)
        rows = rows or projection.DEFAULT_ROWS[size, name]
        devices = aot.topology_devices(topology, chip_config)
        reports[name] = []
        for phase, phase_rows in zip(projection.COMPILED_PHASES, rows):
            print(f"== {name} ({topology} stands in), phase {phase.name}: {phase_rows} rows a "
                  f"chip a micro-batch", flush=True)
            overrides = [*args.overrides, *projection.phase_overrides(phase, phase_rows)]
            _, report = aot_search.compile_step(f"{path}:{phase.name}", overrides, topology,
                                                chip_config, devices,
                                                memory_check=args.memory_check)
            print(aot_search.format_report(report, args.mfu, round(phase.steps)), flush=True)
            reports[name].append(report)
            all_reports.append(report)
    print(projection.format_summary(size, reports, args.mfu))
    if args.json:
        aot_search.write_json(args.json, all_reports, args.mfu, {"pods": list(reports)})
    return 0


def _modernbert_on_topology(args: argparse.Namespace, path: str, size: str | None) -> int:
    """The recipe on --topology itself: each compiled phase at the largest micro-batch that
    fits (from --rows-per-chip where given), then the projection at the slice's own bound.
    Status 2 where a phase fits no micro-batch (the smallest slice that fits is named)."""
    from bert_jax.compiler import aot, aot_modernbert as projection, gpu_targets
    from bert_jax.errors import UserError

    if gpu_targets.parse_topology(args.topology):
        raise UserError(f"--recipe modernbert --topology {args.topology}: the recipe projects "
                        f"TPU slices; for GPUs compile a phase: aot --config {path}:1 "
                        f"--topology {args.topology}")
    devices = aot.topology_devices(args.topology, args.chip_config)
    chips = len(devices) // aot.devices_per_chip(devices[0])
    projection.check_slice(args.topology, chips, len(devices))
    start = (_rows_per_chip(args.rows_per_chip, chips)
             or projection.default_rows(size, args.topology))
    best, all_reports = [], []
    for index, phase in enumerate(projection.COMPILED_PHASES):
        spec = f"{path}:{phase.name}"
        _check_recipe_phase(spec, args.overrides, phase)
        # No batch warm-up: it runs the same program, and its first batch need not split
        # over T's chips.
        phase_args = argparse.Namespace(**{**vars(args), "config": spec, "overrides": [
            *args.overrides, "--config.batch_warmup.steps=0"]})
        found, status = _fit_phase(phase_args, phase, devices, chips,
                                   start[index] if start else None)
        all_reports += found
        if status:
            return status
        best.append(min((report for report in found if report.fits
                         and report.num_devices == len(devices)),
                        key=lambda report: report.micro_batches))
    label = size or os.path.splitext(os.path.basename(path))[0]
    print(projection.format_summary(label, {args.topology: best}, args.mfu,
                                    {args.topology: chips}))
    rows = ",".join(str(projection.micro_batch_rows(report)) for report in best)
    print(f"(--rows-per-chip {rows} compiles just these)")
    if args.json:
        aot_search.write_json(args.json, all_reports, args.mfu,
                              {"slice": args.topology, "chips": chips})
    return 0


def _fit_phase(args: argparse.Namespace, phase, devices, chips: int,
               start: int | None) -> tuple[list, int]:
    """Compiles `phase` on the slice: with --rows-per-chip at its micro-batch, searching more
    micro-batches where it does not fit (aot_search.search_fit); else the largest micro-batch
    that fits, the search starting at `start` rows a chip (what fitted the generation's
    stand-in) where that divides. Returns the reports and the exit status."""
    from bert_jax.compiler import aot_fit, aot_report

    rows, steps = phase.rows_per_step // len(devices), round(phase.steps)
    chip_rows = phase.rows_per_step // chips
    print(f"== {args.topology}, phase {phase.name}: {rows} rows of {phase.seq_len} a device a "
          "step", flush=True)
    counts = aot_fit.micro_batch_counts(rows)
    first = chip_rows // start if start and chip_rows % start == 0 else None
    if args.rows_per_chip:
        _, report = aot_search.compile_step(
            args.config, [*args.overrides, *aot_fit.micro_batch_overrides(first)],
            args.topology, args.chip_config, devices, memory_check=args.memory_check)
        print(aot_search.format_report(report, args.mfu, steps), flush=True)
        if report.fits:
            return [report], 0
        found, status = aot_search.search_fit(args, report, devices, steps)
        return [report, *found], status
    fewest, compiled = aot_search.fewest_micro_batches(
        args, rows, counts, devices, counts.index(first) if first in counts else None)
    if fewest is None:
        return aot_search.smallest_slice(args, compiled)
    print(aot_search.format_report(compiled[fewest], args.mfu, steps), flush=True)
    print(f"{args.topology}, phase {phase.name}: the largest micro-batch that fits is "
          f"{rows // fewest} rows a device ({fewest} micro-batches a step; "
          f"{aot_report.fit_line(compiled[fewest])})", flush=True)
    return list(compiled.values()), 0


def _check_recipe_phase(spec: str, overrides: list[str], phase) -> None:
    """UserError unless `spec`'s step is the recipe's phase's (rows a step, tokens a row)."""
    from bert_jax.errors import UserError
    from bert_jax.run_config import load_run_config

    config = load_run_config(spec, overrides)
    if (config.batch_size, config.data.seq_len) != (phase.rows_per_step, phase.seq_len):
        raise UserError(f"--recipe modernbert: {spec} steps {config.batch_size} rows of "
                        f"{config.data.seq_len}; the recipe's phase {phase.name} steps "
                        f"{phase.rows_per_step} rows of {phase.seq_len} (configs/modernbert_"
                        "base.py, _large.py or bert_jax/run_config/modernbert_recipe.py)")


def _rows_per_chip(text: str | None, chips: int) -> tuple[int, int] | None:
    """--rows-per-chip's two counts, each dividing its phase's rows a chip on `chips`."""
    from bert_jax.compiler.aot_modernbert import COMPILED_PHASES
    from bert_jax.errors import UserError

    if text is None:
        return None
    try:
        values = tuple(int(part) for part in text.split(","))
    except ValueError:
        values = ()
    per_chip = [phase.rows_per_step // chips for phase in COMPILED_PHASES]
    if len(values) != 2 or any(value < 1 or per % value for value, per in zip(values, per_chip)):
        raise UserError(f"--rows-per-chip {text!r}: expected two counts, phase 1's dividing "
                        f"{per_chip[0]} and phase 2's dividing {per_chip[1]} (the rows a chip a "
                        f"step on {chips} chips), e.g. {per_chip[0] // 6 or 1},1")
    return values
