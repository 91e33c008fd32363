"""The pieces rewritten for fewer passes over GPU memory (issue 43) compute what the plain
versions compute: the bias add and GELU as one step, the query scale folded into its
projection, the gradient norm, finite check and clip reduced across the tree at once.

(Dropout's packed mask: tests/test_dropout.py. The kernels they save: tests/test_aot_gpu.py.)
"""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from bert_jax.models.presets import preset
from bert_jax.models.layers.dense import Dense, add_bias, add_bias_then, gelu
from bert_jax.training import global_reductions


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_bias_then_gelu_matches_the_two_steps_values_and_gradients(dtype):
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    x = jax.random.normal(keys[0], (4, 9, 24)).astype(dtype)
    bias = jax.random.normal(keys[1], (24,))
    upstream = jax.random.normal(keys[2], x.shape).astype(dtype)

    def fused(x, bias):
        return add_bias_then(x, bias, gelu)

    def plain(x, bias):
        return gelu(add_bias(x, bias))

    fused_out, fused_pullback = jax.vjp(fused, x, bias)
    plain_out, plain_pullback = jax.vjp(plain, x, bias)
    # The same operations on the same values: the forward and x's gradient are identical;
    # the bias gradient sums the same per-element gradients in float32 (add_bias's rule).
    np.testing.assert_array_equal(np.asarray(fused_out), np.asarray(plain_out))
    for fused_grad, plain_grad in zip(fused_pullback(upstream), plain_pullback(upstream)):
        np.testing.assert_array_equal(np.asarray(fused_grad), np.asarray(plain_grad))
    assert fused_pullback(upstream)[1].dtype == jnp.float32


def test_a_dense_layer_with_an_activation_keeps_its_parameters_and_values():
    config = preset("tiny")
    x = jax.random.normal(jax.random.PRNGKey(1), (2, 5, config.hidden_dim))
    plain = Dense(config, (32,), ("embed",), ("mlp",))
    fused = Dense(config, (32,), ("embed",), ("mlp",), activation=gelu)
    params = plain.init(jax.random.PRNGKey(2), x)
    assert jax.tree.structure(fused.init(jax.random.PRNGKey(2), x)) == jax.tree.structure(params)
    np.testing.assert_array_equal(np.asarray(fused.apply(params, x)),
                                  np.asarray(gelu(plain.apply(params, x))))


def test_the_output_scale_is_the_scaled_output():
    config = preset("tiny")
    x = jax.random.normal(jax.random.PRNGKey(3), (2, 5, config.hidden_dim))
    plain = Dense(config, (4, 8), ("embed",), ("heads", "kv"))
    params = nn.meta.unbox(plain.init(jax.random.PRNGKey(4), x))
    params["params"]["bias"] = jax.random.normal(jax.random.PRNGKey(5), (4, 8))
    scaled = Dense(config, (4, 8), ("embed",), ("heads", "kv"), output_scale=8 ** -0.5)
    expected = np.asarray(plain.apply(params, x)) * 8 ** -0.5
    # x (W c) + b c against (x W + b) c in float32: a few roundings of values of size ~1.
    np.testing.assert_allclose(np.asarray(scaled.apply(params, x)), expected, rtol=1e-5,
                               atol=1e-6)


def _tree(seed: int) -> dict:
    keys = jax.random.split(jax.random.PRNGKey(seed), 4)
    return {"kernel": jax.random.normal(keys[0], (48, 4, 16)),  # reduced along rows
            "matrix": jax.random.normal(keys[1], (33, 7)),
            "bias": jax.random.normal(keys[2], (7,)),  # joined whole
            "scalar": jax.random.normal(keys[3], ())}


def test_the_global_norm_is_optax_s_to_float32_rounding():
    tree = _tree(0)
    expected = np.sqrt(sum(np.sum(np.asarray(leaf, np.float64) ** 2)
                           for leaf in jax.tree.leaves(tree)))
    # Float32 sums of ~3,500 squares of size ~1 in two orders: within a few float32 steps
    # of the total (~3,500, one step 2.4e-4 there, relative 1.2e-7 after the square root).
    np.testing.assert_allclose(float(global_reductions.global_norm(tree)), expected, rtol=1e-6)
    np.testing.assert_allclose(float(global_reductions.global_norm(tree)),
                               float(optax.tree.norm(tree)), rtol=1e-6)


def test_all_finite_finds_one_bad_element_in_any_leaf():
    assert bool(global_reductions.all_finite(_tree(1)))
    for name, index in (("kernel", (47, 3, 15)), ("bias", (0,)), ("scalar", ())):
        for bad in (np.inf, -np.inf, np.nan):
            tree = _tree(1)
            tree[name] = tree[name].at[index].set(bad)
            assert not bool(global_reductions.all_finite(tree)), (name, bad)


@pytest.mark.parametrize("max_norm", [0.5, 1e3])
def test_the_clip_is_optax_s_clip(max_norm):
    tree = _tree(2)
    clipped, _ = global_reductions.clip_by_global_norm(max_norm).update(tree, optax.EmptyState())
    expected, _ = optax.clip_by_global_norm(max_norm).update(tree, optax.EmptyState())
    for ours, theirs in zip(jax.tree.leaves(clipped), jax.tree.leaves(expected)):
        # The same formula over norms equal to float32 rounding (test above): relative 1e-6.
        np.testing.assert_allclose(np.asarray(ours), np.asarray(theirs), rtol=1e-6)
