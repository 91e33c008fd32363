"""Where a CPU train step spends its time: a jax.profiler trace grouped by model part.

Traces a few steps of the real jitted `train_step` (batch 8 x 128, 20 predictions, as
`bench/model_step.py`), then adds up the time of every XLA operation (fusion) on the
XLA worker threads and files it under the model part its HLO metadata names: attention
(score and context products, softmax, dropout), the dense matmuls, LayerNorm, GELU,
dropout random bits, the masked-LM head and vocabulary projection, the loss, and the
optimizer update. Matmuls (YNNPACK/oneDNN dot fusions) are shown apart from the
elementwise work in each part. Times are thread-time per step, summed over XLA's
threads, so they add up to about (threads x wall time) on an idle machine.

Usage: python bench/profile_step.py [--preset base] [--steps 2]
"""

import argparse
import collections
import glob
import os
import re
import sys
import tempfile
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# (part, pattern on the HLO op_name), first match wins; op_names carry the flax module path.
PARTS = (
    ("dropout random bits", r"random_bits|threefry|random_wrap|random_unwrap|_fold_in"),
    ("attention q/k/v/output dense", r"attention/(query|key|value|output)"),
    ("attention scores/context products", r"attention/.*(bqhd,bkhd|bhqk,bkhd)"),
    ("attention softmax", r"attention/.*(softmax|reduce_max|exp|reduce_sum|sub|div)"),
    ("attention-probability dropout", r"attention/Dropout"),
    ("feed-forward dense", r"mlp/(intermediate|output)"),
    ("GELU", r"mlp/|gelu|erf"),
    ("LayerNorm", r"layer_norm"),
    ("hidden-state dropout", r"Dropout"),
    ("MLM head + vocabulary projection", r"mlm_head|word_logits|nsp_head|take_along_axis|"
                                         r"pooler"),
    ("embeddings", r"embeddings"),
)


def part_of(op_name: str) -> str:
    for part, pattern in PARTS:
        if re.search(pattern, op_name):
            return part
    if "BertForPreTraining" in op_name:
        return "encoder other (residual adds, masks)"
    if "jvp(" in op_name or "transpose(" in op_name:
        return "loss (log-softmax, NLL)"
    return "optimizer update, clipping, state select"


def op_names(hlo_text: str) -> dict[str, str]:
    """HLO instruction name -> its metadata op_name."""
    names = {}
    for line in hlo_text.splitlines():
        match = re.match(r"\s*(?:ROOT )?%?([\w.\-]+) = .*?op_name=\"([^\"]*)\"", line)
        if match:
            names[match.group(1)] = match.group(2)
    return names


def thread_times(trace_dir: str, steps: int) -> collections.Counter:
    """Nanoseconds per step of each XLA operation on the XLA worker threads."""
    from jax._src.lib import _profile_data
    path = glob.glob(os.path.join(trace_dir, "**", "*.xplane.pb"), recursive=True)[0]
    totals = collections.Counter()
    for plane in _profile_data.ProfileData.from_file(path).planes:
        for line in plane.lines:
            if not line.name.startswith("tf_XLAEigen"):
                continue
            for event in line.events:
                if not event.name.startswith(("ThunkExecutor", "SlinkyThreadPool")):
                    totals[event.name] += event.duration_ns / steps
    return totals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="base")
    parser.add_argument("--steps", type=int, default=2, help="traced steps (after 2 warm-up)")
    args = parser.parse_args()
    import jax
    from model_step import JaxStep, make_batch
    step = JaxStep(args.preset, make_batch(8, 128, 20))
    bundle = step.bundle
    hlo = bundle.train_step.lower(step.state, step.batch, step.rng).compile().as_text()
    names = op_names(hlo)
    for _ in range(2):
        step()
    with tempfile.TemporaryDirectory() as trace_dir:
        start, cpu_start = time.perf_counter(), time.process_time()
        jax.profiler.start_trace(trace_dir)
        for _ in range(args.steps):
            step()
        jax.profiler.stop_trace()
        wall = (time.perf_counter() - start) / args.steps
        cpu = (time.process_time() - cpu_start) / args.steps
        totals = thread_times(trace_dir, args.steps)
    parts, matmuls = collections.Counter(), collections.Counter()
    for name, nanoseconds in totals.items():
        part = part_of(names.get(name, ""))
        parts[part] += nanoseconds
        if re.match(r"(ynn|xnn|onednn)_fusion|dot", name) and "reduce" not in names.get(name, ""):
            matmuls[part] += nanoseconds
    total = sum(parts.values())
    print(f"{args.preset}: wall {wall * 1e3:.0f} ms/step, process CPU {cpu * 1e3:.0f} ms/step, "
          f"XLA thread-time {total / 1e6:.0f} ms/step (with profiling on)")
    print(f"{'part':40s} {'ms/step':>9s} {'share':>6s} {'of it matmul':>13s}")
    for part, nanoseconds in parts.most_common():
        print(f"{part:40s} {nanoseconds / 1e6:9.1f} {100 * nanoseconds / total:5.1f}% "
              f"{matmuls[part] / 1e6:12.1f}")
    print(f"{'all matmuls':40s} {sum(matmuls.values()) / 1e6:9.1f} "
          f"{100 * sum(matmuls.values()) / total:5.1f}%")


if __name__ == "__main__":
    main()
