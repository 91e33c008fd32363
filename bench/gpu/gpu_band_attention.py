"""A ModernBERT sliding layer's attention core on a GPU, forward and backward, in its three
forms: XLA's attention on the whole T x T with the band as a mask (the default), XLA's
attention in bands (precision.gpu_attention_bands) and the Pallas band kernel
(precision.gpu_band_kernel, bert_jax/models/layers/band_kernel.py).

Each form is the jitted gradient of a loss on the core's context (queries, keys and values
pre-scaled, bf16, 12 heads of 64, 64 tokens a side, ModernBERT-base's), on the same packed
rows (three instances, then padding). First each form's context and gradients are held to
the full form's in float32 (the kernel in IEEE float32, XLA's products at HIGHEST): a form
that differs by more than 1e-4 of the largest figure fails the script (exit 1). Then the
forms are timed in interleaved rounds (bench/timed_rounds.py), each call --steps gradients
and one wait for the device; medians per gradient, and each form's ratio to the full form.
Default shapes: 16 x 1,024 and 2 x 8,192 tokens (ModernBERT's two phases, 16,384 a call).

Usage: python bench/gpu/gpu_band_attention.py [--shapes 16x1024,2x8192] [--rounds 5]
           [--steps 10] [--json-out PATH]
       python bench/gpu/gpu_band_attention.py --smoke   # on the CPU (Pallas' interpreter),
                                                        # 2 x 256, one round: checks the script
"""

import argparse
import json
import os
import statistics
import sys

SMOKE = "--smoke" in sys.argv
os.environ.setdefault("JAX_PLATFORMS", "cpu" if SMOKE else "cuda")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from bench.timed_rounds import time_rounds  # noqa: E402
from bert_jax.models.layers import attention_kernels, band_kernel  # noqa: E402

HEADS, HEAD_SIZE, WINDOW = 12, 64, 64
FORMS = ("full", "bands", "kernel")
AGREEMENT = 1e-4  # of the largest figure, float32 (module docstring)


def core(form: str, interpret: bool):
    """(queries, keys, values, ids) -> context, in `form`: the model's own entry for XLA's
    two forms (attention_kernels.fused_context), the kernel directly, so that a CPU can
    run it interpreted."""
    if form == "kernel":
        return lambda q, k, v, ids: band_kernel.band_attention(q, k, v, ids, WINDOW, WINDOW,
                                                               interpret)
    block = WINDOW if form == "bands" else None
    return lambda q, k, v, ids: attention_kernels.fused_context(
        "xla", q, k, v, ids, window=WINDOW, band_block=block)


def gradient(form: str, interpret: bool):
    attend = core(form, interpret)

    def loss(q, k, v, ids, weights):
        return jnp.sum(attend(q, k, v, ids).astype(jnp.float32) * weights)

    return jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2)))


def inputs(rows: int, seq_len: int, dtype, seed: int = 0):
    rng = np.random.default_rng(seed)
    tensors = [jnp.asarray(rng.normal(size=(rows, seq_len, HEADS, HEAD_SIZE)) / 8, dtype)
               for _ in range(3)]
    ids = np.zeros((rows, seq_len), np.int32)
    ids[:, :seq_len * 2 // 5], ids[:, seq_len * 2 // 5:seq_len * 4 // 5] = 1, 2
    ids[:, seq_len * 4 // 5:seq_len - 9] = 3
    weights = jnp.asarray(rng.normal(size=(rows, seq_len, HEADS, HEAD_SIZE)), jnp.float32)
    return (*tensors, jnp.asarray(ids), weights * (jnp.asarray(ids) > 0)[:, :, None, None])


def agreement(rows: int, seq_len: int, interpret: bool) -> dict[str, float]:
    """Each form's largest difference from the full form, over its loss and gradients,
    relative to the largest figure; float32 inputs."""
    arguments = inputs(rows, seq_len, jnp.float32, seed=1)
    with jax.default_matmul_precision("highest"):
        results = {form: gradient(form, interpret)(*arguments) for form in FORMS}
    expected = jax.tree.leaves(results["full"])
    found = {}
    for form in FORMS[1:]:
        found[form] = max(float(jnp.max(jnp.abs(got - want)) / jnp.max(jnp.abs(want)))
                          for got, want in zip(jax.tree.leaves(results[form]), expected))
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", default="16x1024,2x8192", help="rows x tokens, comma-separated")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds")
    parser.add_argument("--steps", type=int, default=10, help="gradients per timed call")
    parser.add_argument("--json-out", default="", help="write the seconds here")
    parser.add_argument("--smoke", action="store_true", help="on the CPU, 2 x 256, one round")
    arguments = parser.parse_args()
    interpret = jax.default_backend() == "cpu"
    shapes = "2x256" if arguments.smoke else arguments.shapes
    rounds, steps = (1, 1) if arguments.smoke else (arguments.rounds, arguments.steps)
    print(f"device: {jax.devices()[0].device_kind} ({jax.default_backend()}"
          f"{', Pallas interpreted' if interpret else ''})")
    failed, report = False, {}
    for shape in shapes.split(","):
        rows, seq_len = (int(size) for size in shape.split("x"))
        differences = agreement(rows, seq_len, interpret)
        for form, difference in differences.items():
            verdict = "ok" if difference <= AGREEMENT else f"FAILS ({AGREEMENT:g})"
            print(f"{shape} {form}: largest difference from the full form, float32, "
                  f"{difference:.2e} of the largest figure: {verdict}")
            failed |= difference > AGREEMENT
        arguments_bf16 = inputs(rows, seq_len, jnp.bfloat16)
        functions = {form: gradient(form, interpret) for form in FORMS}

        def call(form):
            def run():
                for _ in range(steps):
                    result = functions[form](*arguments_bf16)
                jax.block_until_ready(result)
            return run

        for form in FORMS:
            call(form)()  # compile and warm up
        times = time_rounds({form: call(form) for form in FORMS}, rounds,
                            dict.fromkeys(FORMS, 1))
        medians = {form: statistics.median(t for round_times in times[form]
                                           for t in round_times) / steps for form in FORMS}
        for form in FORMS:
            print(f"{shape} {form:>6}: {medians[form] * 1e3:8.3f} ms a gradient (median of "
                  f"{rounds}), {medians['full'] / medians[form]:.2f}x the full form's speed")
        report[shape] = {"seconds": medians, "differences": differences}
    if arguments.json_out:
        with open(arguments.json_out, "w") as out:
            json.dump(report, out, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
