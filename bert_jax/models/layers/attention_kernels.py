"""The attention core on each platform's fused kernel, behind one entry point.

Implementations (`Precision.attention`):
  reference  bert_jax.models.layers.attention's einsums, chunked on a CPU: every platform, attention
             dropout, the probabilities when asked for. Exports and the probe take it.
  xla        `jax.nn.dot_product_attention(implementation='xla')` with the visibility mask of
             the instance ids: JAX's public entry on any platform, what the parity tests hold
             the kernels' inputs to on a CPU. A sliding layer runs it in bands where
             banded_attention.band_block says (a CPU; a GPU, opt-in), so its work follows
             the window; on a GPU with precision.gpu_band_kernel those bands run as one
             Pallas kernel a pass instead (band_kernel.py), their scores kept on chip.
  cudnn      GPU: cuDNN's fused attention, bf16 or fp16 inputs only (cuDNN has no fp32
             kernel), given the segments a row can hold (`cudnn_arguments`):
             - unpacked rows (one instance, real tokens first, then padding): each row's
               length, through `jax.nn.dot_product_attention(implementation='cudnn',
               query_seq_lengths=..., key_value_seq_lengths=...)`;
             - packed rows: `max_instances` segment slots (data.max_sequences_per_row, a
               static number), offsets (B, slots + 1) and lengths (B, slots), through the
               function beneath the public entry (jax 0.10.2's private
               `jax._src.cudnn.fused_attention_stablehlo.dot_product_attention`), the only
               one that takes segments. `_cudnn` is the one place that calls either.
             Never the sequence length as the slot count: T slots a row made cuDNN's ragged
             kernel 4.5x slower than per-row lengths (H100: 150.41 against 33.02 ms/step).
  splash     TPU: the Pallas splash attention kernel, the instance ids as segment ids, under
             `shard_map` over the batch (and heads) so each device runs it on its own rows.
  auto       what `choose` says, each choice with the measurement behind it (README, "On a
             GPU").

Attention dropout: splash has none. cuDNN's kernel has one whose seed is a compile-time
constant; XLA advances a per-kernel random offset at every call, so the masks should change
from step to step, but no GPU has checked it yet (bench/gpu/cudnn_dropout_check.py does). So it
is opt-in (`Precision.fused_attention_dropout`): each layer's kernel gets its own seed (from
the layer's name), and its masks come from cuDNN's counter, not from the run's dropout key:
they do not follow `seed`, and a resumed run's counters start again from 0.
Without the opt-in a fused kernel is taken only when `attention_dropout_rate` is 0 (or
outside training); the paper's 0.1 keeps the reference path.

What fused kernels compute differently: a padding query (instance id 0) sees every real key
in the reference, nothing (cuDNN) or the other padding (splash) here. No real token reads a
padding token's output (its key is hidden from every real query, and no loss reads it), so
losses and gradients are the same; padding rows' outputs are not.
"""

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp

from bert_jax.errors import UserError
from bert_jax.models.config import ATTENTION_IMPLEMENTATIONS
from bert_jax.models.layers import banded_attention
from bert_jax.models.layers.band_kernel import band_attention, unsupported as band_kernel_tiles
from bert_jax.models.layers.platform import GPU_PLATFORMS
from bert_jax.models.layers.visibility import visible_keys, within_window

Array = jax.Array
# Splash attention's tiles: the sequence must be a multiple of this (its default block sizes).
SPLASH_BLOCK = 128


def choose(implementation: str, platform: str, rate: float, seq_len, dtype: str,
           max_instances: int | None = None, fused_dropout: bool = False,
           window: int | None = None) -> str:
    """The implementation one attention call takes: `implementation` unless 'auto'.

    `max_instances`: the most instances a row holds (1: unpacked rows; None: not known, as in
    domain MLM's blocks). On a GPU in 16 bits auto takes the paths measured fastest there
    (README, "On a GPU"): cuDNN with per-row lengths on unpacked rows (H100, BERT-Base bf16:
    33.02 ms/step at 128 x 128, 33.62 at 32 x 512) and XLA's attention on packed or unknown
    rows (38.07 and 50.93 ms; cuDNN segments were never run on packed rows, so they stay
    opt-in: precision.attention=cudnn). On a TPU, splash on whole 128-token blocks (compiled,
    never timed on a TPU: no TPU path was). Attention dropout (`rate` > 0) keeps the
    reference unless `fused_dropout` opts into cuDNN's (module docstring).
    A sliding-window layer (`window`) takes splash with a local mask on a TPU and XLA's
    attention on a GPU (in bands with precision.gpu_attention_bands, in one Pallas kernel a
    pass with precision.gpu_band_kernel): cuDNN (as jax 0.10.2 calls it) has only a causal,
    left-side window, so a two-sided one reaches it as a bias (opt-in, never measured).
    """
    if implementation != "auto":
        return implementation
    if not isinstance(seq_len, int) or (rate and not fused_dropout):
        return "reference"
    if platform == "tpu" and seq_len % SPLASH_BLOCK == 0 and not rate:
        return "splash"
    if platform in GPU_PLATFORMS and dtype in ("bfloat16", "float16"):
        if max_instances == 1 and window is None:
            return "cudnn"
        return "reference" if rate else "xla"
    return "reference"


