"""Rotary position embeddings (Su et al., 2021) as ModernBERT and transformers apply them.

Each pair of a head's dimensions (i, i + hd/2) is rotated by position x theta^(-2i/hd):
q' = q cos + rotate_half(q) sin, likewise k, so q'.k' depends only on the distance between
two tokens. Positions are per token (packed rows restart them at each instance), so no
table is looked up and no length is fixed by the parameters.
"""

import jax
import jax.numpy as jnp
import numpy as np

Array = jax.Array


def inverse_frequencies(head_dim: int, theta: float) -> np.ndarray:
    """theta^(-2i/hd) for i < hd/2, (hd/2,) float32: computed in float64 and rounded once,
    so each is the float32 nearest the exact value (torch computes it in float32, within an
    ulp of it; at position p an ulp of difference moves the angle by p x 6e-8)."""
    exponents = np.arange(0, head_dim, 2, dtype=np.float64) / head_dim
    return (1.0 / np.float64(theta) ** exponents).astype(np.float32)


def rotary_angles(positions: Array, head_dim: int, theta: float) -> tuple[Array, Array]:
    """(cos, sin), each (..., T, hd) float32, of (..., T) integer positions."""
    frequencies = positions[..., None].astype(jnp.float32) * inverse_frequencies(head_dim, theta)
    angles = jnp.concatenate([frequencies, frequencies], axis=-1)  # (..., T, hd)
    return jnp.cos(angles), jnp.sin(angles)


def rotate(x: Array, cos: Array, sin: Array) -> Array:
    """`x` (B, T, nh, hd) rotated by (B or 1, T, hd) angles, in float32, returned in x's dtype."""
    x32 = x.astype(jnp.float32)
    first, second = jnp.split(x32, 2, axis=-1)
    rotated_half = jnp.concatenate([-second, first], axis=-1)  # (B, T, nh, hd)
    cos, sin = cos[..., None, :], sin[..., None, :]  # (B, T, 1, hd): one angle for every head
    return (x32 * cos + rotated_half * sin).astype(x.dtype)
