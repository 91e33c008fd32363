"""`bert-jax aot`: compile the train step for a TPU or GPUs here; say if and how fast it runs."""

import argparse
import os

from bert_jax.commands import aot_recipe_modernbert, aot_search

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
  bert-jax aot --config configs/modernbert_base.py --recipe modernbert --topology v5e:2x4
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
                             "unless --recipe is given; with --recipe, the slice you will "
                             "train on, compiled itself)")
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
                             "on 8-chip stand-ins of v4-128, v5e-64 and v5p-128, or with "
                             "--topology on that TPU slice itself (its chips must divide the "
                             "recipe's 4,608- and 576-row steps: 1 to 64 in powers of two, or "
                             "another divisor of 576; any config in the recipe's phases), at the "
                             "largest micro-batch that fits, and prints days and chip-hours per "
                             "phase beside the paper's 191 h on 8 H100s")
    parser.add_argument("--rows-per-chip", default=None, metavar="R1,R2",
                        help="with --recipe modernbert: rows a chip per micro-batch in phase 1 "
                             "(dividing 72) and phase 2 (dividing 9) on the pods, or on "
                             "--topology (dividing 4,608 and 576 over its chips; more "
                             "micro-batches are searched where they do not fit); default: "
                             "counts that fitted each pod when compiled (README), and on "
                             "--topology the largest micro-batches that fit, searched from "
                             "those")
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
    parser.add_argument("--no-memory-check", dest="memory_check", action="store_false",
                        help="compile without the memory check: by default aot refuses, "
                             "before compiling, where this machine has less memory available "
                             "than the least a compile of the lowered program's size took, "
                             "and stops a compile that leaves the machine under 1 GiB (or 5%% "
                             "of its memory), each in one line with the figures, rather than "
                             "be killed for memory")
    parser.add_argument("--compare-meshes", action="store_true",
                        help="compile pure data parallel, FSDP and mixed (FSDP within a host) "
                             "layouts on --topology and name the fastest by the roofline bound")
    parser.add_argument("--json", metavar="PATH", default=None,
                        help="also write every report as JSON to PATH")


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
        return aot_recipe_modernbert.run_recipe(args)
    if args.recipe is None:
        devices = aot.topology_devices(args.topology, args.chip_config)
        reports, status = [], 0
        # The config, or each phase of a phased config (tasks/phases.py) in turn.
        for spec, steps in _phase_specs(args.config, args.overrides):
            found, answer = _answer(args, spec, devices, steps)
            reports, status = reports + found, max(status, answer)
        if args.json:
            aot_search.write_json(args.json, reports, args.mfu, {})
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
                _, report = aot_search.compile_step(
                    args.config, [*args.overrides, *phase.overrides, *extra], topology,
                    chip_config, devices, memory_check=args.memory_check)
                print(aot_search.format_report(report, args.mfu, phase.steps), flush=True)
                rows[name].append(report)
                all_reports.append(report)
    print(aot_report.format_recipe_summary(results, args.mfu))
    print(aot_report.format_packed_summary(results, packed, args.mfu, per_row))
    if args.json:
        days = {name: aot_report.recipe_days(reports, args.mfu)
                for name, reports in results.items()}
        packed_days = {name: aot_report.recipe_days(reports, args.mfu, per_row)
                       for name, reports in packed.items()}
        aot_search.write_json(args.json, all_reports, args.mfu,
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
    run_config, report = aot_search.compile_step(spec, args.overrides, args.topology,
                                                 args.chip_config, devices,
                                                 memory_check=args.memory_check)
    steps = args.steps or phase_steps or run_config.num_train_steps
    print(aot_search.format_report(report, args.mfu, steps), flush=True)
    if report.fits or not args.search_fit:
        return [report], 0
    found, status = aot_search.search_fit(
        argparse.Namespace(**{**vars(args), "config": spec}), report, devices, steps)
    return [report, *found], status


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
        run_config, report = aot_search.compile_step(
            args.config, [*args.overrides, *overrides], args.topology, args.chip_config, devices,
            memory_check=args.memory_check)
        print(aot_search.format_report(report, args.mfu,
                                       args.steps or run_config.num_train_steps), flush=True)
        reports[name] = report
    print(f"mesh layouts on {args.topology}:")
    print(aot_report.format_mesh_table(reports))
    if args.json:
        aot_search.write_json(args.json, list(reports.values()), args.mfu,
                    {"layouts": list(reports), "fastest": aot_report.fastest(reports)})
    return 0
