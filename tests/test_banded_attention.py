"""A sliding layer's banded attention core (bert_jax/models/layers/banded_attention.py): the
full T x T core's values and gradients at every real token, for every block size, packed rows
and padding, and taken on a CPU where it was measured faster (on a GPU, where it was only
compiled faster, when asked). XLA's fused entry in bands: tests/test_modernbert_kernels.py.
The encoder through the bands against transformers is tests/test_modernbert.py's parity (its
rows take the bands).

Bound: both forms add the same non-zero terms (a hidden key's softmax weight is exactly 0 in
both), in other orders and groupings: softmax sums over at most 2 x window + 1 = 9 keys and
context sums of values ~N(0, 1), so the two differ by a few float32 roundings of numbers of
size ~1 (6e-8 each). atol 1e-6 for values, 1e-5 for gradients (sums over every query that
sees a key, up to 27), leave a tenfold margin.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bert_jax.models.layers import banded_attention
from bert_jax.models.layers.attention import _core
from bert_jax.models.layers.banded_attention import band_block

WINDOW = 4  # tests/modernbert_helpers.py's local_attention of 8, half a side
SEQ_LEN = 27  # not a multiple of any block: the last block runs past the row's end
# tests/modernbert_helpers.py's rows (24 tokens): long enough for the band on a CPU, so the
# parity tests of tests/test_modernbert.py against transformers run the banded core.
PARITY_ROWS = 24


def _inputs(seed=0, batch=3, heads=2, head_dim=8):
    rng = np.random.default_rng(seed)
    query, key, value = (jnp.asarray(rng.standard_normal((batch, SEQ_LEN, heads, head_dim)),
                                     jnp.float32) for _ in range(3))
    # Row 0: one instance, whole; row 1: three packed instances, then padding; row 2: a
    # sequence shorter than the window, then a padding run longer than the window.
    instance_ids = np.zeros((batch, SEQ_LEN), np.int32)
    instance_ids[0] = 1
    instance_ids[1, :20] = np.repeat([1, 2, 3], [6, 9, 5])
    instance_ids[2, :3] = 1
    return query, key, value, jnp.asarray(instance_ids)


def _context(query, key, value, instance_ids, block):
    return _core(query, key, value, instance_ids, 0.0, None, "float32", WINDOW, block)


@pytest.mark.parametrize("block", [2, 4])  # window / 2, window (the CPU's choice)
def test_bands_equal_the_full_core_values_and_gradients_at_real_tokens(block):
    inputs = _inputs()
    real = (np.asarray(inputs[3]) > 0)[..., None, None]  # (B, T, 1, 1)

    def loss(block, query, key, value):
        context = _context(query, key, value, inputs[3], block)
        return jnp.sum(jnp.where(real, jnp.sin(context), 0.0))  # what a loss reads: real tokens

    banded, full = _context(*inputs, block), _context(*inputs, None)
    np.testing.assert_allclose(np.where(real, banded, 0), np.where(real, full, 0), atol=1e-6)
    assert np.all(np.isfinite(banded))  # a padding query with no key in reach: no NaN
    full_grads = jax.jit(jax.grad(lambda *x: loss(None, *x), argnums=(0, 1, 2)))(*inputs[:3])
    band_grads = jax.jit(jax.grad(lambda *x: loss(block, *x), argnums=(0, 1, 2)))(*inputs[:3])
    for banded_grad, full_grad in zip(band_grads, full_grads):
        np.testing.assert_allclose(banded_grad, full_grad, atol=1e-5)


def test_a_blocks_keys_and_band_are_the_window_around_it():
    positions = jnp.arange(10)[None]  # (1, T): each "key" is its own position
    spans = banded_attention._key_spans(positions + 1, window=2, block=2, num_blocks=5)
    # Block i (queries 2i, 2i + 1) sees keys 2i - 2 .. 2i + 3; 0 = outside the row.
    np.testing.assert_array_equal(spans[0], [0, 0, 1, 2, 3, 4])
    np.testing.assert_array_equal(spans[4], [7, 8, 9, 10, 0, 0])
    np.testing.assert_array_equal(banded_attention.band(window=2, block=2),
                                  [[1, 1, 1, 1, 1, 0], [0, 1, 1, 1, 1, 1]])
    with pytest.raises(ValueError, match="must divide 2 x window"):
        banded_attention.banded_rows(*_inputs(), window=WINDOW, block=3)


@pytest.mark.parametrize("seq_len, window, platform, gpu_bands, expected", [
    (1024, 64, "cpu", False, 64),  # ModernBERT-base at 1,024 tokens: blocks of 64, 192 keys
    (256, 64, "cpu", False, 64),  # the shortest rows measured faster in bands (banded_attention.py)
    (255, 64, "cpu", False, None),  # shorter rows: not measured, the full form
    (1024, None, "cpu", False, None),  # a global layer
    (1024, 64, "gpu", False, None),  # a GPU: the full form unless asked (not timed on a GPU)
    (1024, 64, "gpu", True, 64),  # precision.gpu_attention_bands: XLA's attention in bands
    (1024, 64, "cuda", True, 64),
    (1024, 64, "tpu", True, None),  # splash's local mask skips the blocks outside the band
    (PARITY_ROWS, WINDOW, "cpu", False, WINDOW),  # test_modernbert.py's parity with transformers
])
def test_band_block(seq_len, window, platform, gpu_bands, expected):
    assert band_block(seq_len, window, platform, gpu_bands) == expected

