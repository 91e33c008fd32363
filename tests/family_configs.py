"""Every model family at a tiny size and a depth that covers its layer scan, and a batch for
them: the scanned-layer tests and the matrix-product library's tests run the same models."""

import jax.numpy as jnp
import numpy as np

from bert_jax.models.presets import preset

# ModernBERT's 5 layers are layer 0 alone, one block of layers 1-3 (two sliding, one global)
# and layer 4 alone.
CONFIGS = {
    "bert": preset("tiny", vocab_size=64, num_layers=3, max_positions=32, dropout_rate=0.0,
                   attention_dropout_rate=0.0),
    "modernbert": preset("modernbert-tiny", vocab_size=64, num_layers=5, local_attention=8,
                         max_positions=32),
    "eurobert": preset("eurobert-tiny", vocab_size=64, num_layers=3, max_positions=32),
}
# Three masked-LM slots in each row of `family_batch`.
POSITIONS = np.array([[1, 4, 7], [2, 5, 9], [1, 2, 3]], np.int32)


def family_batch(seed: int = 0):
    """(input_ids, segment_ids, input_mask) (3, 24): a full row and two padded ones."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, 64, (3, 24)).astype(np.int32)
    mask = (np.arange(24)[None] < np.array([[24], [13], [6]])).astype(np.int32)
    return jnp.asarray(ids * mask), jnp.zeros_like(ids), jnp.asarray(mask)
