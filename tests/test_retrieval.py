"""`bert-jax retrieval`: BEIR's files read as BEIR reads them, the metrics equal to BEIR's
evaluator and to a hand nDCG, the run equal to brute-force cosine search, bad inputs one line."""

import json
import math
import os

import numpy as np
import pytest
from beir_helpers import DOCUMENTS, QRELS, tiny_embedding_model, write_beir
from gcs_emulator import gcs_bucket, gcs_emulator  # noqa: F401  (fixtures)

from bert_jax.cli import main
from bert_jax.embeddings.encoder import embed_texts, load_embedding_model
from bert_jax.errors import UserError
from bert_jax.evaluation import retrieval
from bert_jax.storage import files
from input_pipeline.tasks import beir_data


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    return tiny_embedding_model(tmp_path_factory.mktemp("tiny-retrieval"))


def test_reader_reads_what_beirs_generic_data_loader_reads(tmp_path):
    beir_loader = pytest.importorskip("beir.datasets.data_loader")
    from beir.retrieval.models.util import extract_corpus_sentences

    directory = write_beir(tmp_path / "beir")
    corpus, queries, qrels = beir_loader.GenericDataLoader(directory).load("test")
    ours = beir_data.read_beir(directory)
    assert ours.document_ids == list(corpus)
    # BEIR's sentence-transformers wrapper's join (sep " "), on the documents BEIR loaded.
    assert ours.document_texts == extract_corpus_sentences(list(corpus.values()), sep=" ")
    assert ours.document_texts[2] == "the cat sat on the mat , happy"  # empty title: no space
    assert ours.query_ids == list(queries) == ["q1", "q2", "q3", "q4"]  # q9 is not judged
    assert ours.query_texts == list(queries.values())
    assert ours.qrels == qrels


def _random_run(seed: int) -> dict[str, list[retrieval.Hit]]:
    """Every document for every judged query, with distinct random scores (no ties)."""
    generator = np.random.default_rng(seed)
    run = {}
    for query in ("q1", "q2", "q3", "q4"):
        scores = generator.permutation(len(DOCUMENTS)) / len(DOCUMENTS) + 0.01
        hits = sorted(zip(DOCUMENTS, scores), key=lambda pair: -pair[1])
        run[query] = [retrieval.Hit(document, float(score)) for document, score in hits
                      if document != query]  # as retrieve() leaves the identical id out
    return run


@pytest.mark.parametrize("seed", range(5))
def test_metrics_equal_beirs_evaluator(seed, monkeypatch):
    evaluation = pytest.importorskip("beir.retrieval.evaluation")
    from beir.retrieval import custom_metrics

    # BEIR rounds its means to 5 decimals; without that round (shadowed in its two modules)
    # its numbers are its own sums over pytrec_eval's per-query values, comparable to 1e-6.
    for module in (evaluation, custom_metrics):
        monkeypatch.setattr(module, "round", lambda value, digits: value, raising=False)
    qrels = {}
    for query, document, score in QRELS:
        qrels.setdefault(query, {})[document] = score
    run = _random_run(seed)
    scored = {query: {hit.document_id: hit.score for hit in hits} for query, hits in run.items()}
    ndcg, _, recall, _ = evaluation.EvaluateRetrieval.evaluate(qrels, scored, [10, 100])
    mrr = evaluation.EvaluateRetrieval.evaluate_custom(qrels, scored, [10], "mrr")
    ours = retrieval.score_run(qrels, run)
    # Both sides: float64 means of the same trec_eval values (MRR: the same reciprocal ranks).
    assert ours == pytest.approx({"ndcg@10": ndcg["NDCG@10"], "recall@100": recall["Recall@100"],
                                  "mrr@10": mrr["MRR@10"]}, abs=1e-6)
    assert 0 < ours["ndcg@10"] < 1  # a run that is neither perfect nor empty


