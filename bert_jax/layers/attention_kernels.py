"""The attention core on each platform's fused kernel, behind one entry point.

Implementations (`Precision.attention`):
  reference  bert_jax.layers.attention's einsums, chunked on a CPU: every platform, attention
             dropout, the probabilities when asked for. Exports and the probe take it.
  xla        `jax.nn.dot_product_attention(implementation='xla')` with the visibility mask of
             the instance ids: JAX's public entry on any platform, what the parity tests hold
             the kernels' inputs to on a CPU.
  cudnn      GPU: cuDNN's fused attention through the function beneath
             `jax.nn.dot_product_attention(implementation='cudnn')` (jax 0.10.2's private
             `jax._src.cudnn.fused_attention_stablehlo.dot_product_attention`), which takes a
             row's instances as segments (`q_offsets`/`kv_offsets` with per-segment lengths);
             the public entry takes padding only. `_cudnn_segments` is the one place that
             calls the private entry. bf16 or fp16 inputs only (cuDNN has no fp32 kernel).
  splash     TPU: the Pallas splash attention kernel, the instance ids as segment ids, under
             `shard_map` over the batch (and heads) so each device runs it on its own rows.
  auto       splash on a TPU, cuDNN on a GPU in bf16, the reference elsewhere.

Neither fused path applies dropout to the attention probabilities: splash has none, and the
cuDNN entry's dropout takes its seed as a compile-time constant (`seed=42`), so every step
would drop the same pattern unless cuDNN varies it per call, which no GPU here could check.
So a fused kernel is taken only when `attention_dropout_rate` is 0 (or outside training);
the paper's 0.1 keeps the reference path.

What fused kernels compute differently: a padding query (instance id 0) sees every real key
in the reference, nothing (cuDNN) or the other padding (splash) here. No real token reads a
padding token's output (its key is hidden from every real query, and no loss reads it), so
losses and gradients are the same; padding rows' outputs are not.
"""

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp

from bert_jax.model_config import ATTENTION_IMPLEMENTATIONS

Array = jax.Array
# Splash attention's tiles: the sequence must be a multiple of this (its default block sizes).
SPLASH_BLOCK = 128


def choose(implementation: str, platform: str, rate: float, seq_len, dtype: str) -> str:
    """The implementation one attention call takes: `implementation` unless 'auto'.

    A fused kernel needs no attention dropout (`rate` 0) and a concrete length; the splash
    kernel a length that is a multiple of its 128-token blocks; cuDNN 16-bit inputs.
    """
    if implementation != "auto":
        return implementation
    if rate or not isinstance(seq_len, int):
        return "reference"
    if platform == "tpu" and seq_len % SPLASH_BLOCK == 0:
        return "splash"
    if platform in ("cuda", "gpu") and dtype in ("bfloat16", "float16"):
        return "cudnn"
    return "reference"


def fused_context(implementation: str, query: Array, key: Array, value: Array,
                  instance_ids: Array) -> Array:
    """The context (B, T, nh, hd) of pre-scaled (B, T, nh, hd) queries, keys and values, in
    `implementation` ('xla', 'cudnn' or 'splash'), with no attention dropout."""
    if implementation == "xla":
        return _xla(query, key, value, instance_ids)
    if implementation == "cudnn":
        return _cudnn_segments(query, key, value, instance_ids)
    if implementation == "splash":
        return _splash_sharded(query, key, value, instance_ids)
    raise ValueError(f"no fused attention implementation {implementation!r}; "
                     f"expected one of {ATTENTION_IMPLEMENTATIONS}")


def _xla(query, key, value, instance_ids):
    from bert_jax.layers.attention import visible_keys  # (B, 1, T, T): the reference's rule

    return jax.nn.dot_product_attention(query, key, value, mask=visible_keys(instance_ids),
                                        scale=1.0, implementation="xla")


def instance_segments(instance_ids: Array) -> tuple[Array, Array]:
    """cuDNN's packed layout of (B, T) instance ids 1..N (0 = padding): (offsets (B, T + 1),
    lengths (B, T)), segment m's first token and length, -1 where a row has fewer segments.

    T slots per row, one per possible instance: the count must be static, and a row of T
    tokens holds at most T instances. Instances are contiguous runs of equal ids.
    """
    seq_len = instance_ids.shape[1]
    segment = jnp.arange(1, seq_len + 1)  # (T,) the ids 1..T
    member = instance_ids[:, None, :] == segment[None, :, None]  # (B, T segments, T tokens)
    lengths = member.sum(axis=-1).astype(jnp.int32)  # (B, T)
    starts = jnp.argmax(member, axis=-1).astype(jnp.int32)  # (B, T)
    present = lengths > 0
    offsets = jnp.where(present, starts, -1)
    offsets = jnp.pad(offsets, ((0, 0), (0, 1)), constant_values=-1)  # (B, T + 1)
    return offsets, jnp.where(present, lengths, -1)


def _cudnn_segments(query, key, value, instance_ids):
    """cuDNN's fused attention on the rows' instances (GPU only; traced, never run here)."""
    from jax._src.cudnn import fused_attention_stablehlo as cudnn

    offsets, lengths = instance_segments(instance_ids)
    return cudnn.dot_product_attention(
        query, key, value, q_seqlen=lengths, kv_seqlen=lengths, q_offsets=offsets,
        kv_offsets=offsets, scale=1.0, mask_type=cudnn.MaskType.PADDING, qkv_layout="BTNH")


def _splash_rows(query, key, value, instance_ids, interpret=False):
    """Splash attention on (B, T, nh, hd) rows, one kernel call per row (vmapped)."""
    from jax.experimental.pallas.ops.tpu.splash_attention import (
        splash_attention_kernel as splash, splash_attention_mask as masks)

    _, seq_len, num_heads, _ = query.shape
    mask = masks.MultiHeadMask([masks.FullMask((seq_len, seq_len))] * num_heads)
    kernel = splash.make_splash_mha(mask, head_shards=1, q_seq_shards=1,
                                    block_sizes=splash.BlockSizes.get_default(),
                                    interpret=interpret)
    heads_first = functools.partial(jnp.swapaxes, axis1=0, axis2=1)  # (T, nh, hd) -> (nh, T, hd)

    def one_row(q, k, v, ids):
        context = kernel(heads_first(q), heads_first(k), heads_first(v),
                         segment_ids=splash.SegmentIds(q=ids, kv=ids))
        return heads_first(context)  # (T, nh, hd)

    return jax.vmap(one_row)(query, key, value, instance_ids)


def _splash_sharded(query, key, value, instance_ids, interpret=False):
    """`_splash_rows` on each device's own rows and heads: a Pallas call is opaque to XLA's
    partitioner, which would otherwise gather every row onto every device first."""
    rows = functools.partial(_splash_rows, interpret=interpret)
    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty:
        return rows(query, key, value, instance_ids)
    batch, heads = nn.logical_to_mesh_axes(("batch", "heads"))
    tokens = jax.sharding.PartitionSpec(batch, None, heads, None)  # (B, T, nh, hd)
    ids = jax.sharding.PartitionSpec(batch, None)  # (B, T)
    return jax.shard_map(rows, mesh=mesh, in_specs=(tokens, tokens, tokens, ids),
                         out_specs=tokens, check_vma=False)(query, key, value, instance_ids)