def fused_context(implementation: str, query: Array, key: Array, value: Array,
                  instance_ids: Array, max_instances: int | None = None, rate: float = 0.0,
                  seed: int = 0, window: int | None = None, band_block: int | None = None,
                  band_kernel: bool = False) -> Array:
    """The context (B, T, nh, hd) of pre-scaled (B, T, nh, hd) queries, keys and values, in
    `implementation` ('xla', 'cudnn' or 'splash'); attention dropout `rate` (cuDNN only)
    from the kernel's own generator, seeded with `seed`; a sliding-window layer's `window`
    (keys with |q - k| <= window) in each kernel's own form, XLA's in bands of `band_block`
    queries where one is given (banded_attention.band_block), or with `band_kernel`
    (precision.gpu_band_kernel, a GPU's) those bands in one Pallas kernel a pass, whether
    the other layers take XLA's attention or cuDNN's (whose window is one-sided), unless
    cuDNN's own dropout is asked for (the band kernel has none)."""
    if (implementation in ("xla", "cudnn") and band_kernel and band_block is not None
            and not rate):
        reason = band_kernel_tiles(query.shape[-1], window, band_block)
        if reason:
            raise UserError(f"precision.gpu_band_kernel: {reason}; this model's sliding "
                            f"layers cannot take it, set it to false")
        return _on_each_device(
            lambda *rows: band_attention(*rows, window, band_block),
            query, key, value, instance_ids)
    if implementation == "xla":
        return _xla(query, key, value, instance_ids, window, band_block)
    if implementation == "cudnn":
        return _cudnn(query, key, value, instance_ids, max_instances, rate, seed, window)
    if implementation == "splash":
        return _splash_sharded(query, key, value, instance_ids, window=window)
    raise ValueError(f"no fused attention implementation {implementation!r}; "
                     f"expected one of {ATTENTION_IMPLEMENTATIONS}")


def _xla(query, key, value, instance_ids, window=None, block=None):
    if block is not None:
        # A sliding layer in bands (banded_attention.py): the work follows the band, where
        # JAX's window argument only masks the full T x T scores.
        return banded_attention.in_bands(
            lambda query_rows, key_rows, value_rows, visible: jax.nn.dot_product_attention(
                query_rows, key_rows, value_rows, mask=visible, scale=1.0, implementation="xla"),
            query, key, value, instance_ids, window, block)
    # The window through JAX's own argument (it builds the same band, both sides inclusive).
    local_window_size = None if window is None else (window, window)
    return jax.nn.dot_product_attention(query, key, value, mask=visible_keys(instance_ids),
                                        scale=1.0, local_window_size=local_window_size,
                                        implementation="xla")


def instance_segments(instance_ids: Array, slots: int) -> tuple[Array, Array]:
    """cuDNN's packed layout of (B, T) instance ids 1..N (0 = padding, N <= `slots`):
    (offsets (B, slots + 1), lengths (B, slots)), segment m's first token and length, -1
    where a row has fewer segments. Instances are contiguous runs of equal ids."""
    segment = jnp.arange(1, slots + 1)  # (slots,) the ids 1..slots
    member = instance_ids[:, None, :] == segment[None, :, None]  # (B, slots, T)
    lengths = member.sum(axis=-1).astype(jnp.int32)  # (B, slots)
    starts = jnp.argmax(member, axis=-1).astype(jnp.int32)  # (B, slots)
    present = lengths > 0
    offsets = jnp.where(present, starts, -1)
    offsets = jnp.pad(offsets, ((0, 0), (0, 1)), constant_values=-1)  # (B, slots + 1)
    return offsets, jnp.where(present, lengths, -1)


def cudnn_arguments(instance_ids: Array, max_instances: int | None) -> dict[str, Array]:
    """What cuDNN is told of (B, T) rows: `q_seqlen`/`kv_seqlen` (B,) per-row lengths for
    unpacked rows (`max_instances` 1), plus `q_offsets`/`kv_offsets` (B, slots + 1) with
    (B, slots) lengths for packed rows, slots = `max_instances`. A pure function, so a CPU
    test can read what a GPU would be handed."""
    if max_instances is None:
        raise UserError(
            "precision.attention='cudnn' needs the most instances a row holds (packed "
            "pre-training rows: data.max_sequences_per_row), which these rows do not say; "
            "use precision.attention='auto' or 'xla'")
    # A row of padding only (a last partial batch's filler rows) gets one token's segment:
    # finite outputs that no loss reads, where an empty one's are not defined (NaN x a zero
    # weight would still poison the batch's sums).
    if max_instances == 1:
        lengths = jnp.sum(instance_ids > 0, axis=1).astype(jnp.int32)  # (B,)
        lengths = jnp.maximum(lengths, 1)
        return {"q_seqlen": lengths, "kv_seqlen": lengths}
    offsets, lengths = instance_segments(instance_ids, max_instances)
    empty = lengths[:, 0] < 0  # (B,) rows without an instance
    lengths = lengths.at[:, 0].set(jnp.where(empty, 1, lengths[:, 0]))
    offsets = offsets.at[:, 0].set(jnp.where(empty, 0, offsets[:, 0]))
    return {"q_seqlen": lengths, "kv_seqlen": lengths, "q_offsets": offsets,
            "kv_offsets": offsets}


