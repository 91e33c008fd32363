"""One dense layer's gradients on the CPU in both of `Dense`'s forms, side by side in one
process: JAX's rule for the product (the kernel's gradient as the output's gradient times the
input, transposed after) and `dense.inputs_first_product` (the input times the output's
gradient, in the kernel's order), which `Dense` takes on a CPU where a kernel has at least as
many outputs as inputs (bert_jax/models/layers/dense.py says why).

Each shape is rows x inputs -> outputs: the input (rows / 128, 128, inputs), a kernel
(inputs, outputs), and the loss sum(tanh(x W) r) for a fixed random r, so the program holds
the forward product, its activation and both gradients, as a layer's step does. Each form is
jitted; the two alternate for `--rounds` calls each, and the table gives each one's median,
JAX's rule / the inputs-first form, and whether the gradients came out the same to the bit
(with oneDNN's products they do; XLA's own may sum in another order).

Usage: python bench/kernel_gradient.py [--dtypes float32,bfloat16] [--rounds 11]
       [--shapes 2048x768x768,2048x1152x768,1024x768x3072,1024x3072x768,616x768x768,1024x768x2304]
       (BERT_JAX_CPU_MATMUL=xla: XLA's own products, as on CPUs without AMX)
"""

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench.host import announce_host  # noqa: E402

SHAPES = "2048x768x768,2048x1152x768,1024x768x3072,1024x3072x768,616x768x768,1024x768x2304"


def gradient_program(product):
    """The jitted gradients (input's, kernel's) of sum(tanh(product(x, W)) r)."""
    import jax
    import jax.numpy as jnp

    def loss(x, kernel, r):
        return jnp.sum(jnp.tanh(product(x, kernel, 1)).astype(jnp.float32) * r)
    return jax.jit(jax.grad(loss, argnums=(0, 1)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default=SHAPES, help="rows x inputs x outputs, comma-separated")
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--rounds", type=int, default=11, help="timed calls a form")
    args = parser.parse_args()
    announce_host()
    import jax
    import jax.numpy as jnp
    import numpy as np
    from bert_jax.models.layers import dense
    forms = {"JAX's rule": gradient_program(dense.kernel_product),
             "inputs first": gradient_program(dense.inputs_first_product)}
    print(f"medians of {args.rounds} alternating calls a form, ms")
    print(f"{'dtype':9s} {'rows x inputs -> outputs':26s} {'JAX rule':>9s} {'inputs 1st':>10s} "
          f"{'ratio':>7s}  same to the bit")
    rng = np.random.default_rng(0)
    for dtype in args.dtypes.split(","):
        for shape in args.shapes.split(","):
            rows, inputs, outputs = (int(size) for size in shape.split("x"))
            x = jnp.asarray(rng.standard_normal((rows // 128, 128, inputs), np.float32), dtype)
            kernel = jnp.asarray(rng.standard_normal((inputs, outputs), np.float32) / 50, dtype)
            r = jnp.asarray(rng.standard_normal((rows // 128, 128, outputs), np.float32))
            results = {name: program(x, kernel, r) for name, program in forms.items()}
            same = all(bool(jnp.array_equal(left, right)) for left, right in zip(*results.values()))
            times = {name: [] for name in forms}
            for _ in range(args.rounds):
                for name, program in forms.items():
                    start = time.perf_counter()
                    jax.block_until_ready(program(x, kernel, r))
                    times[name].append(time.perf_counter() - start)
            rule, first = (1e3 * statistics.median(times[name]) for name in forms)
            print(f"{dtype:9s} {f'{rows:,} x {inputs:,} -> {outputs:,}':26s} {rule:9.2f} "
                  f"{first:10.2f} {rule / first:6.2f}x  {'yes' if same else 'no'}", flush=True)


if __name__ == "__main__":
    main()
