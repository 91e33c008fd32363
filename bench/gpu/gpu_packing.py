"""Packed against unpacked rows on a GPU: bert-jax's real tokens/s, and packed rows' kernels.

The same instances as unpacked rows (one instance, then padding) and packed 3 to a row
(input_pipeline/packing.py, as `create-data --pack` packs them), BERT-Base in bf16,
--batch-size rows a step, attention dropout 0, timed in interleaved rounds in one process.
Packed rows run twice: with `precision.attention=auto` (XLA's attention: cuDNN segments are
unmeasured on packed rows, layers/attention_kernels.py) and with `cudnn` (cuDNN segments,
data.max_sequences_per_row = 3 slots a row). Before timing, the cudnn side's loss is held
to the auto side's (same rows, same parameters) so a wrong segment layout cannot pass as
fast. Instance lengths: --lengths FILE (one per line, e.g. from your shards), else
synthetic, uniform in [16, seq_len] (seed 0): the packed/unpacked ratio then says what
packing gains on such lengths, not on a corpus. Token ids are random (they do not change
the work). Goal (issue 32): packed / unpacked real tokens/s >= 1.25x at 512 tokens.

Usage: python bench/gpu/gpu_packing.py [--preset base] [--seq-len 512] [--batch-size 32]
           [--lengths FILE] [--rounds 3] [--steps 10]
       python bench/gpu/gpu_packing.py --smoke   # on the CPU: BERT-tiny, 4 x 128, xla for cudnn
"""

import argparse
import os
import statistics
import sys

import numpy as np

SMOKE = "--smoke" in sys.argv
os.environ.setdefault("JAX_PLATFORMS", "cpu" if SMOKE else "cuda")
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
_REPOSITORY = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, _REPOSITORY)

from bench.gpu.gpu_frameworks import GpuJaxStep  # noqa: E402
from bench.model_step import VOCAB_SIZE, time_rounds  # noqa: E402
from input_pipeline import packing  # noqa: E402

PER_ROW = 3


