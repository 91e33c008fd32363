"""`bert-jax aot`: compile the train step for a TPU or GPUs here; say if and how fast it runs."""

import argparse
import json
import os
import sys

HELP = ("compile the train step for a TPU topology or GPUs on this CPU host: memory fit, "
        "FLOPs, kernels, time")
DESCRIPTION = """\
Compiles the real train step of a run config for a TPU slice that is not attached (libtpu's
compile-only devices), with the config's mesh and shardings, and prints per device the
argument, output and temporary memory against the chip's HBM (fits or not, by how much),
the FLOPs and bytes accessed per step (XLA's cost analysis, plus the FLOPs inside Pallas
attention kernels, which it does not see), a table of where the bytes go by purpose
(attention, MLP, LayerNorm, embeddings, heads, optimizer update, gradient norm and clipping,
finite check, collectives' buffers, other) with the corrected HBM count beside XLA's and a
first-principles count, the attention implementation the program holds,
the collectives in the compiled program per kind (count, bytes sent, and what the mesh layout
needs them for; one the layout does not call for is flagged), the roofline bound (no
step is faster than its FLOPs / peak, its corrected HBM bytes / HBM bandwidth or its collective bytes /
interconnect bandwidth: launch/tpu_types.py cites the chip tables), and, as a second line,
the step time and time to train projected at a given model-FLOPs utilisation.

examples:
  bert-jax aot --config configs/bert_large.py --topology v4:4x4x2 --chip-config megacore
  bert-jax aot --config configs/bert_large.py --topology v5e:16x16 --config.batch_size=1024
  bert-jax aot --config configs/bert_large.py --recipe original   # v3-64, v4-64, v5e-256
  bert-jax aot --config configs/bert_base.py --topology v5e:16x16 --compare-meshes
  bert-jax aot --config phased.py --topology v5e:2x2   # each phase of a phased config

topologies (GENERATION:CHIPS): v3:4x8 (v3-64), v4:4x4x2 with --chip-config megacore
(v4-64), v5e:16x16 (v5e-256), v5e:2x2, v5e:2x4, v5p:2x2x1, v6e:2x2

GPUs (jax's CUDA plugin compiles for them on this CPU: pip install -r
requirements-gpu-compile.txt): h100, a100-80gb, a100-40gb, l4, or N of them on one node
(8xh100). The report leads with the answer (fits per GPU, with how much to spare; the
fastest a step can be) and lists the kernels the step launches by kind (matmul, cuDNN,
elementwise, reduction, copies, collectives) with their bytes and FLOPs, the bytes by
purpose, and the bound from the datasheet and from the rates an H100 measured:
  bert-jax aot --config configs/bert_base.py --topology h100 --config.batch_size=32 \
    --config.data.seq_len=512 --config.data.max_predictions=20
"""
TAKES_OVERRIDES = True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True,
                        help="run config file (configs/NAME.py); --config.key=value overrides it")
    parser.add_argument("--topology",
                        help="TPU topology as libtpu spells it, e.g. v4:4x4x2 or v5e:16x16, "
                             "or GPUs: h100, a100-80gb, a100-40gb, l4, 8xh100 (required "
                             "unless --recipe is given)")
    parser.add_argument("--chip-config", default=None,
                        help="libtpu chip config name; 'megacore' makes each v4/v5p chip one "
                             "device (default: libtpu's)")
    from bert_jax.compiler.aot_report import DEFAULT_MFU  # imports no JAX

    parser.add_argument("--mfu", type=float, default=DEFAULT_MFU,
                        help="model-FLOPs utilisation assumed for the time projection "
                             f"(default: {DEFAULT_MFU})")
    parser.add_argument("--steps", type=int, default=None,
                        help="steps to project the time for (default: the config's num_train_steps)")
    parser.add_argument("--recipe", choices=["original", "modernbert"], default=None,
                        help="'original': BERT-Large's 1M steps x 256 sequences, 90%% at length "
                             "128 then 10%% at 512; compiles both phases on v3-64, v4-64 and "
                             "v5e-256 (or on --topology) and prints projected days. "
                             "'modernbert' (with configs/modernbert_base.py or _large.py): "
                             "1.7T tokens at 1,024 then 300B at 8,192; compiles phases 1 and 2 "
                             "on 8-chip stand-ins of v4-128, v5e-64 and v5p-128 and prints days "
                             "and chip-hours per phase beside the paper's 191 h on 8 H100s")
    parser.add_argument("--rows-per-chip", default=None, metavar="R1,R2",
                        help="with --recipe modernbert: rows a chip per micro-batch in phase 1 "
                             "(dividing 72) and phase 2 (dividing 9); default: counts that "
                             "fitted each pod when compiled (README)")
    parser.add_argument("--instances-per-row", default=None, metavar="P1,P2",
                        help="with --recipe: instances per packed row in phase 1 (128) and "
                             "phase 2 (512), num_instances / num_records of your packed "
                             "shards' manifests (default: War and Peace's, 1.075,1.259)")
    parser.add_argument("--no-search-fit", dest="search_fit", action="store_false",
                        help="where the step does not fit, stop there instead of compiling "
                             "more micro-batches (the largest that fits is printed with its "
                             "--config.grad_accum_steps; where one row a device does not fit, "
                             "larger slices of the generation, up to 64 chips, at one row a "
                             "device fully sharded, and exit status 2)")
    parser.add_argument("--compare-meshes", action="store_true",
                        help="compile pure data parallel, FSDP and mixed (FSDP within a host) "
                             "layouts on --topology and name the fastest by the roofline bound")
    parser.add_argument("--json", metavar="PATH", default=None,
                        help="also write every report as JSON to PATH")


