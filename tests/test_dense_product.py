"""Dense's product on a CPU (bert_jax/models/layers/dense.py): where a kernel has at least as
many outputs as inputs, its gradient is taken as the inputs times the output's gradient
(`inputs_first_product`), which XLA's CPU compiler runs without copying the larger operand
out transposed. The gradients are the same numbers, in another order of operands."""

import contextlib

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from aot_helpers import tpu_abstract_mesh
from tolerances import ENCODER_STEPS, EPSILON32, assert_close

from bert_jax import cpu_matmul
from bert_jax.models.layers import dense

CONFIG = type("Config", (), {"initializer_std": 0.02, "initializer_cutoff": 2.0})()


def _exact_gradients(x, kernel, gradient, num_inputs):
    """float64 numpy: the input's and the kernel's gradients, and for each entry the sum of
    its terms' magnitudes with their count (what a float32 sum of them can be off by)."""
    x, kernel, gradient = (np.asarray(a, np.float64) for a in (x, kernel, gradient))
    rows = x.shape[:x.ndim - num_inputs]
    flat_x = x.reshape(int(np.prod(rows)), -1)
    flat_kernel = kernel.reshape(flat_x.shape[1], -1)
    flat_gradient = gradient.reshape(flat_x.shape[0], -1)
    x_gradient = flat_gradient @ flat_kernel.T
    kernel_gradient = flat_x.T @ flat_gradient
    x_magnitudes = np.abs(flat_gradient) @ np.abs(flat_kernel.T)
    kernel_magnitudes = np.abs(flat_x.T) @ np.abs(flat_gradient)
    return [(x_gradient.reshape(x.shape), x_magnitudes.reshape(x.shape), flat_kernel.shape[1]),
            (kernel_gradient.reshape(kernel.shape), kernel_magnitudes.reshape(kernel.shape),
             flat_x.shape[0])]


@pytest.mark.parametrize("x_shape, kernel_shape, num_inputs", [
    ((2, 48, 16), (16, 3, 4, 8), 1),  # a fused QKV projection: (inputs, 3, heads, head size)
    ((2, 48, 16), (16, 2, 24), 1),  # a GeGLU input projection
    ((3, 40, 4, 8), (4, 8, 32), 2),  # attention's output projection over (heads, head size)
    ((96, 32), (32, 32), 1),  # square
])
@pytest.mark.parametrize("options", ["default", "onednn"])
def test_inputs_first_gradients_are_within_a_float32_sums_bound_of_float64(
        x_shape, kernel_shape, num_inputs, options):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(x_shape).astype(np.float32)
    kernel = (rng.standard_normal(kernel_shape) / 4).astype(np.float32)
    rows = x_shape[:len(x_shape) - num_inputs]
    gradient = rng.standard_normal(rows + kernel_shape[num_inputs:]).astype(np.float32)

    def gradients(x, kernel, gradient):
        _, backward = jax.vjp(lambda x, kernel: dense.inputs_first_product(
            x, kernel, num_inputs), x, kernel)
        return backward(gradient)

    compiler_options = {"default": cpu_matmul.XLA_DEFAULT_OPTIONS,
                        "onednn": cpu_matmul.ONEDNN_OPTIONS}[options]
    compiled = jax.jit(gradients).lower(x, kernel, gradient).compile(
        compiler_options=compiler_options)
    for actual, (expected, magnitudes, terms) in zip(
            compiled(x, kernel, gradient), _exact_gradients(x, kernel, gradient, num_inputs)):
        assert actual.shape == expected.shape
        # Each entry is a float32 sum of `terms` products: in any order of summation it is
        # off by at most terms x (half a step) of the sum of its terms' magnitudes, plus the
        # product's own rounding; a wrong axis or a transposed operand is off by the whole.
        bound = (terms + 1) * EPSILON32 / 2 * magnitudes
        error = np.abs(np.asarray(actual, np.float64) - expected)
        assert np.all(error <= bound), float(np.max(error - bound))


def _uses_inputs_first(features, inputs, platform_mesh=None):
    layer = dense.Dense(CONFIG, features, ("embed",), ("mlp",) * len(features),
                        use_bias=False)  # the bias add is a custom_vjp of its own
    x = jnp.ones((2, 4, inputs), jnp.float32)
    params = layer.init(jax.random.PRNGKey(0), x)
    platform = (contextlib.nullcontext() if platform_mesh is None
                else jax.sharding.use_abstract_mesh(platform_mesh))
    with platform:
        return "custom_vjp_call" in str(jax.make_jaxpr(layer.apply)(params, x))


def test_dense_takes_the_inputs_first_form_on_a_cpu_where_outputs_are_no_fewer():
    assert _uses_inputs_first((3, 8), 16)  # 24 outputs of 16 inputs: the QKV's shape
    assert _uses_inputs_first((16,), 16)  # square
    # More inputs than outputs: the copy would be of the inputs, the larger; JAX's rule.
    assert not _uses_inputs_first((8,), 16)
    # A TPU (or GPU) reads either operand transposed without a copy: JAX's rule everywhere.
    assert not _uses_inputs_first((3, 8), 16, tpu_abstract_mesh())


