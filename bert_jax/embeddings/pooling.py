"""Token vectors -> one vector per text, as sentence-transformers' Pooling and Normalize do.

Pure jax.numpy functions of (hidden states, mask), so the same code runs in `bert-jax embed`
and inside a jitted training step.
"""

from collections.abc import Sequence

import jax
import jax.numpy as jnp

# sentence-transformers' names, in the order it concatenates them when several are on.
POOLING_MODES = ("cls", "max", "mean", "mean_sqrt_len_tokens")


def pool(hidden, input_mask, modes: Sequence[str]):
    """(B, T, H) hidden states and (B, T) mask -> (B, H * len(modes)), modes concatenated.

    Padding positions never contribute: `max` ignores them, `mean` divides by the number of
    real tokens (at least 1e-9, as sentence-transformers clamps it).
    """
    mask = input_mask[..., None].astype(hidden.dtype)  # (B, T, 1)
    token_count = jnp.maximum(mask.sum(axis=1), 1e-9)  # (B, 1)
    outputs = []
    for mode in modes:
        if mode == "cls":
            outputs.append(hidden[:, 0])
        elif mode == "max":
            outputs.append(jnp.where(mask > 0, hidden, -jnp.inf).max(axis=1))
        elif mode == "mean":
            outputs.append((hidden * mask).sum(axis=1) / token_count)
        elif mode == "mean_sqrt_len_tokens":
            outputs.append((hidden * mask).sum(axis=1) / jnp.sqrt(token_count))
        else:
            raise ValueError(f"unknown pooling mode {mode!r}; expected one of {POOLING_MODES}")
    return jnp.concatenate(outputs, axis=-1)


def normalize(vectors):
    """Each row divided by its L2 norm (at least 1e-12, as torch.nn.functional.normalize).

    Written with rsqrt of the clamped squared norm, so a zero row has a zero gradient,
    not the NaN that differentiating sqrt at 0 would give.
    """
    squared = (vectors * vectors).sum(axis=-1, keepdims=True)
    return vectors * jax.lax.rsqrt(jnp.maximum(squared, 1e-24))


def cosine_matrix(left, right):
    """(A, H), (B, H) -> (A, B) cosine similarities."""
    return normalize(left) @ normalize(right).T
