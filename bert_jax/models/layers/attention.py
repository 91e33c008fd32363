"""The attention core: softmax(Q K^T + mask) V with dropout on the probabilities.

The core takes per-token instance ids (B, T) int32 rather than a precomputed bias: 0 is
padding, 1..N say which instance of a packed row a token belongs to (an unpacked row's ids
are its input mask). Key k is visible to query q iff ids[k] > 0 and (ids[q] == ids[k] or
ids[q] == 0): attention never crosses instances, and a padding query attends to every real
key as it always has, so unpacked outputs (padding positions included) are unchanged. The
mask is built inside the core from the ids, so a chunk carries (rows, T) ids, not a (T, T)
bias, and fused kernels take the same ids as segment ids.

On a CPU the (batch, heads, T, T) scores of long windows do not fit in cache: at 32 x 256
tokens with 12 heads each of the core's passes (scores, softmax, dropout, context, and
their gradients) streams 100 MB through memory, and a MiniLM step spends more time there
than in its dense layers, which do 10x the arithmetic (bench/profile_step.py --task qa).
So on a CPU, windows of 160 tokens or more go through the core a few rows at a time
(`jax.lax.map`), each chunk's scores staying in cache, and the backward pass recomputes a
chunk's scores instead of storing them (as memory-efficient attention does). Other
backends, and short windows, keep the plain form: there it is as fast or faster.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from bert_jax.models.config import Precision
from bert_jax.errors import UserError
from bert_jax.models.layers import attention_kernels, banded_attention
from bert_jax.models.layers.platform import GPU_PLATFORMS, traced_platform
from bert_jax.models.layers.visibility import visible_keys
from bert_jax.models.layers.dropout import dropout

Array = jax.Array

# Automatic chunking (`Precision.attention_chunk_rows = -1`): on a CPU, from this many
# tokens on, this many rows per chunk and device. Forward and backward of one MiniLM
# layer's core (12 heads, dropout on), batch 32, whole batch -> chunks of 2 rows: 160
# tokens 108 -> 51 ms, 192 tokens 161 -> 81 ms, 256 tokens 256 -> 151 ms (chunks of 4:
# 209, of 1: 244), 384 tokens (batch 16) 294 -> 199 ms; at 128 tokens 59 ms whole and
# 64-100 ms in chunks of 1-16 rows.
AUTOMATIC_MIN_TOKENS = 160
AUTOMATIC_ROWS = 2


def attention_probabilities(query: Array, key: Array, instance_ids: Array,
                            window: int | None = None) -> Array:
    """softmax(Q K^T + mask) in float32, (B, nh, T, T), from (B, T, nh, hd) inputs, (B, T)
    instance ids and, for a sliding-window layer, its `window` (visibility.py)."""
    return masked_probabilities(query, key, visible_keys(instance_ids, window))


def masked_probabilities(query: Array, key: Array, visible: Array) -> Array:
    """softmax(Q K^T + mask) in float32, (B, nh, Tq, Tk), of (B, Tq, nh, hd) queries,
    (B, Tk, nkv, hd) keys (nkv divides nh: grouped-query attention) and which keys each
    query sees, (B, 1, Tq, Tk) bool."""
    scores = _scores(query, key)
    # Hidden keys get a large negative bias, so their softmax weight is exactly zero.
    bias = jnp.where(visible, 0.0, jnp.finfo(jnp.float32).min)
    # Softmax in float32: bf16 logits lose the small differences attention depends on.
    return jax.nn.softmax(scores.astype(jnp.float32) + bias, axis=-1)


def attend(probabilities: Array, value: Array, rate: float, dropout_key: Array | None,
           dtype: str) -> Array:
    """The context (B, T, nh, hd): dropped-out probabilities (B, nh, Tq, Tk) times the
    values (B, Tk, nkv, hd), each key/value head serving nh / nkv query heads."""
    if dropout_key is not None:
        probabilities = dropout(probabilities, rate, dropout_key)
    probabilities = probabilities.astype(dtype)
    batch_size, num_heads, query_len, key_len = probabilities.shape
    num_kv_heads = value.shape[2]
    if num_kv_heads == num_heads:
        return jnp.einsum("bhqk,bkhd->bqhd", probabilities, value)
    grouped = probabilities.reshape(batch_size, num_kv_heads, num_heads // num_kv_heads,
                                    query_len, key_len)  # (B, nkv, g, Tq, Tk)
    context = jnp.einsum("bngqk,bknd->bqngd", grouped, value)  # (B, Tq, nkv, g, hd)
    return context.reshape(batch_size, query_len, num_heads, value.shape[3])


def _scores(query: Array, key: Array) -> Array:
    """Q K^T, (B, nh, Tq, Tk), of (B, Tq, nh, hd) queries and (B, Tk, nkv, hd) keys: query
    head h reads key head h // (nh / nkv), as transformers' `repeat_kv` lays them out, but
    without copying the keys nh / nkv times (the einsum groups the queries instead)."""
    batch_size, query_len, num_heads, head_dim = query.shape
    num_kv_heads = key.shape[2]
    if num_kv_heads == num_heads:
        return jnp.einsum("bqhd,bkhd->bhqk", query, key)
    grouped = query.reshape(batch_size, query_len, num_kv_heads, num_heads // num_kv_heads,
                            head_dim)  # (B, Tq, nkv, g, hd)
    scores = jnp.einsum("bqngd,bknd->bngqk", grouped, key)  # (B, nkv, g, Tq, Tk)
    return scores.reshape(batch_size, num_heads, query_len, key.shape[1])


def _core(query, key, value, instance_ids, rate, dropout_key, dtype, window=None,
          band_block=None):
    if band_block is None:
        return attend(attention_probabilities(query, key, instance_ids, window), value, rate,
                      dropout_key, dtype)
    # A sliding layer in bands (banded_attention.py): blocks of queries become rows.
    return banded_attention.in_bands(
        lambda query_rows, key_rows, value_rows, visible: attend(
            masked_probabilities(query_rows, key_rows, visible), value_rows, rate, dropout_key,
            dtype),
        query, key, value, instance_ids, window, band_block)


def _batch_shards() -> int:
    """How many ways the traced computation splits the batch (1 outside a mesh)."""
    mesh = jax.sharding.get_abstract_mesh()
    axes = nn.logical_to_mesh_axes(("batch",))[0] if not mesh.empty else None
    if axes is None:
        return 1
    axes = (axes,) if isinstance(axes, str) else axes
    return int(np.prod([mesh.shape[axis] for axis in axes]))


def chunk_count(batch_size: int, seq_len: int, chunk_rows: int, platform: str) -> int:
    """How many sequential chunks each device's rows go through the core in (1 = at once)."""
    if not all(isinstance(dim, (int, np.integer)) for dim in (batch_size, seq_len)):
        # A symbolic shape (a jax2tf export): comparing it with a threshold is inconclusive,
        # and the exported program must hold for every length, so it is not chunked.
        return 1
    if chunk_rows < 0:  # automatic
        automatic = platform == "cpu" and seq_len >= AUTOMATIC_MIN_TOKENS
        chunk_rows = AUTOMATIC_ROWS if automatic else 0
    shards = _batch_shards()
    if chunk_rows == 0 or batch_size % shards:
        return 1
    local_rows = batch_size // shards
    chunks = max(1, local_rows // chunk_rows)
    while local_rows % chunks:  # equal chunks: the largest count that divides the rows
        chunks -= 1
    return chunks


def attention(query: Array, key: Array, value: Array, instance_ids: Array, rate: float,
              dropout_key: Array | None, precision: Precision, max_instances: int | None = None,
              kernel_seed: int = 0, window: int | None = None) -> Array:
    """The context (B, T, nh, hd) of (B, T, nh, hd) queries and (B, T, nkv, hd) keys and
    values (nkv = nh, or fewer heads shared by groups of queries); `instance_ids`
    (B, T) int32 say which instance each token belongs to (0 = padding), and `max_instances`
    (static) how many a row can hold: 1 for unpacked rows, None (default) where it is not
    known, which no fused kernel guesses. `window` (static): a sliding-window layer's reach
    on each side (keys with |q - k| <= window), None for a global layer.
    `kernel_seed` seeds a fused kernel's own attention dropout (attention_kernels)."""
    batch_size, seq_len = query.shape[:2]
    platform = traced_platform()
    rate = rate if dropout_key is not None else 0.0
    fused_dropout = precision.fused_attention_dropout
    implementation = attention_kernels.choose(precision.attention, platform, rate, seq_len,
                                              precision.dtype, max_instances, fused_dropout,
                                              window)
    # The band kernel takes a fused path's bands; the reference core on a GPU (float32,
    # attention dropout) keeps its own form, in bands only with gpu_attention_bands.
    fused_bands = precision.gpu_band_kernel and implementation != "reference"
    band = banded_attention.band_block(seq_len, window, platform,
                                       precision.gpu_attention_bands or fused_bands)
    if implementation != "reference":
        if rate and not (implementation == "cudnn" and fused_dropout):
            raise UserError(f"precision.attention={implementation!r} applies no attention "
                            f"dropout; set model.attention_dropout_rate=0 or "
                            f"precision.attention='auto'"
                            + (" (or precision.fused_attention_dropout=True: cuDNN's own)"
                               if implementation == "cudnn" else ""))
        return attention_kernels.fused_context(
            implementation, query, key, value, instance_ids, max_instances, rate, kernel_seed,
            window, band, band_kernel=precision.gpu_band_kernel and platform in GPU_PLATFORMS)
    chunks = chunk_count(batch_size, seq_len, precision.attention_chunk_rows, platform)
    if chunks == 1:
        return _core(query, key, value, instance_ids, rate, dropout_key, precision.dtype,
                     window, band)

    # Chunk i holds rows i, i + chunks, i + 2 chunks, ...: the batch axis stays split over
    # devices in the same contiguous blocks, so each device loops over its own rows.
    def split(x):
        x = x.reshape(batch_size // chunks, chunks, *x.shape[1:])
        return jnp.swapaxes(x, 0, 1)

    @jax.checkpoint
    def one_chunk(inputs):
        *tensors, index = inputs
        chunk_key = None if dropout_key is None else jax.random.fold_in(dropout_key, index)
        return _core(*tensors, rate, chunk_key, precision.dtype, window, band)

    context = jax.lax.map(one_chunk, (split(query), split(key), split(value),
                                      split(instance_ids), jnp.arange(chunks)))
    return jnp.swapaxes(context, 0, 1).reshape(query.shape)
