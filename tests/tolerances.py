"""Bounds for float comparisons, from the arithmetic instead of a number that passed once.

float32 keeps 24 significant bits: a value x is stored to within half a step of |x| *
EPSILON32 (2**-23 = 1.19e-7), and every operation rounds again. A result computed with k
roundings whose terms are at most S in magnitude (a dot product's largest partial sum, a
network's largest activation) is off by at most about k * S * EPSILON32, and two ways of
computing it (ours and transformers', XLA's fused order and numpy's, one CPU's kernels and
another's) can differ by that on each side. So a test states its bound as `steps` float32
steps of a `scale`: the number of roundings it allows and the magnitude they are steps of,
both named where the test is, and a machine that sums in another order still passes (a
fixed 1e-5 on MiniLM's span logits, which reach 8.3, failed by 1.19e-5 on another x86 CPU:
12 steps of 8.3, where this one measures 8).

Quantities computed in float64 on both sides (metrics, host-side means) are compared with
pytest.approx's default relative 1e-6: float64 steps are 2**-52, so that is some 10**9 of
them, a bound any two orders of summation keep.
"""

import numpy as np

EPSILON32 = float(np.finfo(np.float32).eps)  # 2**-23: one float32 step at magnitude 1
# A BERT encoder's outputs (hidden states, logits, probabilities) against another
# implementation's (transformers, TensorFlow) or another batching or layout of ours: every
# layer rounds each activation in its matmuls (sums of hidden_dim to mlp_dim products),
# softmax and LayerNorms, and the residual stream carries the errors on. Measured here, the
# widest of every test that uses it: 12.5 steps of 1 (MiniLM's attention probabilities
# against transformers'), 8 of the logits' scale (MiniLM's span logits; 12 on another x86
# CPU). 64 leaves room for kernels that block their sums otherwise, while the mistakes the
# tests are for (a transposed kernel, a missed mask) move outputs by a fair part of their
# scale: millions of steps.
ENCODER_STEPS = 64


def float32_steps(steps: float, *scales) -> float:
    """`steps` float32 steps of the largest magnitude in `scales` (numbers or arrays): an
    absolute bound for values computed in float32 with terms of that size."""
    scale = max(float(np.max(np.abs(np.asarray(value, np.float64)))) for value in scales)
    return steps * EPSILON32 * scale


def assert_close(actual, expected, steps: float, scale=None, err_msg: str = "") -> None:
    """Every element of `actual` within `steps` float32 steps of `scale` (default: the largest
    magnitude in `expected`) of `expected`."""
    expected = np.asarray(expected, np.float64)
    bound = float32_steps(steps, expected if scale is None else scale)
    np.testing.assert_allclose(np.asarray(actual, np.float64), expected, rtol=0, atol=bound,
                               err_msg=f"{err_msg} (bound: {steps} float32 steps = {bound:.3g})")
