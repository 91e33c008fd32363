"""The Pallas band kernel (bert_jax/models/layers/band_kernel.py), run by Pallas' interpreter
on this CPU, against attention written out over the whole T x T scores."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bert_jax.models.layers import band_kernel
from bert_jax.models.layers.visibility import visible_by_instance, within_window

EPSILON = float(np.finfo(np.float32).eps)
# Pallas' interpreter on a CPU; Triton on a GPU (bench/gpu/gpu_session.sh runs this file there).
INTERPRET = jax.default_backend() == "cpu"


def full_attention(query, key, value, instance_ids, window):
    """Softmax over every key a query sees (visibility.py's rule within the window), the
    far and hidden keys' scores set to -1e30: the T x T reference, grouped keys repeated."""
    groups = query.shape[2] // key.shape[2]
    key, value = (jnp.repeat(tensor, groups, axis=2) for tensor in (key, value))
    scores = jnp.einsum("bqhd,bkhd->bhqk", query, key)
    visible = (visible_by_instance(instance_ids[:, None, :, None], instance_ids[:, None, None, :])
               & within_window(query.shape[1], window))
    probabilities = jax.nn.softmax(jnp.where(visible, scores, -1e30), axis=-1)
    return jnp.einsum("bhqk,bkhd->bqhd", probabilities, value)


def packed_rows(seq_len):
    """Two rows: three instances then padding, and one instance then padding."""
    ids = np.zeros((2, seq_len), np.int32)
    ids[0, :seq_len * 2 // 5] = 1
    ids[0, seq_len * 2 // 5:seq_len * 3 // 4] = 2
    ids[0, seq_len * 3 // 4:seq_len - 7] = 3
    ids[1, :seq_len * 3 // 4] = 1
    return jnp.asarray(ids)


@pytest.mark.parametrize("seq_len,heads,key_heads,window,block", [
    (200, 4, 4, 16, 16),  # a row that is not whole blocks; ModernBERT's block = window
    (160, 4, 2, 32, 16),  # grouped keys and values; two query blocks a side see a key block
])
def test_the_band_kernel_gives_full_attentions_context_and_gradients(seq_len, heads, key_heads,
                                                                     window, block):
    """Context and the gradients of queries, keys and values at every real token equal the
    full form's, float32. Bound: each is a sum of at most 2 window + 1 terms, reordered by
    the online softmax and its rescalings; a few roundings a term, 8 (2 window + 1) eps
    relative to the largest figure (3.1e-5 at window 16) covers it; measured 7e-7."""
    rng = np.random.default_rng(0)
    query, key, value = (jnp.asarray(rng.normal(size=(2, seq_len, count, 16)), jnp.float32)
                         for count in (heads, key_heads, key_heads))
    instance_ids = packed_rows(seq_len)
    real = (instance_ids > 0)[:, :, None, None]
    weights = jnp.asarray(rng.normal(size=query.shape), jnp.float32) * real  # no loss on padding

    def loss(attend):
        return lambda q, k, v: jnp.sum(attend(q, k, v) * weights)

    kernel = lambda q, k, v: band_kernel.band_attention(  # noqa: E731
        q, k, v, instance_ids, window, block, INTERPRET)
    full = lambda q, k, v: full_attention(q, k, v, instance_ids, window)  # noqa: E731
    bound = 8 * (2 * window + 1) * EPSILON
    expected = full(query, key, value)
    got = kernel(query, key, value)
    scale = float(jnp.max(jnp.abs(expected)))
    np.testing.assert_allclose(jnp.where(real, got, 0), jnp.where(real, expected, 0), rtol=0,
                               atol=bound * scale)
    got_gradients = jax.grad(loss(kernel), argnums=(0, 1, 2))(query, key, value)
    expected_gradients = jax.grad(loss(full), argnums=(0, 1, 2))(query, key, value)
    for got_gradient, expected_gradient in zip(got_gradients, expected_gradients):
        assert got_gradient.shape == expected_gradient.shape
        scale = float(jnp.max(jnp.abs(expected_gradient)))
        np.testing.assert_allclose(got_gradient, expected_gradient, rtol=0, atol=bound * scale)


def test_a_row_of_padding_gives_finite_figures():
    """A filler row (every id 0) sees no key: its context is finite (the mean of the values its
    bands computed), so a loss that weighs it 0 stays finite too."""
    rng = np.random.default_rng(1)
    query, key, value = (jnp.asarray(rng.normal(size=(1, 64, 2, 16)), jnp.float32)
                         for _ in range(3))
    instance_ids = jnp.zeros((1, 64), jnp.int32)

    def loss(q, k, v):
        return jnp.sum(band_kernel.band_attention(q, k, v, instance_ids, 16, 16, INTERPRET) * 0.0)

    assert bool(jnp.all(jnp.isfinite(band_kernel.band_attention(
        query, key, value, instance_ids, 16, 16, INTERPRET))))
    assert all(bool(jnp.all(jnp.isfinite(gradient)))
               for gradient in jax.grad(loss, argnums=(0, 1, 2))(query, key, value))


def test_the_band_kernel_refuses_tiles_triton_cannot_make():
    """Triton's tiles are powers of two, and a block must divide 2 window to tile the band."""
    query = jnp.zeros((1, 96, 2, 16))
    ids = jnp.ones((1, 96), jnp.int32)
    with pytest.raises(ValueError, match="power-of-two block \\(24\\)"):
        band_kernel.band_attention(query, query, query, ids, 24, 24, INTERPRET)
    with pytest.raises(ValueError, match="power-of-two head size \\(12\\)"):
        band_kernel.band_attention(query[..., :12], query[..., :12], query[..., :12], ids, 16,
                                   16, INTERPRET)


def test_the_census_reads_the_kernels_flops_from_their_grid():
    """compiled_flops from a Triton call's name, grid and queries: ModernBERT's band (64 a
    side, blocks of 64) over 2 rows of 1,024 tokens, 12 heads of 64: 3 key blocks a query
    block, 2 products forward and 7 backward, each 2 x 64 x 64 x 64 a program; another
    Pallas kernel is not counted here."""
    programs, queries = 16 * 2 * 12, [2, 1024, 12, 64]
    product = 2.0 * 64 * 64 * 64
    forward, backward = (band_kernel.kernel_name(direction, 3)
                         for direction in ("forward", "backward"))
    assert band_kernel.compiled_flops(forward, programs, queries) == 2 * 3 * product * programs
    assert band_kernel.compiled_flops(backward, programs, queries) == 7 * 3 * product * programs
    assert band_kernel.compiled_flops("mha_forward", programs, queries) is None


def test_a_model_the_kernel_cannot_tile_is_refused_by_its_setting():
    """A sliding layer with heads of 48 under precision.gpu_band_kernel: the error names the
    setting and what to do, before anything is compiled."""
    from bert_jax.errors import UserError
    from bert_jax.models.layers import attention_kernels

    query = jnp.zeros((1, 256, 2, 48), jnp.bfloat16)
    with pytest.raises(UserError, match="precision.gpu_band_kernel: .*head size \\(48\\).*"
                                        "set it to false"):
        attention_kernels.fused_context("xla", query, query, query, jnp.ones((1, 256), jnp.int32),
                                        window=64, band_block=64, band_kernel=True)
