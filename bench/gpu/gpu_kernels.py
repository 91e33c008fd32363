"""Where bert-jax's GPU train step spends its time: the kernel table, grouped by kind.

Builds the step as bench/gpu/gpu_step.py does (real jitted `train_step`, donated state, the run
config's precision), times --steps steps, then traces --profile-steps more with
`jax.profiler` and reads the trace with `jax.profiler.ProfileData` (no TensorBoard): each GPU
stream's kernel time per step, kernels per step, the --top kernels, and the time per kind
(matmuls, cuDNN attention, reduce fusions, other fusions). Predict what a change moves, then
compare this table before and after it (issue 32).

Usage: python bench/gpu/gpu_kernels.py [--preset base] [--config bf16:32x512] [--attention auto]
           [--attention-dropout 0] [--fused-attention-dropout] [--top 30]
       python bench/gpu/gpu_kernels.py --smoke   # on the CPU: BERT-tiny; its trace has no GPU
"""

import argparse
import collections
import glob
import os
import sys
import tempfile
import time

SMOKE = "--smoke" in sys.argv
os.environ.setdefault("JAX_PLATFORMS", "cpu" if SMOKE else "cuda")
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
_REPOSITORY = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, _REPOSITORY)

from bench.gpu.gpu_frameworks import DTYPES, GpuJaxStep  # noqa: E402
from bench.gpu.gpu_step import parse_configs  # noqa: E402
from bench.model_step import make_batch  # noqa: E402
from bert_jax.models.config import ATTENTION_IMPLEMENTATIONS  # noqa: E402


def kind(name: str) -> str:
    """The group a GPU kernel's name puts it in."""
    if "nvjet" in name or "gemm" in name.lower() or "cutlass" in name:
        return "matmul (cuBLAS nvjet/gemm)"
    if "cudnn" in name:
        return "attention (cuDNN)"
    if "reduce" in name:
        return "reduce fusions"
    return "loop/elementwise fusions" if "fusion" in name else "other"


def kernel_table(events, steps: int, top: int) -> list[str]:
    """Lines of the table from (name, nanoseconds) kernel events over `steps` steps."""
    per_name = collections.defaultdict(lambda: [0, 0])  # name -> [ns, calls]
    per_kind = collections.Counter()
    for name, nanoseconds in events:
        per_name[name][0] += nanoseconds
        per_name[name][1] += 1
        per_kind[kind(name)] += nanoseconds
    total = sum(per_kind.values())
    calls = sum(count for _, count in per_name.values())
    lines = [f"{total / steps / 1e6:.2f} ms kernel time per step, {calls // steps} kernels "
             "per step"]
    for name, (nanoseconds, count) in sorted(per_name.items(), key=lambda item: -item[1][0])[
            :top]:
        lines.append(f"  {nanoseconds / steps / 1e6:7.3f} ms x{count // steps:4d} {name[:110]}")
    lines.append("by kind (ms per step): " + ", ".join(
        f"{name} {nanoseconds / steps / 1e6:.2f}" for name, nanoseconds in per_kind.most_common()))
    return lines


def gpu_kernel_events(trace_directory: str) -> dict[str, list[tuple[str, int]]]:
    """Each GPU stream's (kernel name, ns) events in a jax.profiler trace."""
    from jax.profiler import ProfileData

    files = glob.glob(os.path.join(trace_directory, "**", "*.xplane.pb"), recursive=True)
    streams = {}
    for plane in ProfileData.from_file(files[0]).planes:
        if "GPU" not in plane.name:
            continue
        for line in plane.lines:
            events = [(event.name, event.duration_ns) for event in line.events]
            if events:
                streams[f"{plane.name} {line.name}"] = events
    return streams


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="base", help="model size")
    parser.add_argument("--config", default="bf16:32x512", help="PRECISION:BATCHxSEQ")
    parser.add_argument("--predictions", type=int, default=20, help="masked positions per row")
    parser.add_argument("--attention", default="auto", choices=ATTENTION_IMPLEMENTATIONS)
    parser.add_argument("--attention-dropout", type=float, default=0.0)
    parser.add_argument("--fused-attention-dropout", action="store_true")
    parser.add_argument("--steps", type=int, default=10, help="timed steps")
    parser.add_argument("--profile-steps", type=int, default=5, help="traced steps")
    parser.add_argument("--top", type=int, default=30, help="kernels listed")
    parser.add_argument("--smoke", action="store_true", help="on the CPU, BERT-tiny 2x128")
    args = parser.parse_args()
    if args.smoke:
        args.preset, args.config, args.predictions = "tiny", "bf16:2x128", 4
        args.steps, args.profile_steps = 1, 1
    ((precision, batch_size, seq_len),) = parse_configs(args.config)
    step = GpuJaxStep(args.preset, make_batch(batch_size, seq_len, args.predictions),
                      DTYPES[precision], {"attention_dropout_rate": args.attention_dropout},
                      precision_overrides={"attention": args.attention,
                                           "fused_attention_dropout":
                                               args.fused_attention_dropout})
    step.run(3)  # compiles, warms up
    start = time.perf_counter()
    step.run(args.steps)
    print(f"{args.preset} {args.config} attention={args.attention} dropout "
          f"{args.attention_dropout}: {(time.perf_counter() - start) / args.steps * 1e3:.2f} "
          f"ms/step; the step holds {step.attention()} attention", flush=True)
    trace = tempfile.mkdtemp(prefix="bert-jax-trace-")
    import jax
    jax.profiler.start_trace(trace)
    step.run(args.profile_steps)
    jax.profiler.stop_trace()
    streams = gpu_kernel_events(trace)
    if not streams:
        print("no GPU kernels in the trace (a CPU run: --smoke checks the script only)")
    for stream, events in streams.items():
        print(f"## {stream}")
        print("\n".join(kernel_table(events, args.profile_steps, args.top)), flush=True)


if __name__ == "__main__":
    main()
