"""Dropout's mask on the CPU as it was drawn before and as it is drawn now, side by side.

  before  as bert-jax drew it until 62a355e: JAX's `threefry2x32` primitive, which the CPU
          lowers to a loop of five trips of four rounds (XLA's CPU compiler spends seconds of
          LLVM time on each kernel of its body), and the byte of 8 verdicts ORed a bit at a
          time;
  now     `bert_jax/models/layers/dropout.py`: the hash written out
          (`bert_jax/models/layers/threefry.py`), fused into the mask, and the byte summed
          from two nibbles (a reduction, which XLA writes once before the mask is read).
The same bits either way. Both sides in one process, in interleaved rounds so a change in
load hits both:

  mask  dropout (forward and gradient) on one attention-probability shape of BERT-Base
        (8 x 12 x 128 x 128): each side's compile time, then its run time.
  step  BERT's real jitted train step (bench/model_step.py's `JaxStep`, dropout on): each
        side's compile time (trace, lowering and XLA's compile), then its step time and
        the ratio per round. The same weights, batch and keys, so both draw the same masks
        and give the same loss.

Usage: python bench/dropout_rng.py mask [--rounds 5]
       python bench/dropout_rng.py step --preset base [--batch 8 --seq-len 128 --rounds 5]
"""

import argparse
import contextlib
import os
import statistics
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench.host import announce_host  # noqa: E402

SIDES = ("before", "now")


def _keep_bits_before(key, shape: tuple[int, ...], threshold: int):
    """`dropout.keep_bits` as of 62a355e: blocks 2 b and 2 b + 1 of a row drawn by the
    primitive, their 8 verdicts ORed into byte b one at a time."""
    import jax.numpy as jnp
    from jax.extend.random import threefry2x32_p

    from bert_jax.models.layers import dropout
    words = dropout._key_words(key)
    rows = dropout._as_rows(shape)
    packed = (*rows[:-1], -(-rows[-1] // 8))
    row, within = dropout._counters(packed)
    byte, bit = jnp.zeros(packed, jnp.uint8), 0
    for index in range(2):
        high, low = threefry2x32_p.bind(words[0], words[1], row, within * jnp.uint32(2) + index)
        for quarter in (high & 0xFFFF, high >> 16, low & 0xFFFF, low >> 16):
            byte = byte | ((quarter < threshold).astype(jnp.uint8) << bit)
            bit += 1
    return byte if len(shape) > 1 else byte[0]


@contextlib.contextmanager
def mask_of(side: str):
    """Traces dropout with its mask drawn as it was (`before`) or as it is (`now`)."""
    from bert_jax.models.layers import dropout
    now = dropout.keep_bits
    if side == "before":
        dropout.keep_bits = _keep_bits_before
    try:
        yield
    finally:
        dropout.keep_bits = now


def _timed(function) -> float:
    start = time.perf_counter()
    function()
    return time.perf_counter() - start


def _rounds(runners: dict, rounds: int, repeats: int, unit: str) -> None:
    """Times each side's runner `repeats` times a round, sides interleaved; prints each
    round's times and the now / before ratio, then the median ratio."""
    ratios = []
    for index in range(rounds):
        seconds = {side: _timed(lambda: [run() for _ in range(repeats)]) / repeats
                   for side, run in runners.items()}
        ratios.append(seconds["now"] / seconds["before"])
        print(f"round {index}: " + ", ".join(f"{side} {seconds[side] * 1e3:.1f} ms"
                                             for side in SIDES)
              + f" a {unit}; now / before {ratios[-1]:.3f}", flush=True)
    print(f"{unit} time now / before, median of {rounds} rounds "
          f"{statistics.median(ratios):.3f} (range {min(ratios):.3f} - {max(ratios):.3f})")


def mask(rounds: int) -> None:
    import jax
    import jax.numpy as jnp
    import numpy as np

    from bert_jax.models.layers.dropout import dropout

    shape = (8, 12, 128, 128)
    x = jnp.asarray(np.random.default_rng(0).standard_normal(shape, np.float32))
    key = jax.random.PRNGKey(0)

    compiled, outputs = {}, {}
    for side in SIDES:
        # A new function each side: JAX caches a trace by the function, not by what it calls.
        def function(x, key):
            output, pullback = jax.vjp(lambda x: dropout(x, 0.1, key), x)
            return output, pullback(output)[0]
        with mask_of(side):
            seconds = _timed(lambda: compiled.setdefault(
                side, jax.jit(function).lower(x, key).compile()))
        outputs[side] = [np.asarray(array) for array in compiled[side](x, key)]
        print(f"{side}: compiled in {seconds:.2f} s", flush=True)
    same = all(np.array_equal(a, b) for a, b in zip(*outputs.values()))
    print(f"outputs identical: {same}")
    _rounds({side: lambda side=side: jax.block_until_ready(compiled[side](x, key))
             for side in SIDES}, rounds, 20, "mask")


def step(preset: str, batch_size: int, seq_len: int, rounds: int) -> None:
    import dataclasses

    from bench.model_step import JaxStep, make_batch

    batch = make_batch(batch_size, seq_len, max(1, seq_len * 15 // 100))
    sides, losses = {}, {}
    for side in SIDES:
        with mask_of(side):
            runner = JaxStep(preset, batch)
            bundle = runner.bundle
            start = time.perf_counter()
            compiled = bundle.train_step.lower(runner.state, runner.batch, runner.rng).compile()
            seconds = time.perf_counter() - start
        runner.bundle = dataclasses.replace(bundle, train_step=compiled)
        sides[side], losses[side] = runner, runner()
        print(f"{side}: compiled in {seconds:.1f} s (trace, lowering and XLA), first loss "
              f"{losses[side]:.6f}", flush=True)
    print(f"losses identical: {losses['before'] == losses['now']}")
    _rounds(sides, rounds, 2, "step")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("mask", "step"))
    parser.add_argument("--preset", default="base")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    announce_host()
    if args.what == "mask":
        mask(args.rounds)
    else:
        step(args.preset, args.batch, args.seq_len, args.rounds)


if __name__ == "__main__":
    main()
