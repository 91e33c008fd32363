"""A sliding-window layer's attention as one GPU kernel a pass: each block of queries scored
against the keys its window reaches, the scores kept on chip (Pallas, compiled by Triton).

In bands (banded_attention.py) XLA's attention does a sliding layer's work and no more, but
writes each band's scores, probabilities and their gradients to memory between its passes:
compiled for an H100, a ModernBERT sliding layer at 8,192 tokens moved 4.14 GB, 6.6 times a
global layer on cuDNN (docs/gpus.md), and cuDNN's own window, as jax 0.10.2 calls it, is one
sided. This is the flash-attention algorithm (Dao et al., 2022) over a band: a program per
(block of `block` queries, row, head) walks the 2 window / block + 1 key blocks its band
touches with an online softmax, and writes only the context and each query's log-sum-exp.
The backward pass is one more kernel: a program per block computes that block's keys' and
values' gradients from the query blocks that see them, then its queries' gradient from
their keys, recomputing the probabilities from the log-sum-exp.

What a query sees is visibility.py's rule within |q - k| <= window, as in the reference
core. A query that sees no key at all (a padding token farther than the window from every
real token) gets a finite mean of the values its band's blocks hold, as in bands; nothing
reads it. No attention dropout: like XLA's entry, the model takes it only at rate 0
(ModernBERT's).

Runs under Pallas' interpreter on a CPU (`interpret=True`), where the tests hold it to the
reference core; on a GPU it is opt-in (`precision.gpu_band_kernel`) until a GPU times it.
"""

import functools
import re

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as triton

Array = jax.Array

# Scores a query does not see: finite, so a query that sees nothing averages its band
# instead of dividing zero by zero (as the reference's large negative fill does).
_HIDDEN = -0.7 * float(jnp.finfo(jnp.float32).max)


# Each kernel's products of a (block, block) tile a visited key block: the forward pass's
# scores and context; the backward's scores, value and probability gradients and key
# gradient for its keys, then scores, probability gradients and query gradient for its
# queries. A kernel's name carries the key blocks each program visits, so the GPU census can
# read its FLOPs from its Triton call (`compiled_flops`).
PRODUCTS_PER_KEY_BLOCK = {"forward": 2, "backward": 7}
_NAME = re.compile(r"band_attention_(forward|backward)_(\d+)_key_blocks$")


def kernel_name(direction: str, key_blocks: int) -> str:
    """The Triton call's name of one pass ("forward", "backward") visiting `key_blocks`."""
    return f"band_attention_{direction}_{key_blocks}_key_blocks"


def compiled_flops(name: str, programs: int, query_shape: list[int]) -> float | None:
    """The FLOPs of one compiled call of the kernel `name` (None: not one of these) from
    what its Triton call holds: `programs` (its grid: query blocks x rows x heads) and its
    first operand's shape, the queries (B, n block, nh, hd)."""
    found = _NAME.match(name)
    if not found:
        return None
    direction, key_blocks = found.group(1), int(found.group(2))
    batch_size, queries, num_heads, head_dim = query_shape
    block = batch_size * queries * num_heads // programs
    return (PRODUCTS_PER_KEY_BLOCK[direction] * key_blocks * 2.0 * block * block * head_dim
            * programs)


def unsupported(head_dim: int, window: int, block: int) -> str:
    """Why the kernel cannot take this layer ("" if it can): Triton's tiles are powers of
    two, and a block must divide 2 window to tile the band."""
    if (2 * window) % block or block & (block - 1) or head_dim & (head_dim - 1):
        return (f"the band kernel needs a power-of-two block ({block}) dividing 2 x window "
                f"({2 * window}) and a power-of-two head size ({head_dim})")
    return ""


def _product(a: Array, b: Array, trans_a: bool = False, trans_b: bool = False) -> Array:
    """a @ b (either transposed) in float32; float32 inputs stay float32, not TF32, so a
    float32 caller gets float32's products as the reference core does."""
    return triton.dot(a, b, trans_a=trans_a, trans_b=trans_b, allow_tf32=False)