def _compile(config_path: str, overrides: list[str], topology: str, chip_config, devices):
    from bert_jax.compiler import aot
    from bert_jax.run_config import load_run_config

    run_config = load_run_config(config_path, overrides)
    filled = aot.resolve_shapes(run_config)
    if filled:
        print(f"(unset in {config_path} and no shards to read them from: {filled})", flush=True)
    model_config, substituted = aot.resolved_model_config(run_config)
    if substituted:
        print(f"(model.vocab_size is 0 in {config_path}: compiling with "
              f"{model_config.vocab_size}, the released model's vocabulary)", flush=True)
    from bert_jax.progress import interruptible

    name = topology + (f" ({chip_config})" if chip_config else "")
    # Minutes for BERT-Large on a pod slice: the time is shown, and Ctrl-C or SIGTERM end
    # the compile with one line rather than libtpu's stack dump.
    return run_config, interruptible(
        lambda: aot.compile_train_step(run_config, devices, topology=name),
        f"compiling for {name}", "aot")


def _format(report, mfu: float, steps: int) -> str:
    from bert_jax.compiler import aot_report, gpu_report

    if report.is_gpu:
        return gpu_report.format_gpu_report(report, mfu, steps)
    return aot_report.format_report(report, mfu, steps)


def _write_json(path: str, reports: list, mfu: float, extra: dict) -> None:
    from bert_jax.storage import files
    from bert_jax.compiler.aot_report import report_to_json

    with files.atomic_write(path) as file:
        json.dump({"reports": [report_to_json(r, mfu) for r in reports], **extra}, file, indent=2)


def outputs(args) -> list:
    """The --json file if asked for, checked before compiling (bert_jax/storage/outputs.py)."""
    from bert_jax.storage.file_kinds import JSON
    from bert_jax.storage.outputs import Output

    return [Output("--json", args.json, inputs=(("--config", args.config),), ours=JSON)
            ] if args.json else []


def run(args: argparse.Namespace) -> int:
    from bert_jax.compiler import gpu_targets

    if args.topology and gpu_targets.parse_topology(args.topology):
        # Compiled on this CPU: jax must not open (or look for) a CUDA device here.
        os.environ["JAX_PLATFORMS"] = "cpu"
    from bert_jax.compiler import aot, aot_report
    from bert_jax.errors import UserError

    if not 0 < args.mfu <= 1:
        raise UserError(f"--mfu must be in (0, 1], got {args.mfu}")
    if args.recipe is None and not args.topology:
        raise UserError("give --topology (e.g. v4:4x4x2 --chip-config megacore) or --recipe original")
    if args.compare_meshes:
        return _compare_meshes(args)
    if args.recipe == "modernbert":
        return _modernbert_recipe(args)
    if args.recipe is None:
        devices = aot.topology_devices(args.topology, args.chip_config)
        reports, status = [], 0
        # The config, or each phase of a phased config (tasks/phases.py) in turn.
        for spec, steps in _phase_specs(args.config, args.overrides):
            found, answer = _answer(args, spec, devices, steps)
            reports, status = reports + found, max(status, answer)
        if args.json:
            _write_json(args.json, reports, args.mfu, {})
        return status
    targets = (aot_report.RECIPE_TARGETS if not args.topology
               else ((args.topology, args.topology, args.chip_config),))
    per_row = _instances_per_row(args.instances_per_row)
    results, packed, all_reports = {}, {}, []
    for name, topology, chip_config in targets:
        devices = aot.topology_devices(topology, chip_config)
        results[name], packed[name] = [], []
        for phase in aot_report.ORIGINAL_RECIPE:
            for rows, extra in ((results, ()), (packed, aot_report.PACKED_OVERRIDES)):
                print(f"== {name}, {phase.name}" + (", packed rows" if extra else ""),
                      flush=True)
                _, report = _compile(args.config, [*args.overrides, *phase.overrides, *extra],
                                     topology, chip_config, devices)
                print(_format(report, args.mfu, phase.steps), flush=True)
                rows[name].append(report)
                all_reports.append(report)
    print(aot_report.format_recipe_summary(results, args.mfu))
    print(aot_report.format_packed_summary(results, packed, args.mfu, per_row))
    if args.json:
        days = {name: aot_report.recipe_days(reports, args.mfu)
                for name, reports in results.items()}
        packed_days = {name: aot_report.recipe_days(reports, args.mfu, per_row)
                       for name, reports in packed.items()}
        _write_json(args.json, all_reports, args.mfu,
                    {"recipe_days": days, "packed_recipe_days": packed_days,
                     "instances_per_row": list(per_row)})
    return 0


