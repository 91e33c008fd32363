"""Cosine similarity of embeddings in numpy, and the STS benchmark's correlations.

The one cosine for embeddings that have left the model (evaluation, predictions, search).
The training losses need a differentiable one inside the jitted step: that is
`pooling.normalize`, in JAX.
"""

import numpy as np


def unit_rows(vectors: np.ndarray) -> np.ndarray:
    """(..., D) vectors divided by their L2 norm (at least 1e-12: a zero row stays zero)."""
    norms = np.linalg.norm(vectors, axis=-1, keepdims=True)
    return vectors / np.maximum(norms, 1e-12)


def pair_cosines(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """(N, D), (N, D) -> (N,) cosine similarity of each row pair."""
    return (unit_rows(first) * unit_rows(second)).sum(axis=-1)


def correlations(predicted: np.ndarray, gold: np.ndarray) -> dict[str, float]:
    """Pearson and Spearman correlation (scipy), the STS benchmark's metrics."""
    from scipy import stats

    return dict(pearson=float(stats.pearsonr(predicted, gold).statistic),
                spearman=float(stats.spearmanr(predicted, gold).statistic))
