"""Shared by the retrieval and MTEB tests: a made-up BEIR directory and a tiny embedding model."""

import json
import os

import flax
import numpy as np

from interop_helpers import WORDS, random_pretraining_params, write_vocab

from bert_jax.embeddings.model_directory import EmbeddingSettings, write_settings
from bert_jax.interop import model_writers
from bert_jax.models.presets import preset
from input_pipeline.tokenization import load_tokenizer

# Made-up documents in the tiny vocabulary, so no text is all [UNK]. d3's title is empty and
# q2 is also a document id (BEIR's evaluator then drops that hit).
DOCUMENTS = {
    "d1": ("paris", "the man went to the store and bought milk"),
    "d2": ("london", "the dog sat on the mat"),
    "d3": ("", "the cat sat on the mat , happy"),
    "q2": ("home", "he went home and then it was happy"),
    "d5": ("city", "paris city and london city"),
    "d6": ("run", "the dog runs home"),
    "d7": ("milk", "a gallon of milk"),
    "d8": ("store", "it was the store"),
}
QUERIES = {"q1": "who bought milk ?", "q2": "the cat sat", "q3": "paris city", "q4": "the dog",
           "q9": "never judged"}
# Graded judgements, a judged-irrelevant (0) row, and q4 with no relevant document.
QRELS = [("q1", "d1", 2), ("q1", "d7", 1), ("q2", "d3", 1), ("q2", "d2", 0), ("q3", "d5", 1),
         ("q3", "d1", 1), ("q4", "d2", 0)]


def write_beir(directory, documents=DOCUMENTS, queries=QUERIES, qrels=QRELS) -> str:
    os.makedirs(os.path.join(directory, "qrels"), exist_ok=True)
    with open(os.path.join(directory, "corpus.jsonl"), "w", encoding="utf-8") as file:
        for identifier, (title, text) in documents.items():
            file.write(json.dumps({"_id": identifier, "title": title, "text": text}) + "\n")
    with open(os.path.join(directory, "queries.jsonl"), "w", encoding="utf-8") as file:
        for identifier, text in queries.items():
            file.write(json.dumps({"_id": identifier, "text": text}) + "\n")
    with open(os.path.join(directory, "qrels", "test.tsv"), "w", encoding="utf-8") as file:
        file.write("query-id\tcorpus-id\tscore\n")
        file.writelines(f"{query}\t{document}\t{score}\n" for query, document, score in qrels)
    return str(directory)


def tiny_embedding_model(work) -> str:
    """A bert-jax model directory with random weights in `work`: max pooling, normalised,
    16 tokens."""
    config = preset("tiny", vocab_size=5 + len(WORDS), hidden_dim=32, num_heads=2, mlp_dim=64,
                    max_positions=64)
    directory = os.path.join(str(work), "model")
    # Without biases the random outputs follow the inputs: with them (random_pretraining_params'
    # 0.5) every text's embedding lies near their common direction (mean pooling: cosines
    # 0.986 to 0.996, 2e-5 apart); max pooling spreads them further (0.87 to 0.97, 4e-4 apart).
    params = flax.traverse_util.unflatten_dict({
        path: np.zeros_like(value) if "bias" in path[-1] else value for path, value in
        flax.traverse_util.flatten_dict(random_pretraining_params(config, seed=3)).items()})
    model_writers.save_model(config, params,
                             load_tokenizer(write_vocab(work)), directory)
    write_settings(directory, EmbeddingSettings(("max",), True, 16), config.hidden_dim)
    return directory