def instance_features(lengths: np.ndarray, seq_len: int, predictions: int) -> dict:
    """Unpacked rows, one instance of each length: [CLS] ... [SEP], two segments, masks."""
    rng = np.random.default_rng(0)
    count = len(lengths)
    position = np.arange(seq_len)[None]
    input_mask = (position < lengths[:, None]).astype(np.int32)
    wanted = np.clip(np.round(0.15 * lengths), 1, predictions).astype(int)  # as create-data
    positions = np.zeros((count, predictions), np.int32)
    for row, (length, number) in enumerate(zip(lengths, wanted)):
        positions[row, :number] = np.sort(rng.choice(np.arange(1, length), number, replace=False))
    weights = (np.arange(predictions)[None] < wanted[:, None]).astype(np.float32)
    return dict(
        input_ids=(rng.integers(5, VOCAB_SIZE, (count, seq_len)) * input_mask).astype(np.int32),
        input_mask=input_mask,
        segment_ids=((position >= lengths[:, None] // 2) * input_mask).astype(np.int32),
        masked_lm_positions=positions,
        masked_lm_ids=(rng.integers(5, VOCAB_SIZE, (count, predictions)) * weights).astype(
            np.int32),
        masked_lm_weights=weights,
        next_sentence_labels=rng.integers(0, 2, count).astype(np.int32))


def batches(lengths: np.ndarray, seq_len: int, predictions: int, batch_size: int):
    """(unpacked, packed) batches of `batch_size` rows each, from the same instance pool."""
    features = instance_features(lengths, seq_len, predictions)
    unpacked = {name: value[:batch_size] for name, value in features.items()}
    counts = (features["masked_lm_weights"] > 0).sum(axis=1)
    rows = packing.pack_lengths(lengths, seq_len, PER_ROW, counts,
                                packing.row_predictions(predictions, PER_ROW))
    if len(rows) < batch_size:
        raise SystemExit(f"{len(lengths)} instances pack into {len(rows)} rows, fewer than "
                         f"--batch-size {batch_size}: give more lengths")
    packed = packing.pack_features(features, rows[:batch_size], seq_len, PER_ROW)
    return unpacked, packed


def read_lengths(path: str, seq_len: int, count: int) -> np.ndarray:
    if path:
        lengths = np.loadtxt(path, dtype=np.int64, ndmin=1)
        if lengths.min() < 4 or lengths.max() > seq_len:
            raise SystemExit(f"{path}: lengths must be 4..{seq_len} tokens, got "
                             f"{lengths.min()}..{lengths.max()}")
        return lengths
    return np.random.default_rng(0).integers(16, seq_len + 1, count)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="base", help="model size")
    parser.add_argument("--seq-len", type=int, default=512)
    parser.add_argument("--batch-size", type=int, default=32, help="rows a step, each side")
    parser.add_argument("--predictions", type=int, default=80, help="masked positions a row")
    parser.add_argument("--lengths", default="", help="instance lengths, one per line")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved timing rounds")
    parser.add_argument("--steps", type=int, default=10, help="steps per timed call")
    parser.add_argument("--smoke", action="store_true", help="on the CPU: BERT-tiny, 4 x 128")
    args = parser.parse_args()
    if args.smoke:
        args.preset, args.seq_len, args.batch_size, args.predictions = "tiny", 128, 4, 20
        args.rounds, args.steps = 1, 1
    lengths = read_lengths(args.lengths, args.seq_len, 8 * args.batch_size)
    unpacked, packed = batches(lengths, args.seq_len, args.predictions, args.batch_size)
    dropout = {"attention_dropout_rate": 0.0}
    packed_data = dict(max_sequences_per_row=PER_ROW, max_predictions=args.predictions)
    steps = {"unpacked": GpuJaxStep(args.preset, unpacked, "bfloat16", dropout)}
    fused = "xla" if args.smoke else "cudnn"  # a CPU has no cuDNN: --smoke checks the script
    for attention in ("auto", fused):
        steps[f"packed {attention}"] = GpuJaxStep(
            args.preset, packed, "bfloat16", dropout, packed_data,
            precision_overrides={"attention": attention})
    losses = {name: step.run(1) for name, step in steps.items()}  # compiles; one update each
    print(f"{args.preset} bf16 {args.batch_size} x {args.seq_len}, {PER_ROW} instances a "
          f"packed row, lengths {args.lengths or 'synthetic, uniform 16..' + str(args.seq_len)}"
          f"; first-step losses: " + ", ".join(f"{n} {v:.4f}" for n, v in losses.items()))
    for name, step in steps.items():
        print(f"  {name}: the step holds {step.attention()} attention", flush=True)
    if abs(losses[f"packed {fused}"] - losses["packed auto"]) > 0.05:
        raise SystemExit(f"{fused} gives another loss than auto on the same packed rows: a "
                         "wrong segment layout; not timed")
    calls = {name: (lambda step=step: step.run(args.steps)) for name, step in steps.items()}
    seconds = {name: [t[0] / args.steps for t in rounds]
               for name, rounds in time_rounds(calls, args.rounds,
                                               {name: 1 for name in calls}).items()}
    real = {"unpacked": int(unpacked["input_mask"].sum()),
            "packed": int(packed["input_mask"].sum())}
    rates = {}
    for name, times in seconds.items():
        tokens = real["unpacked" if name == "unpacked" else "packed"]
        rates[name] = [tokens / t for t in times]
        print(f"{name:14s} {statistics.median(times) * 1e3:8.2f} ms/step "
              f"({min(times) * 1e3:.2f}-{max(times) * 1e3:.2f}), {tokens} real tokens a step, "
              f"{statistics.median(rates[name]):10.0f} real tokens/s")
    for name in ("packed auto", f"packed {fused}"):
        ratios = [p / u for p, u in zip(rates[name], rates["unpacked"])]
        print(f"{name} / unpacked real tokens/s: {statistics.median(ratios):.2f}x "
              f"(rounds {min(ratios):.2f}-{max(ratios):.2f})")


if __name__ == "__main__":
    # time_rounds' progress bar is noise in a log; set here, not at import, so a test that
    # imports this module leaves its process's other bars alone.
    os.environ.setdefault("TQDM_DISABLE", "1")
    main()
