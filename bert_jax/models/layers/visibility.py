"""Which keys each query may see: the one rule every attention implementation applies."""

import jax

Array = jax.Array


def visible_keys(instance_ids: Array) -> Array:
    """Which keys each query sees, (B, 1, T, T) bool, from (B, T) instance ids."""
    query_ids = instance_ids[:, None, :, None]  # (B, 1, T, 1)
    key_ids = instance_ids[:, None, None, :]  # (B, 1, 1, T)
    return (key_ids > 0) & ((query_ids == key_ids) | (query_ids == 0))