def _naive_ndcg(ranked_gains: list[int], judged_gains: list[int], cutoff: int) -> float:
    """sum gain / log2(rank + 1) over the top `cutoff`, over the same for the ideal order."""
    def dcg(gains):
        gains = np.asarray(gains[:cutoff], np.float64)
        return float(np.sum(gains / np.log2(np.arange(2, len(gains) + 2))))
    return dcg(ranked_gains) / dcg(sorted(judged_gains, reverse=True))


def test_ndcg_recall_and_mrr_on_a_hand_example():
    # One query, relevant documents a (gain 3), b (1) and c (2); c is never retrieved.
    qrels = {"q": {"a": 3, "b": 1, "c": 2, "z": 0}}
    ranked = ["x", "b", "y", "a", "z"] + [f"n{index}" for index in range(10)]
    run = {"q": [retrieval.Hit(document, 1.0 - rank / 100) for rank, document in
                 enumerate(ranked)]}
    gains = [qrels["q"].get(document, 0) for document in ranked]
    metrics = retrieval.score_run(qrels, run)
    by_hand = (1 / math.log2(3) + 3 / math.log2(5)) / (3 + 2 / math.log2(3) + 1 / math.log2(4))
    assert metrics["ndcg@10"] == pytest.approx(_naive_ndcg(gains, [3, 1, 2, 0], 10), abs=1e-12)
    assert metrics["ndcg@10"] == pytest.approx(by_hand, abs=1e-12)
    assert metrics["recall@100"] == pytest.approx(2 / 3, abs=1e-12)
    assert metrics["mrr@10"] == pytest.approx(1 / 2, abs=1e-12)  # b, at rank 2


def test_retrieval_command_writes_the_brute_force_run_and_its_metrics(tiny_model, tmp_path,
                                                                       capsys):
    directory = write_beir(tmp_path / "beir")
    workdir = tmp_path / "run"
    assert main(["retrieval", "--model", tiny_model, "--data", directory, "--workdir",
                 str(workdir), "--batch-size", "3", "--no-progress"]) == 0
    assert "ndcg@10" in capsys.readouterr().out
    dataset = beir_data.read_beir(directory)
    model = load_embedding_model(tiny_model)
    assert model.settings.max_seq_len == 16  # the directory's own length
    embeddings = embed_texts(model, dataset.document_texts + dataset.query_texts, 3,
                             progress=False)
    documents, queries = embeddings[:8], embeddings[8:]
    cosines = queries @ documents.T  # unit rows: (Q, N) cosines
    lines = [line.split() for line in (workdir / retrieval.RUN_FILE).read_text().splitlines()]
    for query_index, query in enumerate(dataset.query_ids):
        hits = [line for line in lines if line[0] == query]
        expected = [dataset.document_ids[row] for row in np.argsort(-cosines[query_index])
                    if dataset.document_ids[row] != query]
        assert [hit[2] for hit in hits] == expected
        assert [int(hit[3]) for hit in hits] == list(range(1, len(expected) + 1))
        assert all(hit[1] == "Q0" and hit[5] == retrieval.RUN_TAG for hit in hits)
        # Cosines of unit float32 vectors of 32 coordinates, summed in two orders: 64 steps
        # of 1 covers both.
        np.testing.assert_allclose(
            [float(hit[4]) for hit in hits],
            [cosines[query_index, dataset.document_ids.index(name)] for name in expected],
            rtol=0, atol=64 * 2 ** -23)
    run = {}
    for query, _, document, _, score, _ in lines:
        run.setdefault(query, []).append(retrieval.Hit(document, float(score)))
    written = json.loads((workdir / retrieval.METRICS_FILE).read_text())
    assert list(written) == ["ndcg@10", "recall@100", "mrr@10"]
    assert written == retrieval.score_run(dataset.qrels, run)  # the run file scores alike


