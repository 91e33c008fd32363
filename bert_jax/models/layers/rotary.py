"""Rotary position embeddings (Su et al., 2021) as ModernBERT and transformers apply them.

Each pair of a head's dimensions (i, i + hd/2) is rotated by position x theta^(-2i/hd):
q' = q cos + rotate_half(q) sin, likewise k, so q'.k' depends only on the distance between
two tokens. Positions are per token (packed rows restart them at each instance), so no
length is fixed by the parameters; on a CPU the angles' cosines and sines are looked up in a
table as long as the row (`rotary_angles` says why).
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np

from bert_jax.models.layers.platform import traced_platform

Array = jax.Array


def inverse_frequencies(head_dim: int, theta: float) -> np.ndarray:
    """theta^(-2i/hd) for i < hd/2, (hd/2,) float32: computed in float64 and rounded once,
    so each is the float32 nearest the exact value (torch computes it in float32, within an
    ulp of it; at position p an ulp of difference moves the angle by p x 6e-8)."""
    exponents = np.arange(0, head_dim, 2, dtype=np.float64) / head_dim
    return (1.0 / np.float64(theta) ** exponents).astype(np.float32)


def _angles(positions, head_dim: int, theta: float, xp):
    """(..., T, hd) float32 angles of (..., T) positions, each frequency twice (dimensions i
    and i + hd/2 share it), formed by `xp` (numpy for the tables, jax.numpy in a program): one
    float32 product each, so both give the same bits."""
    frequencies = positions[..., None].astype(xp.float32) * inverse_frequencies(head_dim, theta)
    return xp.concatenate([frequencies, frequencies], axis=-1)


@functools.lru_cache(maxsize=16)
def angle_tables(length: int, head_dim: int, theta: float) -> tuple[np.ndarray, np.ndarray]:
    """(cos, sin) of positions 0 .. length - 1, each (length, hd) float32: the angles are the
    float32 products `rotary_angles` forms (rounded as XLA's multiply rounds them), their
    cosine and sine taken in float64 and rounded once, so each entry is the float32 nearest
    the exact value (XLA's and torch's float32 cosines are within an ulp or two of it)."""
    angles = _angles(np.arange(length), head_dim, theta, np).astype(np.float64)
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def rotary_angles(positions: Array, head_dim: int, theta: float) -> tuple[Array, Array]:
    """(cos, sin), each (..., T, hd) float32, of (..., T) integer positions in [0, T): a row's
    tokens, or its instances' tokens counted from each instance's start.

    On a CPU they are read from `angle_tables`: XLA's CPU compiler fuses an evaluated cosine
    and sine into every rotation that reads them, forward and backward, so it evaluated them
    for each head and for each of the gradient's query and key pieces (a layer's QKV gradient
    took 15-18 ms of ModernBERT's packed 2 x 1,024 train step against 4 ms for the GeGLU's of
    the same size); looked up, the train step ran 1.02-1.03x and the forward 1.02-1.04x faster.
    A position outside [0, T) reads NaN there, so a wrong one cannot pass unseen. An
    accelerator evaluates them in its fusions at no cost, and keeps doing so."""
    if traced_platform() == "cpu":
        length = positions.shape[-1]
        # take() would read a negative index from the table's end, as Python does
        rows = jnp.where(positions >= 0, positions, length)
        return tuple(jnp.take(table, rows, axis=0, mode="fill", fill_value=jnp.nan)
                     for table in angle_tables(length, head_dim, theta))
    angles = _angles(positions, head_dim, theta, jnp)
    return jnp.cos(angles), jnp.sin(angles)


def rotate(x: Array, cos: Array, sin: Array) -> Array:
    """`x` (B, T, nh, hd) rotated by (B or 1, T, hd) angles, in float32, returned in x's dtype."""
    x32 = x.astype(jnp.float32)
    first, second = jnp.split(x32, 2, axis=-1)
    rotated_half = jnp.concatenate([-second, first], axis=-1)  # (B, T, nh, hd)
    cos, sin = cos[..., None, :], sin[..., None, :]  # (B, T, 1, hd): one angle for every head
    return (x32 * cos + rotated_half * sin).astype(x.dtype)
