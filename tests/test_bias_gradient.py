"""A bias's gradient, the column sum of its output's gradient (bert_jax/models/layers/dense.py):
on a CPU, biases wider than `WIDE_BIAS` (the masked-LM decoder's, over the vocabulary) sum
their rows as a product with ones, which XLA's CPU reduction library runs 10-70x slower as
a sum at those widths (bench/vocabulary_head.py); everywhere else, and for narrower biases, a
float32 sum."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from aot_helpers import tpu_abstract_mesh

from bert_jax.models.layers import dense

WIDE = dense.WIDE_BIAS + 1


def bias_gradient(gradient: jax.Array, width: int) -> jax.Array:
    _, pullback = jax.vjp(dense.add_bias, jnp.zeros(gradient.shape, gradient.dtype),
                          jnp.zeros(width))
    return pullback(gradient)[1]


def primitives(gradient_shape: tuple, width: int) -> set[str]:
    jaxpr = jax.make_jaxpr(bias_gradient, static_argnums=1)(
        jax.ShapeDtypeStruct(gradient_shape, jnp.float32), width)
    return {equation.primitive.name for equation in jaxpr.jaxpr.eqns}


def test_a_wide_bias_sums_its_gradient_as_a_product_on_the_cpu():
    assert jax.default_backend() == "cpu"
    assert "dot_general" in primitives((2, 3, WIDE), WIDE)
    assert "reduce_sum" not in primitives((2, 3, WIDE), WIDE)
    narrow = dense.WIDE_BIAS
    assert "reduce_sum" in primitives((2, 3, narrow), narrow)
    assert "dot_general" not in primitives((2, 3, narrow), narrow)


def test_a_wide_bias_keeps_the_sum_where_aot_traces_for_a_tpu():
    # Traced for the CPU first, in the same process, as `aot` on a CPU host may: the TPU
    # trace must not reuse the CPU's backward rule.
    assert "dot_general" in primitives((2, 3, WIDE), WIDE)
    with jax.sharding.use_abstract_mesh(tpu_abstract_mesh()):
        assert "reduce_sum" in primitives((2, 3, WIDE), WIDE)
        assert "dot_general" not in primitives((2, 3, WIDE), WIDE)


def test_the_compiled_cpu_program_keeps_the_product():
    # XLA could turn a product with ones back into the slow reduction; it must not.
    text = jax.jit(bias_gradient, static_argnums=1).lower(
        jax.ShapeDtypeStruct((2, 3, WIDE), jnp.float32), WIDE).compile().as_text()
    assert "dot" in text
    assert "reduce(" not in text


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
@pytest.mark.parametrize("rows, width", [((4, 154), 50368), ((3, 7), dense.WIDE_BIAS)],
                         ids=["wide, ModernBERT's vocabulary", "narrow"])
def test_the_bias_gradient_is_the_float32_column_sum(dtype, rows, width):
    values = jax.random.normal(jax.random.PRNGKey(0), (*rows, width)).astype(dtype)
    result = bias_gradient(values, width)
    assert result.dtype == jnp.float32 and result.shape == (width,)
    terms = np.asarray(values.astype(jnp.float32), np.float64).reshape(-1, width)
    exact = terms.sum(axis=0)
    # Any order of n float32 additions of exact terms (a bf16 value is exact in float32, and
    # so is its product with 1) errs by at most (n - 1) u sum|x| with u = 2^-24, plus the last
    # rounding (Higham, Accuracy and Stability of Numerical Algorithms, 4.2): a bound of the
    # arithmetic, not of the host's kernel.
    n, unit = terms.shape[0], 2.0 ** -24
    bound = (n - 1) * unit * np.abs(terms).sum(axis=0) + unit * np.abs(exact)
    error = np.abs(np.asarray(result, np.float64) - exact)
    assert np.all(error <= bound), float(np.max(error / bound))
