"""Retrieval evaluation over a BEIR dataset: embed, exact cosine top-k, nDCG@10 / Recall@100 /
MRR@10.

The documents and queries are embedded by the embedding code `bert-jax embed` runs (the
model's own pooling, normalisation and maximum length) and ranked by exact cosine similarity
with the `search` command's top-k. As BEIR's `DenseRetrievalExactSearch` does, a document
whose id is the query's own is never a hit (BEIR's evaluator drops it too, by default:
ArguAna's and Quora's queries are also documents), so k + 1 are retrieved and the identical
one dropped.

Metrics come from ir-measures (Terrier's team; one dependency, pytrec-eval-terrier): nDCG@10
and Recall@100 through pytrec_eval, which is trec_eval's own C code and exactly what BEIR's
`EvaluateRetrieval.evaluate` calls; MRR@10 through MS MARCO's official reciprocal-rank code,
since trec_eval's recip_rank has no cutoff. Chosen over pytrec_eval alone (no MRR@10: BEIR
writes its own) and ranx (numba and its compiler as dependencies, and its own nDCG code
rather than trec_eval's). The mean is over every judged query (a query with no relevant
document in the run scores 0), which is BEIR's count when every query has hits.

Ties: trec_eval orders equal scores by document id (descending), MS MARCO's code by id
(ascending), BEIR's MRR by the run's order; exact cosines of distinct texts are rarely equal,
but a corpus with duplicate documents can move these metrics by the order of its ties.
"""

import dataclasses

import ir_measures
from ir_measures import RR, R, nDCG

from bert_jax.embeddings import search
from bert_jax.embeddings.encoder import EmbeddingModel, embed_texts
from bert_jax.errors import UserError
from bert_jax.storage import files, json_values
from input_pipeline.tasks.beir_data import BeirDataset

# The names retrieval.json uses -> the measures, each with the provider named above.
TRECEVAL_MEASURES = {"ndcg@10": nDCG @ 10, "recall@100": R @ 100}
MSMARCO_MEASURES = {"mrr@10": RR @ 10}
METRICS_FILE = "retrieval.json"
RUN_FILE = "run.trec"
RUN_TAG = "bert-jax"  # the TREC run's last column: the system's name
DEFAULT_TOP_K = 100  # Recall@100 needs 100 hits


@dataclasses.dataclass(frozen=True)
class Hit:
    document_id: str
    score: float  # cosine similarity


def retrieve(model: EmbeddingModel, dataset: BeirDataset, top_k: int = DEFAULT_TOP_K,
             batch_size: int = 32, progress: bool = True) -> dict[str, list[Hit]]:
    """query id -> its `top_k` documents by cosine similarity, best first (equal scores in
    corpus order), a document with the query's own id left out."""
    texts = dataset.document_texts + dataset.query_texts  # one pass, one progress bar
    embeddings = embed_texts(model, texts, batch_size, progress and len(texts) > batch_size)
    documents = embeddings[:len(dataset.document_texts)]  # (N, D)
    queries = embeddings[len(dataset.document_texts):]  # (Q, D)
    scores, rows = search.top_k(documents, queries, top_k + 1)  # (Q, k + 1)
    run = {}
    for query_id, query_scores, query_rows in zip(dataset.query_ids, scores, rows):
        hits = [Hit(dataset.document_ids[row], float(score))
                for score, row in zip(query_scores, query_rows)
                if dataset.document_ids[row] != query_id]
        run[query_id] = hits[:top_k]
    return run


def _scored(run: dict[str, list[Hit]]) -> dict[str, dict[str, float]]:
    return {query: {hit.document_id: hit.score for hit in hits} for query, hits in run.items()}


def score_run(qrels: dict[str, dict[str, int]], run: dict[str, list[Hit]]) -> dict[str, float]:
    """{"ndcg@10", "recall@100", "mrr@10"}: means over the judged queries."""
    scored = _scored(run)
    values = {}
    for provider, measures in ((ir_measures.pytrec_eval, TRECEVAL_MEASURES),
                               (ir_measures.msmarco, MSMARCO_MEASURES)):
        aggregate = provider.calc_aggregate(list(measures.values()), qrels, scored)
        values.update({name: float(aggregate[measure]) for name, measure in measures.items()})
    return values


def check_top_k(top_k: int) -> None:
    if top_k < DEFAULT_TOP_K:
        raise UserError(f"--top-k must be at least {DEFAULT_TOP_K} (Recall@100 reads 100 "
                        f"hits), got {top_k}")


def check_trec_identifiers(dataset: BeirDataset) -> None:
    """A TREC run separates its columns by whitespace, so no id may hold any."""
    for kind, identifiers in (("query", dataset.query_ids), ("document", dataset.document_ids)):
        spaced = next((name for name in identifiers if len(name.split()) != 1), None)
        if spaced is not None:
            raise UserError(f"{kind} _id {spaced!r} holds whitespace, which a TREC run file "
                            "cannot hold")


def trec_run_lines(run: dict[str, list[Hit]], tag: str = RUN_TAG) -> list[str]:
    """`query Q0 document rank score tag` lines (rank from 1): the TREC run format trec_eval,
    ir-measures, ranx and pyserini read. A score is written with float32's every digit
    (repr of the float64 it widens to), so a reader ranks exactly as this run did."""
    return [f"{query} Q0 {hit.document_id} {rank} {hit.score!r} {tag}"
            for query, hits in run.items() for rank, hit in enumerate(hits, start=1)]


def write_results(workdir: str, metrics: dict[str, float], run: dict[str, list[Hit]]) -> None:
    """WORKDIR/run.trec, then WORKDIR/retrieval.json, each published whole."""
    files.makedirs(workdir)
    files.write_text(files.join(workdir, RUN_FILE), "\n".join(trec_run_lines(run)) + "\n")
    files.write_text(files.join(workdir, METRICS_FILE),
                     json_values.dumps(metrics, indent=2) + "\n")


def evaluate(model: EmbeddingModel, dataset: BeirDataset, top_k: int = DEFAULT_TOP_K,
             batch_size: int = 32, progress: bool = True
             ) -> tuple[dict[str, float], dict[str, list[Hit]]]:
    """(the metrics, the run) of `model` on `dataset`."""
    check_top_k(top_k)
    check_trec_identifiers(dataset)
    run = retrieve(model, dataset, top_k, batch_size, progress)
    return score_run(dataset.qrels, run), run


def metrics_line(metrics: dict[str, float]) -> str:
    return "  ".join(f"{name} {value:.4f}" for name, value in metrics.items())
