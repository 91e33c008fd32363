"""Is `bert-jax aot`'s roofline bound a bound? The same formula on this CPU, against a measured step.

For each preset: the real train step compiled for one CPU device (float32, batch x length
below), its FLOPs and bytes from XLA's cost analysis, this machine's float32 matmul peak and
copy bandwidth measured in this process (medians), and the step's measured time (median).
A bound above the measured time is no bound: XLA's bytes (every op's operands and result)
give one on this CPU, whose caches serve most of them; the corrected count (the step's
arguments read once and its outputs written once, what no step can avoid) does not.

Usage: python bench/roofline_calibration.py [--presets mini,base] [--batch 8] [--seq-len 64]
"""

import argparse
import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", default="mini,base")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--predictions", type=int, default=10)
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    from bert_jax.compiler import calibration
    from bert_jax.models.config import BERT_VOCAB_SIZE
    from bert_jax.run_config import base_config

    for preset in args.presets.split(","):
        config = base_config(preset)
        config.model.vocab_size = BERT_VOCAB_SIZE
        result = calibration.calibrate(config, args.batch, args.seq_len, args.predictions,
                                       steps=args.steps)
        print(calibration.format_calibration(f"BERT-{preset} {args.batch}x{args.seq_len}",
                                             result), flush=True)


if __name__ == "__main__":
    main()