def test_retrieval_reads_and_writes_gs_as_local(tiny_model, gcs_bucket, tmp_path):
    local = write_beir(tmp_path / "beir")
    for name in ("corpus.jsonl", "queries.jsonl", "qrels/test.tsv"):
        files.copy_file(os.path.join(local, name), f"{gcs_bucket}/beir/{name}")
    for data, workdir in ((local, str(tmp_path / "run")),
                          (f"{gcs_bucket}/beir", f"{gcs_bucket}/run")):
        assert main(["retrieval", "--model", tiny_model, "--data", data, "--workdir", workdir,
                     "--no-progress"]) == 0
    for name in (retrieval.METRICS_FILE, retrieval.RUN_FILE):
        assert files.read_text(f"{gcs_bucket}/run/{name}") == (tmp_path / "run" / name).read_text()


def _replace_line(path, number: int, text: str) -> None:
    lines = open(path, encoding="utf-8").read().split("\n")
    lines[number - 1] = text
    open(path, "w", encoding="utf-8").write("\n".join(lines))


BAD_INPUTS = [
    ("corpus.jsonl", 3, '{"_id": "d3", "text": ', "corpus.jsonl: line 3 is not JSON"),
    ("corpus.jsonl", 2, '{"_id": "d1", "text": "again"}',
     "corpus.jsonl: line 2 repeats _id 'd1' (first on line 1)"),
    ("corpus.jsonl", 4, '{"_id": "q2", "title": "x"}', 'corpus.jsonl: line 4 has no "text"'),
    ("queries.jsonl", 2, '{"text": "no id"}', 'queries.jsonl: line 2 has no "_id"'),
    ("queries.jsonl", 1, '["q1", "text"]', "queries.jsonl: line 1 is not a JSON object"),
    ("qrels/test.tsv", 3, "q1\td7", "test.tsv: line 3 has 2 columns; expected 3"),
    ("qrels/test.tsv", 2, "q1\td1\trelevant", "test.tsv: line 2: score 'relevant' is not"),
    ("qrels/test.tsv", 4, "q1\tnowhere\t1", "test.tsv: query 'q1' judges document 'nowhere', "
                                             "which is not in corpus.jsonl"),
    ("qrels/test.tsv", 5, "q7\td1\t1", "test.tsv: query 'q7' is not in queries.jsonl"),
]


@pytest.mark.parametrize("name, line, text, message", BAD_INPUTS,
                         ids=[message.split(": ", 1)[1][:30] for *_, message in BAD_INPUTS])
def test_bad_inputs_are_one_line_naming_the_file_and_line(name, line, text, message, tmp_path,
                                                           capsys):
    directory = write_beir(tmp_path / "beir")
    _replace_line(os.path.join(directory, name), line, text)
    workdir = tmp_path / "run"
    # The model is read after the data: a bad file fails before any model is loaded.
    assert main(["retrieval", "--model", str(tmp_path / "no-model"), "--data", directory,
                 "--workdir", str(workdir)]) == 2
    error = capsys.readouterr().err
    assert message in error and error.count("\n") == 1, error
    assert not os.path.exists(workdir / retrieval.METRICS_FILE)


def test_missing_files_and_flags_are_one_line(tmp_path, capsys):
    directory = write_beir(tmp_path / "beir")
    for arguments, message in (
            (["--data", str(tmp_path / "absent")], "absent: not a directory; expected a BEIR"),
            (["--data", directory, "--split", "dev"], "qrels/dev.tsv: qrels file not found"),
            (["--data", directory, "--top-k", "10"], "--top-k must be at least 100")):
        assert main(["retrieval", "--model", "m", "--workdir", str(tmp_path / "run"),
                     *arguments]) == 2
        error = capsys.readouterr().err
        assert message in error and error.count("\n") == 1, error
    os.remove(os.path.join(directory, "corpus.jsonl"))
    with pytest.raises(UserError, match="corpus.jsonl: corpus file not found"):
        beir_data.read_beir(directory)
    spaced = {**DOCUMENTS, "d 9": ("", "the dog")}
    with pytest.raises(UserError, match="document _id 'd 9' holds whitespace"):
        retrieval.check_trec_identifiers(beir_data.read_beir(write_beir(tmp_path / "s", spaced)))
