"""Semantic textual similarity: cosine of two texts' embeddings, judged against gold scores."""

import numpy as np

from bert_jax.embeddings.encoder import EmbeddingModel, embed_texts


def pair_cosines(model: EmbeddingModel, first: list[str], second: list[str],
                 batch_size: int = 32, progress: bool = False) -> np.ndarray:
    """(N,) cosine similarity of each (first[i], second[i]) pair's embeddings."""
    embeddings = embed_texts(model, list(first) + list(second), batch_size, progress)
    left, right = embeddings[:len(first)], embeddings[len(first):]
    norms = np.linalg.norm(left, axis=1) * np.linalg.norm(right, axis=1)
    return (left * right).sum(axis=1) / np.maximum(norms, 1e-12)


def correlations(predicted: np.ndarray, gold: np.ndarray) -> dict[str, float]:
    """Pearson and Spearman correlation (scipy), the STS benchmark's metrics."""
    from scipy import stats

    return dict(pearson=float(stats.pearsonr(predicted, gold).statistic),
                spearman=float(stats.spearmanr(predicted, gold).statistic))
