"""The masked-LM decoder over a whole vocabulary on the CPU, the part of a step that is as
wide as the vocabulary: its bias's gradient in both of `add_bias`'s forms, and its three
matrix products by XLA and by torch, side by side in one process.

`--sections bias` (the bias's gradient): the column sum of the output's gradient, (rows,
width) -> (width). XLA hands that sum to YNNPACK on a CPU, and YNNPACK's column sums slow down
sharply past some width (the decoder's bias spans the vocabulary: 30,522 words for BERT,
50,368 for ModernBERT, 128,256 for EuroBERT). Each form is the real `add_bias` gradient
(`jax.vjp` of bert_jax.models.layers.dense.add_bias, jitted) with `WIDE_BIAS` set so that one
form or the other is traced: XLA's sum, or the product with a vector of ones that biases wider
than `dense.WIDE_BIAS` take. The error of each is against numpy's float64 sum. Rows: a
masked-LM step's gathered positions (BERT-Base's 8 x 20 = 160; ModernBERT's 30% of 2 x 1,024 =
616; 2,048 for 8 x 256 rows).

`--sections products` (the decoder's products): the forward x W^T, the input's gradient g W
and the table's gradient g^T x at each row count x hidden 768 x each width, float32, jitted
XLA against torch's matmul (as many threads as cores, OMP_WAIT_POLICY=PASSIVE), alternating,
with each side's GFLOP/s and process CPU / wall (how many cores it kept busy).

Usage: python bench/vocabulary_head.py [--sections bias,products] [--rows 160,616,2048]
       [--widths 8192,16384,24576,30522,50368,128256] [--rounds 7]
"""

import argparse
import os
import statistics
import sys
import time

import numpy as np

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as bench/model_step.py, for torch
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench.host import announce_host  # noqa: E402

SUM_FORM, PRODUCT_FORM = "sum", "product with ones"


def gradient_program(form: str, rows: int, width: int):
    """The jitted bias gradient of `add_bias` at (rows, width), traced in `form`."""
    import jax
    import jax.numpy as jnp
    from bert_jax.models.layers import dense
    saved = dense.WIDE_BIAS
    dense.WIDE_BIAS = width if form == SUM_FORM else width - 1  # read at trace time
    try:
        def bias_gradient(gradient):
            _, vjp = jax.vjp(dense.add_bias, jnp.zeros((rows, width)), jnp.zeros(width))
            return vjp(gradient)[1]
        return jax.jit(bias_gradient).lower(
            jax.ShapeDtypeStruct((rows, width), jnp.float32)).compile()
    finally:
        dense.WIDE_BIAS = saved


def median_ms(program, gradient, rounds: int) -> float:
    program(gradient).block_until_ready()
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        program(gradient).block_until_ready()
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def bias_section(rows_list: list[int], widths: list[int], rounds: int) -> None:
    import jax.numpy as jnp
    from bert_jax.models.layers import dense
    print(f"The bias's gradient. WIDE_BIAS = {dense.WIDE_BIAS}: wider biases take the product "
          f"on a CPU; ms are medians of {rounds} calls, error the largest against float64")
    print(f"{'rows':>6s} {'width':>7s} {'sum ms':>9s} {'error':>8s} {'product ms':>11s} "
          f"{'error':>8s} {'sum/product':>12s}")
    for rows in rows_list:
        for width in widths:
            values = np.random.default_rng(0).standard_normal((rows, width), np.float32)
            exact = values.astype(np.float64).sum(axis=0)
            gradient = jnp.asarray(values)
            figures = []
            for form in (SUM_FORM, PRODUCT_FORM):
                program = gradient_program(form, rows, width)
                error = np.abs(np.asarray(program(gradient), np.float64) - exact).max()
                figures.append((median_ms(program, gradient, rounds), error))
            (sum_ms, sum_error), (product_ms, product_error) = figures
            print(f"{rows:6d} {width:7d} {sum_ms:9.2f} {sum_error:8.1e} {product_ms:11.2f} "
                  f"{product_error:8.1e} {sum_ms / product_ms:11.1f}x", flush=True)


def timed(call, times: list) -> None:
    """Appends (wall, process CPU) seconds of one call of `call` to `times`."""
    start, cpu_start = time.perf_counter(), time.process_time()
    call()
    times.append((time.perf_counter() - start, time.process_time() - cpu_start))


def products_section(rows_list: list[int], widths: list[int], rounds: int,
                     hidden: int = 768) -> None:
    import jax
    import jax.numpy as jnp
    import torch
    torch.set_num_threads(os.cpu_count())
    print(f"\nThe decoder's products, float32, hidden {hidden}: medians of {rounds} alternating "
          f"calls a side; torch threads {torch.get_num_threads()}")
    print(f"{'rows':>6s} {'width':>7s} {'product':16s} {'XLA ms':>8s} {'GFLOP/s':>8s} "
          f"{'CPU/wall':>8s} {'torch ms':>9s} {'GFLOP/s':>8s} {'CPU/wall':>8s}")
    products = {  # name: (XLA's function, torch's, which of (x, W, g) it takes)
        "forward x W^T": (lambda x, w: jnp.einsum("nh,vh->nv", x, w),
                          lambda x, w: x @ w.T, (0, 1)),
        "dx = g W": (lambda g, w: g @ w, lambda g, w: g @ w, (2, 1)),
        "dW = g^T x": (lambda g, x: jnp.einsum("nv,nh->vh", g, x),
                       lambda g, x: g.T @ x, (2, 0)),
    }
    for rows in rows_list:
        for width in widths:
            rng = np.random.default_rng(0)
            arrays = [rng.standard_normal(shape, np.float32)
                      for shape in ((rows, hidden), (width, hidden), (rows, width))]
            gigaflop = 2 * rows * hidden * width / 1e9
            for name, (xla_function, torch_function, which) in products.items():
                xla_arguments = [jnp.asarray(arrays[index]) for index in which]
                torch_arguments = [torch.from_numpy(arrays[index]) for index in which]
                program = jax.jit(xla_function).lower(*xla_arguments).compile()
                sides = {"XLA": lambda: program(*xla_arguments).block_until_ready(),
                         "torch": lambda: torch_function(*torch_arguments)}
                times = {side: [] for side in sides}
                for call in sides.values():
                    call()
                for _ in range(rounds):
                    for side, call in sides.items():
                        timed(call, times[side])
                line = f"{rows:6d} {width:7d} {name:16s}"
                for side in sides:
                    wall = statistics.median(wall for wall, _ in times[side])
                    cpu = statistics.median(cpu for _, cpu in times[side])
                    line += f" {wall * 1e3:8.1f} {gigaflop / wall:8.0f} {cpu / wall:8.2f}"
                print(line, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sections", default="bias,products",
                        help="bias and/or products (comma-separated)")
    parser.add_argument("--rows", default="160,616,2048", help="comma-separated row counts")
    parser.add_argument("--widths", default="8192,16384,24576,30522,50368,128256",
                        help="comma-separated widths (bias and vocabulary sizes)")
    parser.add_argument("--rounds", type=int, default=7, help="timed calls per form or side")
    args = parser.parse_args()
    sections = args.sections.split(",")
    unknown = set(sections) - {"bias", "products"}
    if unknown:
        parser.error(f"--sections: unknown {sorted(unknown)}; expected bias and/or products")
    announce_host()
    rows = [int(n) for n in args.rows.split(",")]
    widths = [int(n) for n in args.widths.split(",")]
    if "bias" in sections:
        bias_section(rows, widths, args.rounds)
    if "products" in sections:
        products_section(rows, widths, args.rounds)

if __name__ == "__main__":
    main()
