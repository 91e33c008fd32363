"""bert-jax models as MTEB encoders: `mteb.evaluate` runs a retrieval task (built offline from a
made-up BEIR directory) on `MtebEncoder` and scores it as it scores sentence-transformers' own
model of the same weights, and as `bert-jax retrieval` does."""

import json

import numpy as np
import pytest
from beir_helpers import QRELS, tiny_embedding_model, write_beir
from tolerances import ENCODER_STEPS, float32_steps

from bert_jax.cli import main
from input_pipeline.tasks.beir_data import read_beir

mteb = pytest.importorskip("mteb")
sentence_transformers = pytest.importorskip("sentence_transformers")
from datasets import Dataset  # noqa: E402  (mteb's own dependency)
from mteb.abstasks.retrieval import AbsTaskRetrieval  # noqa: E402
from mteb.abstasks.task_metadata import TaskMetadata  # noqa: E402

from bert_jax.evaluation.mteb_encoder import MtebEncoder  # noqa: E402

# mteb drops queries without a relevant document, BEIR keeps them (scoring 0): left out here.
JUDGED = [row for row in QRELS if row[0] != "q4"]


def beir_task(directory: str) -> AbsTaskRetrieval:
    """An mteb retrieval task over a local BEIR directory, read by bert-jax's reader: how a user
    runs mteb on data that is not on the Hub."""

    class LocalBeir(AbsTaskRetrieval):
        ignore_identical_ids = True  # BEIR's default, which `bert-jax retrieval` follows
        metadata = TaskMetadata(
            type="Retrieval", name="LocalBeir", main_score="ndcg_at_10",
            description="A made-up BEIR directory.", reference=None,
            dataset={"path": directory, "revision": "local"}, category="t2t",
            eval_splits=["test"], eval_langs=["eng-Latn"], date=None, dialect=None,
            domains=None, task_subtypes=None, license=None, annotations_creators=None,
            modalities=["text"], sample_creation=None, bibtex_citation=None)

        def load_data(self, num_proc=None, **kwargs):
            data = read_beir(directory)
            self.dataset = {"default": {"test": dict(
                corpus=Dataset.from_list([dict(id=name, text=text) for name, text in
                                          zip(data.document_ids, data.document_texts)]),
                queries=Dataset.from_list([dict(id=name, text=text) for name, text in
                                           zip(data.query_ids, data.query_texts)]),
                relevant_docs=data.qrels, top_ranked=None)}}
            self.data_loaded = True

    return LocalBeir()


RANKING = ("ndcg_at_", "map_at_", "recall_at_", "precision_at_", "mrr_at_")


def test_mteb_evaluates_a_bert_jax_model_as_it_does_sentence_transformers(tmp_path, capsys):
    model = tiny_embedding_model(tmp_path)
    exported = str(tmp_path / "st")
    assert main(["convert", model, exported, "--to", "sentence-transformers"]) == 0
    directory = write_beir(tmp_path / "beir", qrels=JUDGED)
    encoder = MtebEncoder(model, name="bert-jax/tiny")
    reference = sentence_transformers.SentenceTransformer(exported, device="cpu")
    assert isinstance(encoder, mteb.models.EncoderProtocol)
    assert encoder.mteb_model_meta.embed_dim == 32 and encoder.mteb_model_meta.max_tokens == 16

    data = read_beir(directory)
    texts = data.document_texts + data.query_texts
    ours = encoder.encode([{"text": texts[:5]}, {"text": texts[5:]}], task_metadata=None,
                          hf_split="test", hf_subset="default", batch_size=4)
    theirs = reference.encode(texts, batch_size=4)
    # Unit vectors from two implementations: ENCODER_STEPS steps of their norm, 1.
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=float32_steps(ENCODER_STEPS, 1.0))
    # Each cosine moves by at most `shift` between the two; no two of a query's cosines lie
    # within 2 x shift, so both rank every query's documents alike.
    shift = 2 * np.sqrt(32) * float32_steps(ENCODER_STEPS, 1.0)
    cosines = theirs[len(data.document_texts):] @ theirs[:len(data.document_texts)].T
    assert np.diff(np.sort(cosines, axis=1), axis=1).min() > 2 * shift

    scores = [mteb.evaluate(candidate, [beir_task(directory)], cache=None,
                            show_progress_bar=False).task_results[0].scores["test"][0]
              for candidate in (encoder, reference)]
    ranking = {key: value for key, value in scores[0].items() if key.startswith(RANKING)}
    assert len(ranking) > 20
    # The same rankings scored by the same code: equal but for float64 sums' order.
    assert ranking == pytest.approx({key: scores[1][key] for key in ranking}, abs=1e-12)
    # And what `bert-jax retrieval` writes for the same model and data, which mteb rounds to
    # 5 decimals: within half a unit of the 5th (and float64 sums' order).
    assert main(["retrieval", "--model", model, "--data", directory, "--workdir",
                 str(tmp_path / "run"), "--no-progress"]) == 0
    written = json.loads((tmp_path / "run" / "retrieval.json").read_text())
    assert written == pytest.approx({"ndcg@10": ranking["ndcg_at_10"], "recall@100":
                                     ranking["recall_at_100"], "mrr@10": ranking["mrr_at_10"]},
                                    abs=0.5e-5 + 1e-12)
