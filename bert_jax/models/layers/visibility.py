"""Which keys each query may see: the one rule every attention implementation applies.

Key k is visible to query q iff ids[k] > 0 and (ids[q] == ids[k] or ids[q] == 0), and, in a
sliding-window layer (ModernBERT's local layers), |q - k| <= window. Instances of a packed
row are contiguous runs of one id, so the distance within a row is the distance within the
instance, and a window never reaches into another instance (the ids already forbid it).
"""

import jax
import jax.numpy as jnp

Array = jax.Array


def visible_keys(instance_ids: Array, window: int | None = None) -> Array:
    """Which keys each query sees, (B, 1, T, T) bool, from (B, T) instance ids and, for a
    sliding-window layer, `window` (keys at most that many tokens away on either side)."""
    query_ids = instance_ids[:, None, :, None]  # (B, 1, T, 1)
    key_ids = instance_ids[:, None, None, :]  # (B, 1, 1, T)
    visible = visible_by_instance(query_ids, key_ids)
    if window is None:
        return visible
    return visible & within_window(instance_ids.shape[1], window)


def visible_by_instance(query_ids: Array, key_ids: Array) -> Array:
    """The instance rule alone, on query and key ids that broadcast against each other
    (e.g. (..., Tq, 1) and (..., 1, Tk)): bool of their broadcast shape."""
    return (key_ids > 0) & ((query_ids == key_ids) | (query_ids == 0))


def within_window(seq_len: int, window: int) -> Array:
    """(1, 1, T, T) bool: |q - k| <= window, the band a sliding-window layer attends in."""
    positions = jnp.arange(seq_len)
    distance = jnp.abs(positions[:, None] - positions[None, :])  # (T, T)
    return (distance <= window)[None, None]