def test_dense_gradients_are_the_same_either_form_in_a_layer(monkeypatch):
    """Through `Dense` (its bias, its activation, its output scale) the inputs-first form
    gives JAX's rule's gradients: what the form changes is only which operand comes first."""
    layer = dense.Dense(CONFIG, (3, 8), ("embed",), ("heads", "kv"), activation=dense.gelu,
                        output_scale=0.5)
    x = jax.random.normal(jax.random.PRNGKey(1), (2, 8, 16))
    params = nn.meta.unbox(layer.init(jax.random.PRNGKey(0), x))

    def loss(params, x):
        return jnp.sum(jnp.sin(layer.apply(params, x)))

    actual = jax.grad(loss, argnums=(0, 1))(params, x)
    monkeypatch.setattr(dense, "inputs_first_product", dense.kernel_product)
    expected = jax.grad(loss, argnums=(0, 1))(params, x)
    for (path, left), right in zip(jax.tree_util.tree_leaves_with_path(actual),
                                   jax.tree.leaves(expected)):
        # One product's sums (16 or 24 terms) in another order: well within the encoder's
        # bound for another kernel's order of summation (tolerances.ENCODER_STEPS).
        assert_close(left, right, ENCODER_STEPS, err_msg=jax.tree_util.keystr(path))


PROJECTIONS = (("query", 0.125), ("key", 1.0), ("value", 1.0))  # 0.125: scaled exactly


class _Projections(nn.Module):
    """Attention's three projections of one input, joined into one product or each apart."""
    joined: bool

    @nn.compact
    def __call__(self, x):
        layers = [dense.Dense(CONFIG, (3, 8), ("embed",), ("heads", "kv"), name=name,
                              output_scale=scale) for name, scale in PROJECTIONS]
        if self.joined:
            return dense.joined_projections(x, layers)
        return [layer(x) for layer in layers]


def test_joined_projections_keep_each_layer_s_parameters():
    """Joining is how the step multiplies, not what it stores: the same parameters, under
    the same names, initialised alike, so checkpoints and conversions cannot tell."""
    x = jnp.ones((2, 4, 16), jnp.float32)
    apart = _Projections(joined=False).init(jax.random.PRNGKey(0), x)
    joined = _Projections(joined=True).init(jax.random.PRNGKey(0), x)
    assert jax.tree.structure(apart) == jax.tree.structure(joined)
    for left, right in zip(jax.tree.leaves(apart), jax.tree.leaves(joined)):
        np.testing.assert_array_equal(left, right)


def test_joined_projections_and_their_gradients_are_within_a_float32_sums_bound_of_float64():
    """Each output, the input's gradient, each kernel's and each bias's against float64
    numpy: a projection's output sums 16 products and its bias, the input's gradient sums
    the three projections' 3 x 24 products, a kernel's and a bias's gradient sum the 2 x 48
    rows. A projection multiplied by another's kernel, or a gradient sent to the wrong one,
    is off by the whole."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 48, 16)).astype(np.float32)
    params = nn.meta.unbox(_Projections(joined=True).init(jax.random.PRNGKey(0), x))
    params = jax.tree.map(lambda leaf: rng.standard_normal(leaf.shape).astype(np.float32) / 4,
                          params)  # biases too, not their initial zeros
    cotangents = [rng.standard_normal((2, 48, 3, 8)).astype(np.float32) for _ in PROJECTIONS]
    outputs, backward = jax.vjp(
        lambda params, x: _Projections(joined=True).apply(params, x), params, x)
    parameter_gradients, x_gradient = backward(cotangents)

    layers = params["params"]
    kernel = np.stack([np.asarray(layers[name]["kernel"], np.float64) * scale
                       for name, scale in PROJECTIONS], axis=1)  # (16, 3 projections, 3, 8)
    bias = np.stack([np.asarray(layers[name]["bias"], np.float64) * scale
                     for name, scale in PROJECTIONS])
    gradient = np.stack(cotangents, axis=2)  # (2, 48, 3 projections, 3, 8)
    x64 = np.asarray(x, np.float64)
    expected = np.einsum("btd,dpho->btpho", x64, kernel) + bias
    magnitudes = np.einsum("btd,dpho->btpho", np.abs(x64), np.abs(kernel)) + np.abs(bias)
    (x_expected, x_magnitudes, x_terms), (kernel_expected, kernel_magnitudes, rows) = (
        _exact_gradients(x, kernel, gradient, 1))
    bias_expected = gradient.sum(axis=(0, 1), dtype=np.float64)
    bias_magnitudes = np.abs(gradient).sum(axis=(0, 1), dtype=np.float64)

    def within(actual, expected, magnitudes, terms, what):
        # A float32 sum of `terms` terms is off by at most terms x (half a step) of the sum
        # of their magnitudes, in any order, plus the products' own roundings.
        bound = (terms + 1) * EPSILON32 / 2 * magnitudes
        error = np.abs(np.asarray(actual, np.float64) - expected)
        assert np.all(error <= bound), (what, float(np.max(error - bound)))

    for index, (name, scale) in enumerate(PROJECTIONS):
        within(outputs[index], expected[:, :, index], magnitudes[:, :, index], 16 + 1, name)
        # The stored kernel and bias are multiplied by the scale (a power of 2, so exactly):
        # their gradients are the scaled ones' times it.
        within(np.asarray(parameter_gradients["params"][name]["kernel"]) / scale,
               kernel_expected[:, index], kernel_magnitudes[:, index], rows, name + " kernel")
        within(np.asarray(parameter_gradients["params"][name]["bias"]) / scale,
               bias_expected[index], bias_magnitudes[index], rows, name + " bias")
    within(x_gradient, x_expected, x_magnitudes, x_terms, "input")


def test_precision_projections_chooses_the_form_and_refuses_a_typo():
    """auto keeps the projections apart (no GPU has timed the joined form); joined and apart
    hold on any platform, so that a GPU session can time the one beside the other."""
    from bert_jax.errors import UserError
    from bert_jax.models.config import Precision

    assert not dense.joins_projections(Precision())
    assert dense.joins_projections(Precision(projections="joined"))
    assert not dense.joins_projections(Precision(projections="apart"))
    with pytest.raises(UserError, match=r"precision.projections must be one of \['auto', "
                                        r"'joined', 'apart'\], got 'join'"):
        Precision(projections="join")