def _row_dot(context: Array, context_gradient: Array) -> Array:
    """Each query's context . its gradient (b,), float32: flash attention's delta, the
    probability-weighted sum of the scores' gradients that each score's gradient is
    measured from."""
    return jnp.sum(context.astype(jnp.float32) * context_gradient.astype(jnp.float32), axis=1)


def _visible(query_ids: Array, key_ids: Array, distance: Array, window: int) -> Array:
    """visibility.py's instance rule within the window, for (b,) query and (b,) key ids and
    their (b, b) signed distances q - k."""
    query_ids, key_ids = query_ids[:, None], key_ids[None, :]
    same_instance = (key_ids > 0) & ((query_ids == key_ids) | (query_ids == 0))
    return same_instance & (jnp.abs(distance) <= window)


def _offsets(block: int) -> tuple[Array, Array]:
    """(b, 1) query and (1, b) key positions within their blocks."""
    return jnp.arange(block)[:, None], jnp.arange(block)[None, :]


def _block_at(index: Array, num_blocks: int, block: int) -> tuple[Array, Array]:
    """Where block `index` of a row of `num_blocks` is read from, and whether the row has
    it: a block beyond either end is read at the nearest one and weighs nothing."""
    inside = (index >= 0) & (index < num_blocks)
    return pl.ds(jnp.clip(index, 0, num_blocks - 1) * block, block), inside


def _forward_kernel(query_ref, key_ref, value_ref, query_ids_ref, key_ids_ref, context_ref,
                    log_sum_exp_ref, *, window: int, block: int, num_blocks: int):
    """Query block i: the context and log-sum-exp over key blocks i - window / block ..
    i + window / block, the blocks its band touches."""
    first = pl.program_id(0)
    reach = window // block
    query = query_ref[...]  # (b, hd), already scaled
    query_ids = query_ids_ref[...]
    query_offset, key_offset = _offsets(block)
    maximum = jnp.full((block,), _HIDDEN, jnp.float32)
    total = jnp.zeros((block,), jnp.float32)
    context = jnp.zeros(query.shape, jnp.float32)
    for side in range(-reach, reach + 1):  # a few blocks: unrolled
        keys_at, inside = _block_at(first + side, num_blocks, block)
        keys, values = key_ref[keys_at, :], value_ref[keys_at, :]
        scores = _product(query, keys, trans_b=True)  # (b, b) float32
        distance = query_offset - side * block - key_offset
        visible = _visible(query_ids, key_ids_ref[keys_at], distance, window) & inside
        scores = jnp.where(visible, scores, _HIDDEN)
        new_maximum = jnp.maximum(maximum, scores.max(axis=1))
        rescale = jnp.exp(maximum - new_maximum)
        weights = jnp.exp(scores - new_maximum[:, None])
        total = total * rescale + weights.sum(axis=1)
        context = context * rescale[:, None] + _product(weights.astype(values.dtype), values)
        maximum = new_maximum
    context_ref[...] = (context / total[:, None]).astype(context_ref.dtype)
    log_sum_exp_ref[...] = maximum + jnp.log(total)


