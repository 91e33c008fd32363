"""Inverted dropout drawing 16 random bits per element instead of flax's 32, its mask kept
for the backward pass as one bit per element."""

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp

from bert_jax.models.layers.threefry import threefry2x32

Array = jax.Array
_QUARTERS = 4  # 16-bit numbers from one threefry2x32 block (two 32-bit words)
_BITS = 8  # elements whose keep decisions share one byte of the packed mask: two blocks


def _key_words(key: Array) -> Array:
    """The threefry key's two uint32 words, from a typed key or its raw data."""
    if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        key = jax.random.key_data(key)
    if key.shape != (2,):
        raise ValueError(f"dropout needs a threefry key (2 uint32 words), got shape {key.shape}")
    return key


def _counters(shape: tuple[int, ...]) -> tuple[Array, Array]:
    """The counter words of each position of `shape` ((rows, ..., n)): the row's index, and
    the position's number along the row (over all its axes)."""
    rows = jax.lax.broadcasted_iota(jnp.uint32, shape, 0)
    within, stride = jnp.zeros(shape, jnp.uint32), 1
    for axis in reversed(range(1, len(shape))):
        within = within + jax.lax.broadcasted_iota(jnp.uint32, shape, axis) * jnp.uint32(stride)
        stride *= shape[axis]
    return rows, within


def _block(key: Array, shape: tuple[int, ...]) -> tuple[Array, Array]:
    """The (high, low) words of threefry2x32 block n of each row, as arrays of `shape`
    ((rows, ..., n)): a row's blocks are numbered along the row (over all its axes), its
    leading axis's index the other counter word. Both counters are iotas, so a draw is an
    elementwise function of the position, which XLA fuses into its consumer and splits
    along the batch as it splits `jax.random.bits`."""
    words = _key_words(key)
    return threefry2x32(words[0], words[1], *_counters(shape))


def _quarters(high: Array, low: Array) -> list[Array]:
    return [high & 0xFFFF, high >> 16, low & 0xFFFF, low >> 16]


def _as_rows(shape: tuple[int, ...]) -> tuple[int, ...]:
    return shape if len(shape) > 1 else (1, *shape)


def random_quarters(key: Array, shape: tuple[int, ...]) -> Array:
    """Uniform 16-bit random numbers (in uint32) of `shape`: element j of a row is the
    (j mod 4)-th 16-bit quarter of the row's threefry2x32 block j div 4.

    `jax.random.bits` hashes one counter per 32-bit output and folds the block's two words
    into one, so a 16-bit number would cost half a block; here each block's 64 bits give
    four. The numbers dropout compares (`keep_bits` packs the verdicts)."""
    rows = _as_rows(shape)
    # Whole bytes of the packed mask per row: the block numbering `keep_bits` uses.
    blocks = (*rows[:-1], -(-rows[-1] // _BITS) * (_BITS // _QUARTERS))
    high, low = _block(key, blocks)
    quarters = jnp.stack(_quarters(high, low), axis=-1)  # (..., blocks, 4)
    return quarters.reshape(*blocks[:-1], -1)[..., :rows[-1]].reshape(shape)


def keep_bits(key: Array, shape: tuple[int, ...], threshold: int) -> Array:
    """Dropout's verdicts for `shape`, packed: uint8 (..., ceil(last / 8)) whose bit i of
    byte b says whether element 8 b + i is kept, i.e. its `random_quarters` number is below
    `threshold`.

    Computed a byte at a time from its two threefry blocks, so no block is drawn twice and
    nothing of the draw but the mask is written: 1 bit per element, where the 16 random
    bits themselves (or a byte-per-element mask) are what a GPU program otherwise keeps
    from the forward pass for the backward (issue 43).

    A block's four verdicts make a nibble, and the byte is the sum of its two nibbles: a
    reduction, which XLA writes to memory once before the mask is read. ORed together
    elementwise instead, the whole hash was fused into every element that reads the mask,
    computed again for each of a byte's 8 elements, forward and backward: on the CPU that
    took twice the time of JAX's looped primitive, the sum a third of it
    (bench/dropout_rng.py)."""
    rows = _as_rows(shape)
    packed = (*rows[:-1], -(-rows[-1] // _BITS))
    # Block 2 b + i of a row at [..., b, i]: `_block` numbers a row's blocks along it.
    high, low = _block(key, (*packed, _BITS // _QUARTERS))
    nibble = jnp.zeros(high.shape, jnp.uint32)
    for bit, quarter in enumerate(_quarters(high, low)):
        nibble = nibble | ((quarter < threshold).astype(jnp.uint32) << bit)
    place = jax.lax.broadcasted_iota(jnp.uint32, nibble.shape, nibble.ndim - 1) * _QUARTERS
    byte = jnp.sum(nibble << place, axis=-1).astype(jnp.uint8)
    return byte if len(shape) > 1 else byte[0]


def unpack(bits: Array, shape: tuple[int, ...]) -> Array:
    """The boolean mask of `shape` that `keep_bits` packed."""
    bit = jax.lax.broadcasted_iota(jnp.uint8, (*bits.shape, _BITS), bits.ndim)
    mask = ((bits[..., None] >> bit) & 1).astype(jnp.bool_)  # (..., bytes, 8)
    return mask.reshape(*bits.shape[:-1], -1)[..., :shape[-1]]


def dropout(x: Array, rate: float, key: Array) -> Array:
    """`x` with each element kept with probability about 1 - `rate` and scaled by its inverse.

    16 random bits per element (`random_quarters`), where flax's `nn.Dropout` draws 32:
    a quarter of its random-number work, which is one of the largest non-matmul costs of a
    CPU train step (bench/profile_step.py). Elements are kept with probability
    round(keep * 2^16) / 2^16 (0.899994 for rate 0.1) and scaled by its inverse, so the
    layer stays unbiased. The backward pass reads the mask packed a bit per element
    (`keep_bits`), the gradient scaled in the same step.
    """
    if rate == 0.0:
        return x
    threshold = round((1.0 - rate) * 2**16)
    if threshold == 0:  # rate 1 (or within 2^-17 of it): drop everything
        return jnp.zeros_like(x)
    with jax.named_scope("dropout"):  # names the ops for profiles (bench/profile_step.py)
        return _masked(x, keep_bits(key, x.shape, threshold), threshold)


def _scaled(x: Array, bits: Array, threshold: int) -> Array:
    scale = jnp.asarray(2**16 / threshold, x.dtype)
    return jnp.where(unpack(bits, x.shape), x * scale, jnp.zeros_like(x))


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def _masked(x: Array, bits: Array, threshold: int) -> Array:
    """`x` where the packed mask `bits` keeps it, scaled by 2^16 / threshold; its gradient
    is the incoming one under the same mask and scale (one pass, not a select and then a
    multiply, which XLA ran as separate kernels, once for each matmul reading it)."""
    return _scaled(x, bits, threshold)


def _masked_forward(x, bits, threshold):
    return _scaled(x, bits, threshold), bits


def _masked_backward(threshold, bits, gradient):
    return _scaled(gradient, bits, threshold), None


_masked.defvjp(_masked_forward, _masked_backward)


class Dropout(nn.Module):
    """`dropout` as a layer: a fresh key from the `dropout` stream on every call."""
    rate: float

    @nn.compact
    def __call__(self, x: Array, deterministic: bool) -> Array:
        if deterministic or self.rate == 0.0:
            return x
        return dropout(x, self.rate, self.make_rng("dropout"))