def _phase_specs(config_spec: str, overrides: list[str]) -> list[tuple[str, int | None]]:
    """(config spec, its steps) to compile: each phase of a phased config (tasks/phases.py)
    with the steps it trains (its end less the one before), else the config itself (None:
    its num_train_steps)."""
    from bert_jax.tasks import phases

    if not phases.phases_of(config_spec):
        return [(config_spec, None)]
    ends = [(name, config.num_train_steps)
            for name, config in phases.load_phases(config_spec, overrides)]
    return [(f"{config_spec}:{name}", end - (ends[index - 1][1] if index else 0))
            for index, (name, end) in enumerate(ends)]


def _answer(args: argparse.Namespace, spec: str, devices, phase_steps) -> tuple[list, int]:
    """Compiles `spec`'s step, prints its report, and where it does not fit (unless
    --no-search-fit) what does. Returns the reports compiled and the exit status."""
    if spec != args.config:
        print(f"== phase {spec.rpartition(':')[2]} of {args.config}", flush=True)
    run_config, report = _compile(spec, args.overrides, args.topology, args.chip_config,
                                  devices)
    steps = args.steps or phase_steps or run_config.num_train_steps
    print(_format(report, args.mfu, steps), flush=True)
    if report.fits or not args.search_fit:
        return [report], 0
    found, status = _search_fit(argparse.Namespace(**{**vars(args), "config": spec}), report,
                                devices, steps)
    return [report, *found], status


def _search_fit(args: argparse.Namespace, report, devices, steps: int) -> tuple[list, int]:
    """The config's step does not fit: the largest micro-batch that does (rc 0), else the
    smallest slice of the generation that does at one row a device (rc 2). Returns the
    reports compiled on the way and the exit status."""
    from bert_jax.compiler import aot, aot_fit, aot_report, gpu_targets

    compiled = {}

    def fits(count: int) -> bool:
        print(f"== searching: {count} micro-batches of "
              f"{aot_fit.rows_per_device(report) // count} rows a device", flush=True)
        _, compiled[count] = _compile(args.config, [*args.overrides,
                                                    *aot_fit.micro_batch_overrides(count)],
                                      args.topology, args.chip_config, devices)
        return compiled[count].fits

    rows = aot_fit.rows_per_device(report)
    counts = [count for count in aot_fit.micro_batch_counts(rows) if count > report.micro_batches]
    fewest = aot_fit.fewest_fitting(counts, fits) if counts else None
    if fewest is not None:
        best = compiled[fewest]
        print(_format(best, args.mfu, steps))
        print(f"{args.topology}: the config's {report.micro_batches} micro-batches of "
              f"{rows // report.micro_batches} rows a device do NOT fit; the largest that does "
              f"is {fewest} micro-batches of {rows // fewest} rows a device "
              f"({aot_report.fit_line(best)}): --config.grad_accum_steps={fewest}")
        return list(compiled.values()), 0
    # Topologies were checked when their devices were made: a TPU's is anything not a GPU's.
    on_tpu = gpu_targets.parse_topology(args.topology) is None
    slice_found = None
    if on_tpu:
        for topology in aot_fit.larger_slices(args.topology):
            print(f"== searching: {topology}, one row a device, fully sharded", flush=True)
            slice_devices = aot.topology_devices(topology, args.chip_config)
            _, compiled[topology] = _compile(
                args.config, [*args.overrides,
                              *aot_fit.one_row_sharded_overrides(len(slice_devices))],
                topology, args.chip_config, slice_devices)
            if compiled[topology].fits:
                slice_found = topology
                break
    if slice_found:
        answer = f"the smallest slice that fits it at one row a device, fully sharded: {slice_found}"
    elif on_tpu:
        answer = f"no slice of up to {aot_fit.MAX_SLICE_CHIPS} chips fits it at one row a device"
    else:
        answer = "a GPU target: no larger slice tried"
    print(f"bert-jax aot: {args.config} does NOT fit {args.topology} at any micro-batch, one "
          f"row a device included; {answer}", file=sys.stderr)
    return list(compiled.values()), 2


