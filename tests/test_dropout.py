"""The model's 16-bit dropout: its keep rate, scaling and independence, counted on many draws."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bert_jax.model import Dropout


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
    np.testing.assert_allclose(y[kept], 2**16 / threshold, rtol=1e-6)
    assert abs(y.mean() - 1.0) < 0.01


def test_both_halves_of_each_draw_are_used_independently():
    # Elements j and j + 64 of a 128-wide row share one 32-bit draw (low and high half).
    y = np.asarray(_apply(0.5, jnp.ones((4096, 128)))) != 0
    first, second = y[:, :64], y[:, 64:]
    assert abs(first.mean() - 0.5) < 0.01 and abs(second.mean() - 0.5) < 0.01
    # Independent halves agree half the time; identical or complementary ones would not.
    assert abs((first == second).mean() - 0.5) < 0.01


def test_different_keys_give_different_masks_and_deterministic_is_identity():
    x = jnp.ones((8, 128, 64))
    assert not np.array_equal(np.asarray(_apply(0.1, x, 0)), np.asarray(_apply(0.1, x, 1)))
    np.testing.assert_array_equal(np.asarray(_apply(0.1, x, deterministic=True)), np.asarray(x))
    np.testing.assert_array_equal(np.asarray(_apply(1.0, x)), np.zeros(x.shape))