def _backward_kernel(query_ref, key_ref, value_ref, query_ids_ref, key_ids_ref, log_sum_exp_ref,
                     context_ref, context_gradient_ref, query_gradient_ref, key_gradient_ref,
                     value_gradient_ref, *, window: int, block: int, num_blocks: int):
    """Block r: the gradients of keys and values r (from the query blocks r - window / block
    .. r + window / block that see them), then of queries r (from their band's key blocks)."""
    r = pl.program_id(0)
    reach = window // block
    query_offset, key_offset = _offsets(block)
    own = pl.ds(r * block, block)
    keys, values, key_ids = key_ref[own, :], value_ref[own, :], key_ids_ref[own]
    key_gradient = jnp.zeros(keys.shape, jnp.float32)
    value_gradient = jnp.zeros(values.shape, jnp.float32)
    for side in range(-reach, reach + 1):
        queries_at, inside = _block_at(r + side, num_blocks, block)
        queries, query_ids = query_ref[queries_at, :], query_ids_ref[queries_at]
        distance = side * block + query_offset - key_offset
        visible = _visible(query_ids, key_ids, distance, window) & inside
        scores = _product(queries, keys, trans_b=True)
        probabilities = jnp.where(visible, jnp.exp(scores - log_sum_exp_ref[queries_at][:, None]),
                                  0.0)
        context_gradient = context_gradient_ref[queries_at, :]
        delta = _row_dot(context_ref[queries_at, :], context_gradient)
        value_gradient += _product(probabilities.astype(context_gradient.dtype),
                                   context_gradient, trans_a=True)
        weight_gradient = _product(context_gradient, values, trans_b=True)
        score_gradient = probabilities * (weight_gradient - delta[:, None])
        key_gradient += _product(score_gradient.astype(queries.dtype), queries, trans_a=True)
    key_gradient_ref[...] = key_gradient.astype(key_gradient_ref.dtype)
    value_gradient_ref[...] = value_gradient.astype(value_gradient_ref.dtype)

    queries, query_ids = query_ref[own, :], query_ids_ref[own]
    log_sum_exp = log_sum_exp_ref[own]
    context_gradient = context_gradient_ref[own, :]
    delta = _row_dot(context_ref[own, :], context_gradient)
    query_gradient = jnp.zeros(queries.shape, jnp.float32)
    for side in range(-reach, reach + 1):
        keys_at, inside = _block_at(r + side, num_blocks, block)
        keys, values = key_ref[keys_at, :], value_ref[keys_at, :]
        distance = query_offset - side * block - key_offset
        visible = _visible(query_ids, key_ids_ref[keys_at], distance, window) & inside
        scores = _product(queries, keys, trans_b=True)
        probabilities = jnp.where(visible, jnp.exp(scores - log_sum_exp[:, None]), 0.0)
        weight_gradient = _product(context_gradient, values, trans_b=True)
        score_gradient = probabilities * (weight_gradient - delta[:, None])
        query_gradient += _product(score_gradient.astype(keys.dtype), keys)
    query_gradient_ref[...] = query_gradient.astype(query_gradient_ref.dtype)