def _cudnn(query, key, value, instance_ids, max_instances, rate=0.0, seed=0, window=None):
    """cuDNN's fused attention on the rows' instances (GPU only; traced, never run here).

    A sliding window goes in as a (1, 1, T, T) mask, which JAX hands cuDNN as a bias: JAX's
    own cuDNN window (`sliding_window_length`) is left-sided only."""
    arguments = cudnn_arguments(instance_ids, max_instances)
    if window is not None:
        arguments["mask"] = within_window(query.shape[1], window)
    if "q_offsets" not in arguments and not rate:
        # The call measured on an H100 (33 ms/step): JAX's public entry, per-row lengths.
        return jax.nn.dot_product_attention(
            query, key, value, mask=arguments.get("mask"), scale=1.0,
            query_seq_lengths=arguments["q_seqlen"],
            key_value_seq_lengths=arguments["kv_seqlen"], implementation="cudnn")
    from jax._src.cudnn import fused_attention_stablehlo as cudnn

    # What the public entry passes for padding (mask type, layout), plus segments/dropout.
    return cudnn.dot_product_attention(
        query, key, value, **arguments, scale=1.0, mask_type=cudnn.MaskType.PADDING,
        qkv_layout="BTNH", dropout_rate=rate, seed=seed)


def _splash_rows(query, key, value, instance_ids, interpret=False, window=None):
    """Splash attention on (B, T, nh, hd) rows, one kernel call per row (vmapped); a
    sliding-window layer's `window` as splash's `LocalMask` (both sides inclusive), whose
    blocks outside the band the kernel skips."""
    from jax.experimental.pallas.ops.tpu.splash_attention import (
        splash_attention_kernel as splash, splash_attention_mask as masks)

    _, seq_len, num_heads, _ = query.shape
    shape = (seq_len, seq_len)
    head_mask = (masks.FullMask(shape) if window is None
                 else masks.LocalMask(shape, window_size=(window, window), offset=0))
    mask = masks.MultiHeadMask([head_mask] * num_heads)
    kernel = splash.make_splash_mha(mask, head_shards=1, q_seq_shards=1,
                                    block_sizes=splash.BlockSizes.get_default(),
                                    interpret=interpret)
    heads_first = functools.partial(jnp.swapaxes, axis1=0, axis2=1)  # (T, nh, hd) -> (nh, T, hd)

    def one_row(q, k, v, ids):
        context = kernel(heads_first(q), heads_first(k), heads_first(v),
                         segment_ids=splash.SegmentIds(q=ids, kv=ids))
        return heads_first(context)  # (T, nh, hd)

    return jax.vmap(one_row)(query, key, value, instance_ids)


def _splash_sharded(query, key, value, instance_ids, interpret=False, window=None):
    """`_splash_rows` on each device's own rows and heads."""
    rows = functools.partial(_splash_rows, interpret=interpret, window=window)
    # Splash's multi-head kernel takes as many key/value heads as query heads: grouped keys
    # and values are repeated here (XLA's and cuDNN's entries take the groups as they are).
    groups = query.shape[2] // key.shape[2]
    if groups > 1:
        key, value = (jnp.repeat(tensor, groups, axis=2) for tensor in (key, value))
    return _on_each_device(rows, query, key, value, instance_ids)


def _on_each_device(rows, query, key, value, instance_ids):
    """`rows(query, key, value, instance_ids)` (a Pallas kernel's call) on each device's own
    rows and heads: a Pallas call is opaque to XLA's partitioner, which would otherwise
    gather every row onto every device first (the band kernel under FSDP on 8 H100s,
    compiled: 507 collectives moving 516 GB a step, against 87 and 4.6 GB in bands)."""
    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty:
        return rows(query, key, value, instance_ids)
    batch, heads = nn.logical_to_mesh_axes(("batch", "heads"))
    tokens = jax.sharding.PartitionSpec(batch, None, heads, None)  # (B, T, nh, hd)
    ids = jax.sharding.PartitionSpec(batch, None)  # (B, T)
    return jax.shard_map(rows, mesh=mesh, in_specs=(tokens, tokens, tokens, ids),
                         out_specs=tokens, check_vma=False)(query, key, value, instance_ids)