def _instances_per_row(text: str | None) -> tuple[float, float]:
    from bert_jax.compiler import aot_report
    from bert_jax.errors import UserError

    if text is None:
        return aot_report.WAR_AND_PEACE_INSTANCES_PER_ROW
    try:
        values = tuple(float(part) for part in text.split(","))
    except ValueError:
        values = ()
    if len(values) != 2 or not all(value >= 1 for value in values):
        raise UserError(f"--instances-per-row {text!r}: expected two numbers of at least 1, "
                        "phase 1's and phase 2's, e.g. 1.075,1.259")
    return values


def _compare_meshes(args: argparse.Namespace) -> int:
    """Compiles each mesh layout on --topology, prints every report, then the comparison."""
    from bert_jax.compiler import aot, aot_report
    from bert_jax.errors import UserError

    if not args.topology or args.recipe:
        raise UserError("--compare-meshes needs --topology (and no --recipe)")
    devices = aot.topology_devices(args.topology, args.chip_config)
    generation = aot.accelerator(devices[0].device_kind)
    per_host = generation.chips_per_host * generation.devices_per_chip
    reports = {}
    for name, overrides in aot_report.mesh_layouts(len(devices), per_host).items():
        print(f"== mesh layout {name}", flush=True)
        run_config, report = _compile(args.config, [*args.overrides, *overrides],
                                      args.topology, args.chip_config, devices)
        print(_format(report, args.mfu, args.steps or run_config.num_train_steps), flush=True)
        reports[name] = report
    print(f"mesh layouts on {args.topology}:")
    print(aot_report.format_mesh_table(reports))
    if args.json:
        _write_json(args.json, list(reports.values()), args.mfu,
                    {"layouts": list(reports), "fastest": aot_report.fastest(reports)})
    return 0


def _modernbert_recipe(args: argparse.Namespace) -> int:
    """Compiles phases 1 and 2 of a ModernBERT recipe config on each pod's stand-in, prints
    every report, then the days and chip-hours of all three phases."""
    from bert_jax.compiler import aot, aot_modernbert as projection
    from bert_jax.errors import UserError

    path = args.config.split(":")[0]
    size = next((size for size in ("base", "large") if f"modernbert_{size}" in path), None)
    if size is None or args.topology:
        raise UserError("--recipe modernbert takes configs/modernbert_base.py or "
                        "configs/modernbert_large.py, and no --topology (it compiles "
                        + ", ".join(name for name, _, _ in projection.TARGETS) + ")")
    reports, all_reports = {}, []
    for name, topology, chip_config in projection.TARGETS:
        rows = _rows_per_chip(args.rows_per_chip, projection.DEFAULT_ROWS[size, name])
        devices = aot.topology_devices(topology, chip_config)
        reports[name] = []
        for phase, phase_rows in zip(projection.COMPILED_PHASES, rows):
            print(f"== {name} ({topology} stands in), phase {phase.name}: {phase_rows} rows a "
                  f"chip a micro-batch", flush=True)
            overrides = [*args.overrides, *projection.phase_overrides(phase, phase_rows)]
            _, report = _compile(f"{path}:{phase.name}", overrides, topology, chip_config,
                                 devices)
            print(_format(report, args.mfu, round(phase.steps)), flush=True)
            reports[name].append(report)
            all_reports.append(report)
    print(projection.format_summary(size, reports, args.mfu))
    if args.json:
        _write_json(args.json, all_reports, args.mfu, {"pods": list(reports)})
    return 0


def _rows_per_chip(text: str | None, default: tuple[int, int]) -> tuple[int, int]:
    from bert_jax.compiler.aot_modernbert import COMPILED_PHASES
    from bert_jax.errors import UserError

    if text is None:
        return default
    try:
        values = tuple(int(part) for part in text.split(","))
    except ValueError:
        values = ()
    chips = [phase.rows_per_chip for phase in COMPILED_PHASES]
    if len(values) != 2 or any(value < 1 or per % value for value, per in zip(values, chips)):
        raise UserError(f"--rows-per-chip {text!r}: expected two counts, phase 1's dividing "
                        f"{chips[0]} and phase 2's dividing {chips[1]}, e.g. 12,1")
    return values
