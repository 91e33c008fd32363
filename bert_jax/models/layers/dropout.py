"""Inverted dropout drawing 16 random bits per element instead of flax's 32."""

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.extend.random import threefry2x32_p

Array = jax.Array


def random_quarters(key: Array, shape: tuple[int, ...]) -> Array:
    """Uniform 16-bit random numbers (in uint32) of `shape`, four per threefry2x32 block.

    `jax.random.bits` hashes one counter per 32-bit output and folds the block's two words
    into one, so a 16-bit number would cost half a block; here each block's 64 bits give
    four. Counters are (row, index within the row), both iotas, so the draw stays an
    elementwise function of the position that XLA fuses and splits along the batch like
    `jax.random.bits` (the last axis, never sharded, holds the four quarters).
    """
    if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        key = jax.random.key_data(key)
    if key.shape != (2,):
        raise ValueError(f"dropout needs a threefry key (2 uint32 words), got shape {key.shape}")
    blocks = (*shape[:-1], -(-shape[-1] // 4))
    if len(blocks) == 1:
        return random_quarters(key, (1, *shape))[0]
    rows = jax.lax.broadcasted_iota(jnp.uint32, blocks, 0)
    within, stride = jnp.zeros(blocks, jnp.uint32), 1
    for axis in reversed(range(1, len(blocks))):
        within = within + jax.lax.broadcasted_iota(jnp.uint32, blocks, axis) * jnp.uint32(stride)
        stride *= blocks[axis]
    high, low = threefry2x32_p.bind(key[0], key[1], rows, within)
    quarters = jnp.concatenate([high & 0xFFFF, high >> 16, low & 0xFFFF, low >> 16], axis=-1)
    return quarters[..., :shape[-1]]


def dropout(x: Array, rate: float, key: Array) -> Array:
    """`x` with each element kept with probability about 1 - `rate` and scaled by its inverse.

    16 random bits per element (`random_quarters`), where flax's `nn.Dropout` draws 32:
    a quarter of its random-number work, which is one of the largest non-matmul costs of a
    CPU train step (bench/profile_step.py). Elements are kept with probability
    round(keep * 2^16) / 2^16 (0.899994 for rate 0.1) and scaled by its inverse, so the
    layer stays unbiased.
    """
    if rate == 0.0:
        return x
    threshold = round((1.0 - rate) * 2**16)
    if threshold == 0:  # rate 1 (or within 2^-17 of it): drop everything
        return jnp.zeros_like(x)
    scale = jnp.asarray(2**16 / threshold, x.dtype)
    with jax.named_scope("dropout"):  # names the ops for profiles (bench/profile_step.py)
        keep = random_quarters(key, x.shape) < threshold
        return jnp.where(keep, x * scale, jnp.zeros_like(x))


class Dropout(nn.Module):
    """`dropout` as a layer: a fresh key from the `dropout` stream on every call."""
    rate: float

    @nn.compact
    def __call__(self, x: Array, deterministic: bool) -> Array:
        if deterministic or self.rate == 0.0:
            return x
        return dropout(x, self.rate, self.make_rng("dropout"))
