"""Siamese training losses over sentence embeddings, as in sentence-transformers.

Each returns (sum, count) in float32 so means stay exact across micro-batches and hosts (the
task seam's convention). `weights` (B,) is 1 for real rows and 0 for filler rows that pad
the last batch; a filler row neither contributes a loss nor serves as anybody's negative.

The ranking losses (CoSENT, MNRL) compare rows with each other, so they are computed on the
whole batch the jitted step sees. Under the mesh that batch is global: its rows are sharded
over every device, and the (B, B) score matrices below make XLA gather the other devices'
embeddings, so each anchor's in-batch negatives come from all devices, not just its own.
"""

import jax
import jax.numpy as jnp

from bert_jax.embeddings.pooling import normalize

NEGATIVE_INFINITY = -1e30  # a finite -inf: exp() gives 0 and gradients stay finite


def _pair_cosines(first, second):
    """(B, H), (B, H) -> (B,) cosine of each row pair."""
    return (normalize(first) * normalize(second)).sum(axis=-1)


def cosine_loss(first, second, gold, weights):
    """CosineSimilarityLoss: squared error between cos(u, v) and the gold score in [0, 1]."""
    errors = (_pair_cosines(first, second) - gold) ** 2  # (B,)
    return (errors * weights).sum(), weights.sum()


def cosent_loss(first, second, gold, weights, scale: float = 20.0):
    """CoSENT (Su, 2022): log(1 + sum over pairs with gold_i > gold_j of
    exp(scale * (cos_j - cos_i))), one value for the whole batch (count 1)."""
    scores = _pair_cosines(first, second) * scale  # (B,)
    differences = scores[None, :] - scores[:, None]  # (B, B): [i, j] = s_j - s_i
    ranked = (gold[:, None] > gold[None, :]) & (weights[:, None] > 0) & (weights[None, :] > 0)
    terms = jnp.where(ranked, differences, NEGATIVE_INFINITY).reshape(-1)
    loss = jax.nn.logsumexp(jnp.concatenate([jnp.zeros((1,), terms.dtype), terms]))
    return loss, jnp.ones((), jnp.float32)


def mnrl_loss(anchors, positives, weights, negatives=None, scale: float = 20.0):
    """MultipleNegativesRankingLoss: for anchor i, cross-entropy of `scale` * cosine against
    every positive (and hard negative) of the batch, the right answer being positive i.

    anchors, positives, negatives: (B, H). Returns (sum over real anchors, their count).
    """
    candidates = positives if negatives is None else jnp.concatenate([positives, negatives])
    candidate_weights = weights if negatives is None else jnp.concatenate([weights, weights])
    scores = scale * (normalize(anchors) @ normalize(candidates).T)  # (B, B or 2B)
    scores = jnp.where(candidate_weights[None, :] > 0, scores, NEGATIVE_INFINITY)
    log_probabilities = jax.nn.log_softmax(scores, axis=-1)
    rows = jnp.arange(anchors.shape[0])
    losses = -log_probabilities[rows, rows]  # (B,)
    return (losses * weights).sum(), weights.sum()


def softmax_features(first, second):
    """SBERT's classifier input: (u, v, |u - v|) concatenated, (B, 3H)."""
    return jnp.concatenate([first, second, jnp.abs(first - second)], axis=-1)


def softmax_loss(logits, labels, weights):
    """SoftmaxLoss: cross-entropy of the (u, v, |u - v|) classifier's logits (B, classes)."""
    log_probabilities = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    losses = -jnp.take_along_axis(log_probabilities, labels[:, None], axis=-1)[:, 0]
    return (losses * weights).sum(), weights.sum()