def _whole_blocks(block: int, *tensors: Array) -> tuple[int, list[Array]]:
    """(B, T, ...) tensors padded to whole blocks (padding ids 0, seen by no one), and
    their blocks a row."""
    seq_len = tensors[0].shape[1]
    num_blocks = -(-seq_len // block)
    tail = num_blocks * block - seq_len
    return num_blocks, [jnp.pad(x, [(0, 0), (0, tail)] + [(0, 0)] * (x.ndim - 2))
                        for x in tensors]


def _specs(block: int, seq_len: int, groups: int, head_dim: int) -> dict:
    """BlockSpecs over the grid (block, row, head): a block of queries (or of anything laid
    out as queries), the whole row of its head's tokens (queries, or the keys of its group),
    its block of ids and its row of ids, a block and a row of per-query figures."""
    return dict(
        block=pl.BlockSpec((None, block, None, head_dim), lambda i, b, h: (b, i, h, 0)),
        row=pl.BlockSpec((None, seq_len, None, head_dim), lambda i, b, h: (b, 0, h, 0)),
        key_row=pl.BlockSpec((None, seq_len, None, head_dim),
                             lambda i, b, h: (b, 0, h // groups, 0)),
        block_ids=pl.BlockSpec((None, block), lambda i, b, h: (b, i)),
        row_ids=pl.BlockSpec((None, seq_len), lambda i, b, h: (b, 0)),
        per_query_block=pl.BlockSpec((None, None, block), lambda i, b, h: (b, h, i)),
        per_query_row=pl.BlockSpec((None, None, seq_len), lambda i, b, h: (b, h, 0)))


def _compiler_params():
    return triton.CompilerParams(num_warps=4, num_stages=2)


def _forward(query, key, value, instance_ids, window, block, interpret):
    batch_size, seq_len, num_heads, head_dim = query.shape
    reason = unsupported(head_dim, window, block)
    if reason:
        raise ValueError(reason)
    num_blocks, (query, key, value, instance_ids) = _whole_blocks(block, query, key, value,
                                                                  instance_ids)
    specs = _specs(block, query.shape[1], num_heads // key.shape[2], head_dim)
    context, log_sum_exp = pl.pallas_call(
        functools.partial(_forward_kernel, window=window, block=block, num_blocks=num_blocks),
        grid=(num_blocks, batch_size, num_heads),
        in_specs=[specs["block"], specs["key_row"], specs["key_row"], specs["block_ids"],
                  specs["row_ids"]],
        out_specs=[specs["block"], specs["per_query_block"]],
        out_shape=[jax.ShapeDtypeStruct(query.shape, query.dtype),
                   jax.ShapeDtypeStruct((batch_size, num_heads, query.shape[1]), jnp.float32)],
        compiler_params=_compiler_params(), interpret=interpret,
        name=kernel_name("forward", 2 * window // block + 1),
    )(query, key, value, instance_ids, instance_ids)
    return context[:, :seq_len], log_sum_exp


def _backward(query, key, value, instance_ids, context, log_sum_exp, context_gradient, window,
              block, interpret):
    batch_size, seq_len, num_heads, head_dim = query.shape
    key_heads = key.shape[2]
    num_blocks, (query, key, value, instance_ids, context, context_gradient) = _whole_blocks(
        block, query, key, value, instance_ids, context, context_gradient)
    groups = num_heads // key_heads
    specs = _specs(block, query.shape[1], groups, head_dim)
    query_gradient, key_gradient, value_gradient = pl.pallas_call(
        functools.partial(_backward_kernel, window=window, block=block, num_blocks=num_blocks),
        grid=(num_blocks, batch_size, num_heads),
        in_specs=[specs["row"], specs["key_row"], specs["key_row"], specs["row_ids"],
                  specs["row_ids"], specs["per_query_row"], specs["row"], specs["row"]],
        out_specs=[specs["block"]] * 3,
        # Keys' and values' gradients per query head; a key head shared by a group of query
        # heads sums its group's below, from float32.
        out_shape=[jax.ShapeDtypeStruct(query.shape, query.dtype)]
        + [jax.ShapeDtypeStruct(query.shape, jnp.float32 if groups > 1 else key.dtype)] * 2,
        compiler_params=_compiler_params(), interpret=interpret,
        name=kernel_name("backward", 2 * window // block + 1),
    )(query, key, value, instance_ids, instance_ids, log_sum_exp, context, context_gradient)

    def per_key_head(gradient):
        gradient = gradient[:, :seq_len]
        if groups == 1:
            return gradient
        grouped = gradient.reshape(batch_size, seq_len, key_heads, groups, head_dim)
        return grouped.sum(axis=3).astype(key.dtype)

    return (query_gradient[:, :seq_len], per_key_head(key_gradient),
            per_key_head(value_gradient))


@functools.partial(jax.custom_vjp, nondiff_argnums=(4, 5, 6))
def band_attention(query: Array, key: Array, value: Array, instance_ids: Array, window: int,
                   block: int, interpret: bool = False) -> Array:
    """The context (B, T, nh, hd) of a sliding layer's pre-scaled (B, T, nh, hd) queries and
    (B, T, nkv, hd) keys and values (nkv divides nh) over (B, T) instance ids: keys with
    |q - k| <= `window` in blocks of `block` queries (`block` divides 2 window; it and the
    head size powers of two, as Triton's tiles are)."""
    return _forward(query, key, value, instance_ids, window, block, interpret)[0]


def _band_attention_forward(query, key, value, instance_ids, window, block, interpret):
    context, log_sum_exp = _forward(query, key, value, instance_ids, window, block, interpret)
    return context, (query, key, value, instance_ids, context, log_sum_exp)


def _band_attention_backward(window, block, interpret, residuals, context_gradient):
    query, key, value, instance_ids, context, log_sum_exp = residuals
    gradients = _backward(query, key, value, instance_ids, context, log_sum_exp,
                          context_gradient, window, block, interpret)
    return (*gradients, None)


band_attention.defvjp(_band_attention_forward, _band_attention_backward)
