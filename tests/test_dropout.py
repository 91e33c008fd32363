"""The model's 16-bit dropout: its keep rate, scaling and independence, counted on many draws."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bert_jax import sharding
from bert_jax.models.layers.dropout import Dropout, dropout, keep_bits, random_quarters, unpack


def _apply(rate, x, seed=0, deterministic=False):
    return Dropout(rate).apply({}, x, deterministic, rngs={"dropout": jax.random.PRNGKey(seed)})


@pytest.mark.parametrize("rate", [0.1, 0.5])
def test_keeps_the_expected_fraction_scaled_to_stay_unbiased(rate):
    x = jnp.ones((16, 128, 257))  # an odd last axis exercises the unpaired half
    y = np.asarray(_apply(rate, x))
    threshold = round((1 - rate) * 2**16)
    kept = y != 0
    # 526k draws: the kept fraction's standard deviation is under 0.0007.
    assert abs(kept.mean() - threshold / 2**16) < 0.004
    # 1 / keep-probability in float32 against float64: one rounding, half a step of it;
    # 1e-6 relative is 8 steps.
    np.testing.assert_allclose(y[kept], 2**16 / threshold, rtol=1e-6)
    assert abs(y.mean() - 1.0) < 0.01


def test_the_four_quarters_of_each_block_are_used_independently():
    # Elements 4k, 4k + 1, 4k + 2 and 4k + 3 of a row share one threefry block.
    y = np.asarray(_apply(0.5, jnp.ones((4096, 128)))) != 0
    quarters = [y[:, index::4] for index in range(4)]
    for first in range(4):
        assert abs(quarters[first].mean() - 0.5) < 0.01
        for second in range(first + 1, 4):
            # Independent quarters agree half the time; identical or complementary ones
            # would not.
            assert abs((quarters[first] == quarters[second]).mean() - 0.5) < 0.01
    # Rows draw from their own counters.
    assert abs((y[:-1] == y[1:]).mean() - 0.5) < 0.01


@pytest.mark.parametrize("shape", [(5, 3, 257), (4, 768), (13,), (2, 7, 9, 16)])
def test_the_packed_mask_holds_the_verdict_on_each_elements_own_numbers(shape):
    key, threshold = jax.random.PRNGKey(3), 30000
    numbers = np.asarray(random_quarters(key, shape))
    assert numbers.shape == shape and numbers.max() < 2**16
    packed = keep_bits(key, shape, threshold)
    # One bit per element, whole bytes per row.
    assert packed.dtype == jnp.uint8 and packed.shape == (*shape[:-1], -(-shape[-1] // 8))
    np.testing.assert_array_equal(np.asarray(unpack(packed, shape)), numbers < threshold)


def test_the_gradient_is_the_incoming_one_under_the_same_mask_and_scale():
    x = jax.random.normal(jax.random.PRNGKey(0), (8, 33, 40))
    key, rate = jax.random.PRNGKey(5), 0.25
    upstream = jax.random.normal(jax.random.PRNGKey(1), x.shape)
    output, pullback = jax.vjp(lambda x: dropout(x, rate, key), x)
    (gradient,) = pullback(upstream)
    kept = np.asarray(output) != 0  # x is never exactly 0 here
    scale = 2**16 / round(0.75 * 2**16)
    # x * scale and upstream * scale, rounded once each (float32).
    np.testing.assert_array_equal(np.asarray(gradient),
                                  np.where(kept, np.asarray(upstream) * np.float32(scale), 0))
    np.testing.assert_array_equal(np.asarray(output),
                                  np.where(kept, np.asarray(x) * np.float32(scale), 0))


def test_the_draw_is_the_same_when_the_batch_is_split_over_devices():
    mesh = sharding.make_mesh(devices=jax.devices()[:8])
    x = jnp.ones((16, 12, 40))
    key = jax.random.PRNGKey(3)
    draw = jax.jit(lambda x: dropout(x, 0.1, key))
    split = jax.device_put(x, sharding.batch_sharding(mesh, x.ndim))
    np.testing.assert_array_equal(np.asarray(draw(split)), np.asarray(draw(x)))
    # One-dimensional inputs and typed keys work too.
    assert random_quarters(jax.random.key(0), (5,)).shape == (5,)


def test_different_keys_give_different_masks_and_deterministic_is_identity():
    x = jnp.ones((8, 128, 64))
    assert not np.array_equal(np.asarray(_apply(0.1, x, 0)), np.asarray(_apply(0.1, x, 1)))
    np.testing.assert_array_equal(np.asarray(_apply(0.1, x, deterministic=True)), np.asarray(x))
    np.testing.assert_array_equal(np.asarray(_apply(1.0, x)), np.zeros(x.shape))
