"""The GPU train step's kernel census on this CPU, and the check behind the suite's budget.

Compiles the real BERT-Base bf16 train step at 32 x 512 (20 predictions, attention dropout
0: cuDNN's attention, as bench/gpu/gpu_step.py runs it) for an H100 (`bert-jax aot`'s deviceless
compile, requirements-gpu-compile.txt) with 2, 3 and 12 layers, prints each census, and
checks that the 2-layer census plus 10 x (3 layers - 2 layers) is the 12-layer one: the
suite (tests/test_aot_gpu.py) compiles 2 layers and holds them to a budget, which says what
it says of BERT-Base only if every added layer adds the same kernels and bytes (measured:
within 3 kernels and 4 MB of the 12-layer census: the first and last layers differ a little).

Usage: python bench/gpu/gpu_census.py [--layers 2,3,12] [--topology h100]   (minutes on 2 cores)
"""

import argparse
import os
import sys
import time

os.environ["JAX_PLATFORMS"] = "cpu"  # compiled here, for a GPU that is not here
_REPOSITORY = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, _REPOSITORY)


def compile_base(layers: int, topology: str):
    from bert_jax.compiler import aot
    from bert_jax.run_config import base_config

    config = base_config("base")
    config.model.update(num_layers=layers, vocab_size=30522, attention_dropout_rate=0.0)
    config.precision.dtype = "bfloat16"
    config.batch_size, config.data.seq_len, config.data.max_predictions = 32, 512, 20
    config.optimizer.warmup_steps = 10
    return aot.compile_train_step(config, aot.topology_devices(topology), topology=topology)


def totals(report) -> tuple[int, float]:
    """(kernels, elementwise + reduction bytes) of a report's census."""
    from bert_jax.compiler import gpu_census

    kinds = report.kernels_by_kind
    return (sum(row["kernels"] for row in kinds.values()),
            sum(kinds[kind]["bytes"] for kind in gpu_census.MEMORY_BOUND))


def main() -> int:
    from bert_jax.compiler import gpu_report

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", default="2,3,12", help="layer counts to compile")
    parser.add_argument("--topology", default="h100")
    args = parser.parse_args()
    found = {}
    for layers in map(int, args.layers.split(",")):
        start = time.perf_counter()
        report = compile_base(layers, args.topology)
        found[layers] = totals(report)
        print(f"== BERT-Base, {layers} layers, bf16 32 x 512 on {args.topology}: compiled in "
              f"{time.perf_counter() - start:.0f} s (load {os.getloadavg()[0]:.1f})")
        print(gpu_report.answer_line(report))
        print("\n".join(gpu_report.census_lines(report)), flush=True)
    if {2, 3, 12} <= set(found):
        per_layer = [three - two for two, three in zip(found[2], found[3])]
        predicted = [two + 10 * added for two, added in zip(found[2], per_layer)]
        close = all(abs(actual - guess) <= 0.01 * actual
                    for actual, guess in zip(found[12], predicted))
        print(f"per added layer: {per_layer[0]} kernels, {per_layer[1] / 1e9:.3f} GB; 12 layers "
              f"predicted {predicted[0]} kernels, {predicted[1] / 1e9:.3f} GB, compiled "
              f"{found[12][0]}, {found[12][1] / 1e9:.3f} GB: "
              + ("the 2-layer budget extrapolates (within 1%)" if close
                 else "DIFFERENT by over 1%: the 2-layer budget does not say what BERT-Base "
                      "does"))
        return int(not close)
    return 0


if __name__ == "__main__":
    sys.exit(main())
