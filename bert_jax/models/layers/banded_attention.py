"""A sliding-window layer's attention in bands: each block of queries scored against only the
keys its window can reach.

In a sliding layer query q sees keys with |q - k| <= window (visibility.py). The reference
core scores all T x T pairs and hides the far ones: at T = 1,024 with ModernBERT's 64 tokens
a side, 7/8 of that work (scores, softmax and context products, and their gradients) is
hidden. Here a row's queries are cut into blocks of `block` tokens, and block i is scored
against the keys from `window` before its first query to `window` after its last:
block + 2 window keys, which are whole blocks when `block` divides 2 window. Each block and
its keys become a row of their own (B x blocks rows of `block` queries), so the reference's
softmax, dropout and context products run on them unchanged; the band within a block's keys
is one static (block, block + 2 window) mask, and keys beyond either end of the row are
padding (id 0), hidden as all padding is. Two cores take the bands, each where `band_block`
says: the reference core (attention.py), and XLA's fused entry (`attention_kernels`' 'xla',
a GPU's choice for sliding layers in 16 bits).

What differs from the full form is only a query that sees no key at all (a padding token
farther than the window from every real token): its softmax is uniform over the keys
computed, a different set, so its output (which nothing reads: no real query sees a padding
key and no loss reads a padding position) is a different mean. With attention dropout each
visible (query, key) pair still gets one independent draw, but from blocks' masks, not the
full form's: the same distribution, other masks for the same key (ModernBERT's rate is 0).
"""

import jax
import jax.numpy as jnp
import numpy as np

from bert_jax.models.layers.platform import GPU_PLATFORMS
from bert_jax.models.layers.visibility import visible_by_instance

Array = jax.Array

# Where a sliding layer runs in bands: blocks of BAND_BLOCK_WINDOWS windows (one side's
# tokens) of queries, in rows of at least BAND_MIN_WINDOWS windows.
# On a CPU, measured: one sliding layer's core, forward and backward, 2 rows, 12 heads, window
# 64, full T x T -> bands of 64 queries: 256 tokens 17.0 -> 12.9 ms, 384 49.2 -> 39.5, 512
# 88.0 -> 56.4, 1,024 383.5 -> 120.0 ms (load 1.7-2.0); shorter rows were not measured and
# keep the full form.
# On a GPU, opt-in (`precision.gpu_attention_bands`) until a GPU times it beside the full
# form: compiled for an H100 on a CPU, ModernBERT-base's train step, bf16 (XLA's attention;
# cuDNN as jax 0.10.2 calls it has no two-sided window): at 16 x 1,024 the kernels' bound fell
# from 119.8 to 81.9 ms and the temporaries from 34.1 to 22.6 GiB (blocks of 128 queries:
# 82.6 ms), at 2 x 8,192 from 896 to 363 ms and 211 to 87 GiB (docs/gpus.md). TPUs keep
# splash's local mask, whose kernel skips the blocks outside the band itself.
BAND_BLOCK_WINDOWS = 1
BAND_MIN_WINDOWS = 4


def band_block(seq_len, window: int | None, platform: str,
               gpu_bands: bool = False) -> int | None:
    """The query block of a sliding layer's banded core, or None for the full T x T form: on
    a CPU, or a GPU with `gpu_bands` (precision.gpu_attention_bands), rows of at least
    BAND_MIN_WINDOWS windows."""
    banded = platform == "cpu" or (platform in GPU_PLATFORMS and gpu_bands)
    if window is None or not banded or not isinstance(seq_len, (int, np.integer)):
        return None
    return BAND_BLOCK_WINDOWS * window if seq_len >= BAND_MIN_WINDOWS * window else None


def _query_blocks(x: Array, block: int, num_blocks: int) -> Array:
    """(B, T, ...) -> (B x num_blocks, block, ...), zeros after the row's end."""
    padding = [(0, 0), (0, num_blocks * block - x.shape[1])] + [(0, 0)] * (x.ndim - 2)
    return jnp.pad(x, padding).reshape(-1, block, *x.shape[2:])


def _key_spans(x: Array, window: int, block: int, num_blocks: int) -> Array:
    """(B, T, ...) -> (B x num_blocks, block + 2 window, ...): query block i's keys, positions
    i block - window .. (i + 1) block + window - 1, zeros outside the row."""
    span_blocks = 2 * window // block + 1  # key blocks a query block's window touches
    length = (num_blocks + span_blocks - 1) * block
    padding = [(0, 0), (window, length - window - x.shape[1])] + [(0, 0)] * (x.ndim - 2)
    blocks = jnp.pad(x, padding).reshape(x.shape[0], -1, block, *x.shape[2:])  # (B, n + s - 1, b, ...)
    spans = jnp.concatenate([blocks[:, first:first + num_blocks]
                             for first in range(span_blocks)], axis=2)  # (B, n, s b, ...)
    return spans.reshape(-1, span_blocks * block, *x.shape[2:])


def band(window: int, block: int) -> np.ndarray:
    """(block, block + 2 window) bool: query a of a block sees key c of its span iff
    |(a + window) - c| <= window (the key sits `window` tokens before the block's start)."""
    distance = np.arange(block)[:, None] + window - np.arange(block + 2 * window)[None, :]
    return np.abs(distance) <= window


def banded_rows(query: Array, key: Array, value: Array, instance_ids: Array, window: int,
                block: int) -> tuple[Array, Array, Array, Array]:
    """(B, T, nh, hd) queries, keys, values and (B, T) ids as blocks of `block` queries with
    their keys: (queries (B n, block, nh, hd), keys and values (B n, span, nh, hd), visible
    (B n, 1, block, span) bool), n = ceil(T / block), span = block + 2 window."""
    if (2 * window) % block:
        raise ValueError(f"a band's block ({block}) must divide 2 x window ({2 * window})")
    num_blocks = -(-query.shape[1] // block)
    query_ids = _query_blocks(instance_ids, block, num_blocks)  # (B n, block)
    key_ids = _key_spans(instance_ids, window, block, num_blocks)  # (B n, span)
    visible = band(window, block) & visible_by_instance(query_ids[:, :, None],
                                                        key_ids[:, None, :])
    return (_query_blocks(query, block, num_blocks),
            _key_spans(key, window, block, num_blocks),
            _key_spans(value, window, block, num_blocks), visible[:, None])


def in_bands(core, query: Array, key: Array, value: Array, instance_ids: Array, window: int,
             block: int) -> Array:
    """The context (B, T, nh, hd) of a sliding layer computed in bands: `core(queries, keys,
    values, visible)` (the reference core's or XLA's) on `banded_rows`' blocks, which become
    rows of their own, then the blocks back in their rows."""
    query_rows, key_rows, value_rows, visible = banded_rows(query, key, value, instance_ids,
                                                            window, block)
    return unband(core(query_rows, key_rows, value_rows, visible), *query.shape[:2])


def unband(context: Array, batch_size: int, seq_len: int) -> Array:
    """(B n, block, nh, hd) -> (B, T, nh, hd): the blocks back in their rows."""
    return context.reshape(batch_size, -1, *context.shape[2:])[:, :seq_len]
