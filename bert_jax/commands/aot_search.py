"""`bert-jax aot`'s compile of one step, its report, and where the step does not fit, the
search for what does: the largest micro-batch (bert_jax/compiler/aot_fit.py), else the
smallest slice."""

import argparse
import json
import sys


def compile_step(config_path: str, overrides: list[str], topology: str, chip_config, devices,
                 memory_check: bool = True):
    """(the run config, its step's CompileReport) for `devices`, the compile's time shown;
    with `memory_check`, refused before compiling where this machine has less memory
    available than a compile of its size takes, and stopped where it runs the machine low
    (bert_jax/compiler/compile_memory.py)."""
    from bert_jax.compiler import aot, compile_memory
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
        lambda: aot.compile_train_step(run_config, devices, topology=name,
                                       memory_check=memory_check),
        f"compiling for {name}", "aot",
        guard=compile_memory.watch(f"compiling for {name}") if memory_check else None)


def format_report(report, mfu: float, steps: int) -> str:
    """A TPU's or GPUs' report, with the time of `steps` steps at `mfu`."""
    from bert_jax.compiler import aot_report, gpu_report

    if report.is_gpu:
        return gpu_report.format_gpu_report(report, mfu, steps)
    return aot_report.format_report(report, mfu, steps)


def write_json(path: str, reports: list, mfu: float, extra: dict) -> None:
    from bert_jax.storage import files
    from bert_jax.compiler.aot_report import report_to_json

    with files.atomic_write(path) as file:
        json.dump({"reports": [report_to_json(r, mfu) for r in reports], **extra}, file, indent=2)


def search_fit(args: argparse.Namespace, report, devices, steps: int) -> tuple[list, int]:
    """The config's step does not fit: the largest micro-batch that does (rc 0), else the
    smallest slice of the generation that does at one row a device (rc 2). Returns the
    reports compiled on the way and the exit status."""
    from bert_jax.compiler import aot_fit, aot_report

    rows = aot_fit.rows_per_device(report)
    counts = [count for count in aot_fit.micro_batch_counts(rows) if count > report.micro_batches]
    fewest, compiled = (fewest_micro_batches(args, rows, counts, devices) if counts
                        else (None, {}))
    if fewest is None:
        return smallest_slice(args, compiled)
    best = compiled[fewest]
    print(format_report(best, args.mfu, steps))
    print(f"{args.topology}: the config's {report.micro_batches} micro-batches of "
          f"{rows // report.micro_batches} rows a device do NOT fit; the largest that does "
          f"is {fewest} micro-batches of {rows // fewest} rows a device "
          f"({aot_report.fit_line(best)}): --config.grad_accum_steps={fewest}")
    return list(compiled.values()), 0


def fewest_micro_batches(args: argparse.Namespace, rows: int, counts: list[int], devices,
                          first: int | None = None) -> tuple[int | None, dict]:
    """The fewest of `counts` micro-batches of a device's `rows` that fit, compiling each
    count tried (aot_fit.fewest_fitting, `first` tried first), and the reports by count."""
    from bert_jax.compiler import aot_fit

    compiled = {}

    def fits(count: int) -> bool:
        print(f"== searching: {count} micro-batches of {rows // count} rows a device", flush=True)
        _, compiled[count] = compile_step(args.config, [*args.overrides,
                                                    *aot_fit.micro_batch_overrides(count)],
                                      args.topology, args.chip_config, devices,
                                      memory_check=args.memory_check)
        return compiled[count].fits

    return aot_fit.fewest_fitting(counts, fits, first), compiled


def smallest_slice(args: argparse.Namespace, compiled: dict) -> tuple[list, int]:
    """No micro-batch fits: on a TPU, the smallest larger slice of the generation that fits
    at one row a device, fully sharded, compiled into `compiled`. Says so; status 2."""
    from bert_jax.compiler import aot, aot_fit, gpu_targets

    # Topologies were checked when their devices were made: a TPU's is anything not a GPU's.
    on_tpu = gpu_targets.parse_topology(args.topology) is None
    slice_found = None
    if on_tpu:
        for topology in aot_fit.larger_slices(args.topology):
            print(f"== searching: {topology}, one row a device, fully sharded", flush=True)
            slice_devices = aot.topology_devices(topology, args.chip_config)
            _, compiled[topology] = compile_step(
                args.config, [*args.overrides,
                              *aot_fit.one_row_sharded_overrides(len(slice_devices))],
                topology, args.chip_config, slice_devices, memory_check=args.memory_check)
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
