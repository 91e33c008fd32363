"""Masks drawn in tf.data for every batch (RoBERTa's dynamic masking), with BERT's statistics.

The stored masks are undone first (each masked position gets its label back), so any shard
works, pre-masked or written unmasked (`--masked-lm-prob 0`). Then, as in the original
`create_masked_lm_predictions`: num_to_predict = min(P, max(1, round(num_tokens * prob)))
positions among the real non-special tokens, chosen uniformly without replacement; 80%
become [MASK], 10% keep their token, 10% a token drawn uniformly from the vocabulary.
"""

import tensorflow as tf


def unmask(input_ids, positions, labels, weights):
    """input_ids (B, T) with each weighted position (B, P) given back its label (B, P)."""
    rows = tf.broadcast_to(tf.range(tf.shape(positions)[0])[:, None], tf.shape(positions))
    where = tf.stack([rows, positions], axis=-1)  # (B, P, 2)
    current = tf.gather_nd(input_ids, where)
    restored = tf.where(weights > 0, labels, current)
    return tf.tensor_scatter_nd_update(input_ids, where, restored)


def remask(batch: dict, seed, *, vocab_size: int, mask_id: int, special_ids: tuple[int, ...],
           masked_lm_prob: float, max_predictions: int) -> dict:
    """A batch with fresh masks drawn from the stateless `seed` (shape (2,), int64)."""
    input_ids = unmask(batch["input_ids"], batch["masked_lm_positions"],
                       batch["masked_lm_ids"], batch["masked_lm_weights"])
    real = batch["input_mask"] > 0
    candidate = real
    for special in special_ids:
        candidate &= input_ids != special
    num_tokens = tf.reduce_sum(tf.cast(real, tf.float32), axis=1)  # (B,), counts [CLS]/[SEP]
    num_to_predict = tf.minimum(
        max_predictions, tf.maximum(1, tf.cast(tf.round(num_tokens * masked_lm_prob), tf.int32)))
    seeds = tf.random.experimental.stateless_split(tf.cast(seed, tf.int64), 4)
    keys = tf.random.stateless_uniform(tf.shape(input_ids), seeds[0])
    keys = tf.where(candidate, keys, 2.0)  # non-candidates sort last
    _, order = tf.math.top_k(-keys, k=max_predictions)  # (B, P): candidates in random order
    rank = tf.range(max_predictions)[None, :]
    chosen = (rank < num_to_predict[:, None]) & tf.gather(candidate, order, batch_dims=1)
    seq_len = tf.shape(input_ids)[1]
    positions = tf.sort(tf.where(chosen, order, seq_len), axis=1)  # chosen first, in order
    weights = positions < seq_len
    positions = tf.where(weights, positions, 0)
    labels = tf.where(weights, tf.gather(input_ids, positions, batch_dims=1), 0)

    shape = tf.shape(positions)
    to_mask = tf.random.stateless_uniform(shape, seeds[1]) < 0.8
    keep = tf.random.stateless_uniform(shape, seeds[2]) < 0.5
    random_ids = tf.random.stateless_uniform(shape, seeds[3], maxval=vocab_size, dtype=tf.int32)
    replacement = tf.where(to_mask, mask_id, tf.where(keep, labels, random_ids))
    rows = tf.broadcast_to(tf.range(shape[0])[:, None], shape)
    where = tf.stack([rows, positions], axis=-1)  # (B, P, 2)
    new_ids = tf.where(weights, replacement, tf.gather_nd(input_ids, where))
    input_ids = tf.tensor_scatter_nd_update(input_ids, where, new_ids)
    return dict(batch, input_ids=input_ids, masked_lm_positions=positions,
                masked_lm_ids=labels, masked_lm_weights=tf.cast(weights, tf.float32))
