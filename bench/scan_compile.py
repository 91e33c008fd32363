"""The train step's compile on this CPU, scanned layer stack against unrolled, and its step time.

  compile  builds and compiles the real train step (`training.train_step`) of `--config` for
           one CPU device, with `precision.scan_layers` as `--scan` says, and prints the
           compile's seconds and the process's peak resident memory over it
           (`bert_jax.peak_memory`). One compile a process: run it under `/usr/bin/time -v`
           for the whole process's peak as well.
  step     times the train step scanned and unrolled side by side in one process
           (bench/model_step.py's `JaxStep`, the same weights and batch), in interleaved
           rounds so a change in machine load hits both, and prints each round's
           scanned / unrolled time ratio and their median. `--remat POLICY` runs the
           scanned side's blocks rematerialised (`precision.remat_policy`: `full` or
           `matmul_outputs`); the unrolled side always runs as the CPU default does, without.

Usage: python bench/scan_compile.py compile --config configs/bert_large.py --scan on
       python bench/scan_compile.py step --preset base --batch 8 --seq-len 128 --rounds 5 \
           [--remat matmul_outputs]
       python bench/scan_compile.py step --family modernbert --layers 7 --batch 2 \
           --seq-len 1024 --rounds 5
"""

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench.host import announce_host  # noqa: E402
from bench.timed_rounds import warm_up  # noqa: E402


def compile_once(config_path: str, scan: bool) -> None:
    import jax

    from bert_jax import sharding
    from bert_jax.compiler import aot
    from bert_jax.peak_memory import PeakMemory
    from bert_jax.run_config import load_run_config
    from bert_jax.tasks.pretraining import task_from_run_config
    from bert_jax.training import train_step

    run_config = load_run_config(config_path, [f"--config.precision.scan_layers={scan}"])
    aot.resolve_shapes(run_config)
    model_config, _ = aot.resolved_model_config(run_config)
    mesh = sharding.make_mesh(devices=jax.devices()[:1])
    start = time.perf_counter()
    with PeakMemory() as peak:
        bundle = train_step.build_train_step(run_config, mesh, task_from_run_config(run_config),
                                             model_config=model_config)
        bundle.train_step.lower(bundle.abstract_state, bundle.abstract_batch,
                                bundle.abstract_rng).compile()
    print(f"{config_path} scan_layers={scan}: {model_config.num_layers} layers, batch "
          f"{run_config.batch_size} x {run_config.data.seq_len}: compiled in "
          f"{time.perf_counter() - start:.1f} s, peak resident {peak.bytes / 2**30:.2f} GiB "
          f"(before {peak.before / 2**30:.2f} GiB)", flush=True)


def precision_overrides(scan: bool, remat: str) -> dict:
    """The side's `precision` settings: scanned or not, and the scanned side's remat."""
    if not scan or remat == "none":
        return {"scan_layers": scan}
    return {"scan_layers": True, "remat": True, "remat_policy": remat}


def bert_sides(preset: str, batch_size: int, seq_len: int, layers: int, remat: str) -> dict:
    """BERT's pre-training step (MLM and NSP), dropout off, unrolled and scanned."""
    from bench.model_step import JaxStep, make_batch

    batch = make_batch(batch_size, seq_len, max(1, seq_len * 15 // 100))
    depth = {"num_layers": layers} if layers else {}
    return {scan: JaxStep(preset, batch, precision_overrides=precision_overrides(scan, remat),
                          model_overrides={"dropout_rate": 0.0, "attention_dropout_rate": 0.0,
                                           **depth})
            for scan in (False, True)}


def modernbert_sides(batch_size: int, seq_len: int, layers: int, remat: str) -> dict:
    """ModernBERT-base's masked-LM step with its StableAdamW (bench/modernbert_step.py's) on
    packed rows, unrolled and scanned (layer 0 alone, then blocks of three)."""
    from bench.masked_lm_rows import make_rows
    from bench.modernbert_step import MASK_RATE, PRESET, modernbert_jax_step
    from bert_jax.models.presets import preset

    config = preset(PRESET)
    rows = make_rows("packed", batch_size, seq_len, config.local_attention,
                     config.vocab_size, 0, mask_rate=MASK_RATE)
    return {scan: modernbert_jax_step(rows, layers or config.num_layers,
                                      precision_overrides=precision_overrides(scan, remat))
            for scan in (False, True)}


def time_steps(family: str, preset: str, batch_size: int, seq_len: int, layers: int,
               rounds: int, steps: int, remat: str) -> None:
    sides = (modernbert_sides(batch_size, seq_len, layers, remat) if family == "modernbert"
             else bert_sides(preset, batch_size, seq_len, layers, remat))
    sides[True].load_params(sides[False].state.params)
    warm_up({"unrolled": sides[False], "scanned": sides[True]}, 1)  # compile, then steady
    ratios = []
    for round_index in range(rounds):
        seconds = {}
        for scan, side in sides.items():
            start = time.perf_counter()
            for _ in range(steps):
                side()
            seconds[scan] = (time.perf_counter() - start) / steps
        ratios.append(seconds[True] / seconds[False])
        print(f"round {round_index}: unrolled {seconds[False]:.3f} s, scanned "
              f"{seconds[True]:.3f} s a step, scanned / unrolled {ratios[-1]:.3f}", flush=True)
    name = "modernbert-base" if family == "modernbert" else preset
    scanned = "scanned" if remat == "none" else f"scanned (remat {remat})"
    print(f"{name}{f' ({layers} layers)' if layers else ''} {batch_size} x {seq_len}: step "
          f"time {scanned} / unrolled, median of "
          f"{rounds} rounds {statistics.median(ratios):.3f} (range {min(ratios):.3f} - "
          f"{max(ratios):.3f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("compile", "step"))
    parser.add_argument("--config", default="configs/bert_large.py")
    parser.add_argument("--scan", choices=("on", "off"), default="on")
    parser.add_argument("--family", choices=("bert", "modernbert"), default="bert",
                        help="step: BERT's pre-training step (--preset) or ModernBERT-base's "
                             "masked-LM step on packed rows")
    parser.add_argument("--preset", default="base", help="step: BERT's model size")
    parser.add_argument("--layers", type=int, default=0,
                        help="step: layers (0: the model's; ModernBERT scans 1 + 3k)")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--remat", choices=("none", "full", "matmul_outputs"), default="none",
                        help="step: the scanned side's remat policy (unrolled runs without)")
    args = parser.parse_args()
    announce_host()
    if args.what == "compile":
        compile_once(args.config, args.scan == "on")
    else:
        time_steps(args.family, args.preset, args.batch, args.seq_len, args.layers,
                   args.rounds, args.steps, args.remat)


if __name__ == "__main__":
    main()
