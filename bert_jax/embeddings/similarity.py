"""Semantic textual similarity: cosine of two texts' embeddings, judged against gold scores."""

import numpy as np

from bert_jax.embeddings.encoder import EmbeddingModel, embed_texts, load_embedding_model
from bert_jax.errors import UserError


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


def evaluate_sts(model_path: str, data_path: str, batch_size: int = 32,
                 max_seq_len: int | None = None, progress: bool = False) -> dict[str, float]:
    """`bert-jax evaluate sts`: pearson and spearman of the cosine similarity of any embedding
    model (sentence-transformers, Hugging Face, bert-jax, fine-tuned) on a scored pair file
    (STS-B TSV, or JSONL with sentence1/sentence2/score)."""
    from bert_jax.tasks.sentence_embedding import read_pair_records, scores_of

    records = read_pair_records(data_path)
    gold = scores_of(records)
    if gold is None:
        raise UserError(f"{data_path}: expected similarity scores (numbers) in the label "
                        "column, found class labels")
    model = load_embedding_model(model_path, max_seq_len=max_seq_len)
    cosines = pair_cosines(model, [first for _, first, _, _ in records],
                           [second for _, _, second, _ in records], batch_size, progress)
    return correlations(cosines, gold)
