"""A BERT pre-training step on a GPU, bert-jax against Hugging Face `BertForPreTraining` (PyTorch).

bench/model_step.py's comparison moved to a CUDA GPU, in one process: forward, backward,
AdamW (betas 0.9/0.999, eps 1e-6, weight decay 0.01) with global-norm clipping at 1.0, the
MLM head on the 20 gathered masked positions plus next-sentence prediction, hidden dropout
0.1; attention-probability dropout --attention-dropout on both sides (default 0, the fast
setting: bert-jax then takes cuDNN's fused attention in bf16; PyTorch's SDPA fuses either).
BERT-Base and BERT-Large (--presets), at 128 and 512 tokens (--configs).
  bert-jax       its real jitted `train_step` (donated state), built as model_step.JaxStep
                 builds it, with the run config's `precision.dtype` set; the script prints
                 which attention its compiled program holds.
  torch          `BertForPreTraining` in train mode, its heads on the gathered positions
                 (bench/torch_pretraining.py, model_step's `torch-g`), `torch.optim.AdamW(
                 fused=True)` and `clip_grad_norm_`: the peer's best eager practice.
  torch.compile  (--compile, default all configs) the same, its loss function through
                 `torch.compile`.
Two precisions, like for like:
  fp32  both frameworks' float32 matmuls on the tensor cores in TF32: JAX's default matmul
        precision on a GPU, `torch.backends.cuda.matmul.allow_tf32` (set here) for PyTorch;
        the script prints each one's fp32 matmul error to show it.
  bf16  bert-jax `precision.dtype = "bfloat16"` (float32 parameters, softmax and loss);
        PyTorch `torch.autocast("cuda", torch.bfloat16)` over the forward pass, float32
        master weights.
Each timed call runs --steps steps and then waits for the device once (no host sync
between steps, as a training loop runs); the calls alternate in --rounds rounds, with the
framework's own large matmul (the measured peak) between them, and medians are reported.
MFU counts model FLOPs (`bert_jax.compiler.flops`: matmuls only, 3x forward) of the batch's real
(unpadded) tokens against each framework's measured matmul peak in the step's precision and
against the card's datasheet dense peak (DATASHEET_PEAK). --markdown-out writes the table
the README quotes, headed by the card's name. --check exits 1 when bert-jax's median step is
slower than PyTorch eager's in any configuration it ran (naming each), so one command on any
GPU catches a regression. --attention and --fused-attention-dropout set bert-jax's
`precision.attention` and `precision.fused_attention_dropout` (layers/attention_kernels.py),
--projections its `precision.projections` (the query, key and value as one product, opt-in,
or apart, the default: layers/dense.py).
--smoke runs it all on the CPU in seconds.

This file runs the comparison and writes the table; bench/gpu/gpu_frameworks.py holds the two
sides' steps, bench/gpu/gpu_card.py the card's peaks, matmul precision and memory.

Usage: python bench/gpu/gpu_step.py [--presets base,large] [--configs fp32:128x128,bf16:128x128,
           fp32:32x512,bf16:32x512] [--rounds 5] [--steps 10] [--compile all|none|CONFIGS]
           [--attention-dropout 0] [--attention auto] [--fused-attention-dropout]
           [--projections auto|joined|apart] [--check] [--markdown-out PATH] [--json-out PATH]
       python bench/gpu/gpu_step.py --smoke   # on the CPU, BERT-tiny, one round: checks the script
"""

import argparse
import json
import os
import re
import statistics
import sys

import numpy as np

# Before bench.model_step, which keeps JAX on the CPU unless JAX_PLATFORMS says otherwise.
# --smoke runs the whole script on the CPU (a tiny model, one round): a check that it works.
SMOKE = "--smoke" in sys.argv
os.environ.setdefault("JAX_PLATFORMS", "cpu" if SMOKE else "cuda")
# The two frameworks share the GPU: JAX must not take 75% of its memory up front.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
_REPOSITORY = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, _REPOSITORY)

from bench.model_step import make_batch, time_rounds  # noqa: E402
from bench.gpu.gpu_card import (allow_tf32_in_torch, datasheet_peak, device_name,  # noqa: E402
                            matmul_peaks, memory_report, print_environment, release)
from bench.gpu.gpu_frameworks import DTYPES, attention_path, build_steps  # noqa: E402
from bert_jax.models.config import ATTENTION_IMPLEMENTATIONS, PROJECTIONS  # noqa: E402


def benchmark_config(preset: str, precision: str, batch_size: int, seq_len: int, args,
                     compiled: list) -> tuple[list[str], list[str], dict]:
    """Text rows, markdown rows and raw seconds for one (preset, precision, batch) config."""
    from bert_jax.compiler import flops
    label = f"{preset} {precision} {batch_size}x{seq_len}"
    print(f"{label}:", flush=True)
    batch = make_batch(batch_size, seq_len, args.predictions)
    steps = build_steps(preset, precision, batch, (precision, batch_size, seq_len) in compiled,
                        args.attention_dropout, {"attention": args.attention,
                                                 "fused_attention_dropout":
                                                     args.fused_attention_dropout,
                                                 "projections": args.projections})
    print(f"  {attention_path(batch_size, seq_len)}; bert-jax's compiled step holds "
          f"{steps['bert-jax'].attention()} attention", flush=True)
    # MFU on real tokens: model FLOPs of the batch's unpadded tokens (make_batch pads none,
    # so here every token is real; the count is kept explicit for padded batches).
    real_fraction = float(np.mean(batch["input_mask"]))
    step_flops = real_fraction * flops.train_step_flops(
        steps["bert-jax"].model_config, batch_size, seq_len, args.predictions)
    peaks = matmul_peaks(precision, args.peak_size, args.peak_repeats)
    calls = {name: (lambda step=step: step.run(args.steps)) for name, step in steps.items()}
    calls.update({f"{name} peak": run for name, run in peaks.items()})
    for name, run in peaks.items():
        run()  # warm-up: compilation, cuBLAS handles
    times = time_rounds(calls, args.rounds, {name: 1 for name in calls})
    per_round = {name: [t[0] / (args.steps if name in steps else 1) for t in rounds]
                 for name, rounds in times.items()}  # seconds per step (per peak call)
    peak_flops = {name: 2 * args.peak_size**3 * args.peak_repeats
                  / statistics.median(per_round[f"{name} peak"]) for name in peaks}
    datasheet = datasheet_peak(precision)
    rows, markdown = [], []
    jax_median = statistics.median(per_round["bert-jax"])
    for name in steps:
        median = statistics.median(per_round[name])
        achieved = step_flops / median
        own_peak = peak_flops["bert-jax" if name == "bert-jax" else "torch"]
        ratios = [t / j for j, t in zip(per_round["bert-jax"], per_round[name])]
        sheet_mfu = f"{100 * achieved / datasheet:.1f}%" if datasheet else "-"
        rows.append(f"{label:21s} {name:13s} {median * 1e3:8.2f} "
                    f"{min(per_round[name]) * 1e3:7.2f}-{max(per_round[name]) * 1e3:<7.2f} "
                    f"{real_fraction * batch_size * seq_len / median:9.0f} "
                    f"{achieved / 1e12:7.1f} {100 * achieved / own_peak:8.1f}% {sheet_mfu:>9}"
                    f"  {median / jax_median:5.2f} ({min(ratios):.2f}-{max(ratios):.2f})")
        markdown.append(f"| {preset} | {precision} | {batch_size} x {seq_len} | {name} | "
                        f"{median * 1e3:.2f} | {real_fraction * batch_size * seq_len / median:,.0f}"
                        f" | {sheet_mfu} | {median / jax_median:.2f}x |")
    rows.append(f"{label:21s} matmul peak {args.peak_size}^2 TFLOP/s: " + ", ".join(
        f"{name} {value / 1e12:.0f}" for name, value in peak_flops.items())
        + (f" (datasheet {datasheet / 1e12:.0f}); " if datasheet else "; ")
        + f"step {step_flops / 1e12:.3f} TFLOP of model work")
    memory = memory_report()
    print("\n".join(["  " + memory] + rows), flush=True)
    return rows, markdown, {"label": label, "step_flops": step_flops, "peak_flops": peak_flops,
                            "seconds_per_step": per_round, "memory": memory}


def slower_than_eager(results: list[dict]) -> list[str]:
    """One line for each configuration whose bert-jax median step is slower than PyTorch
    eager's (`results`: benchmark_config's raw dicts); empty when bert-jax is never slower."""
    failures = []
    for result in results:
        medians = {name: statistics.median(seconds)
                   for name, seconds in result["seconds_per_step"].items()}
        if medians["bert-jax"] > medians["torch"]:
            failures.append(f"{result['label']}: bert-jax {medians['bert-jax'] * 1e3:.2f} "
                            f"ms/step, torch eager {medians['torch'] * 1e3:.2f} "
                            f"({medians['torch'] / medians['bert-jax']:.2f}x)")
    return failures


def markdown_table(rows: list[str], args) -> str:
    """The table the README quotes: the card's name, the settings, one row per step."""
    return "\n".join([
        f"GPU step on {device_name()}: bert-jax vs PyTorch (transformers BertForPreTraining, "
        f"SDPA attention), {args.predictions} predictions, attention dropout "
        f"{args.attention_dropout}, {args.rounds} interleaved rounds x {args.steps} steps, "
        f"medians; MFU = model FLOPs of the real tokens / the datasheet's dense peak.", "",
        "| model | precision | batch | framework | ms/step | tokens/s | MFU | time / bert-jax |",
        "|---|---|---|---|---|---|---|---|", *rows])


def parse_configs(text: str) -> list[tuple[str, int, int]]:
    """'fp32:128x128,bf16:32x512' -> [('fp32', 128, 128), ('bf16', 32, 512)]."""
    configs = []
    for item in text.split(","):
        match = re.fullmatch(r"(\w+):(\d+)x(\d+)", item)
        if not match or match.group(1) not in DTYPES:
            raise SystemExit(f"--configs: expected PRECISION:BATCHxSEQ with PRECISION in "
                             f"{list(DTYPES)}, got {item!r}")
        configs.append((match.group(1), int(match.group(2)), int(match.group(3))))
    return configs


def parse_arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", default="base,large", help="comma-separated model sizes")
    parser.add_argument("--configs", default="fp32:128x128,bf16:128x128,fp32:32x512,bf16:32x512",
                        help="comma-separated PRECISION:BATCHxSEQ (precision fp32 or bf16)")
    parser.add_argument("--predictions", type=int, default=20, help="masked positions per row")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds")
    parser.add_argument("--steps", type=int, default=10, help="steps per timed call")
    parser.add_argument("--peak-size", type=int, default=8192, help="square matmul for the peak")
    parser.add_argument("--peak-repeats", type=int, default=10, help="matmuls per peak call")
    parser.add_argument("--compile", default="all", help="configs (as --configs, 'all' or "
                        "'none') whose torch step also runs through torch.compile (minutes each)")
    parser.add_argument("--attention-dropout", type=float, default=0.0,
                        help="attention-probability dropout on both sides: 0 (default) lets "
                             "bert-jax take cuDNN's fused kernel; 0.1 is the paper's")
    parser.add_argument("--attention", default="auto", choices=ATTENTION_IMPLEMENTATIONS,
                        help="bert-jax's precision.attention (auto: the README's choices)")
    parser.add_argument("--fused-attention-dropout", action="store_true",
                        help="bert-jax's precision.fused_attention_dropout: attention dropout "
                             "inside cuDNN's kernel (opt-in; bench/gpu/cudnn_dropout_check.py)")
    parser.add_argument("--projections", default="auto", choices=PROJECTIONS,
                        help="bert-jax's precision.projections: the query, key and value as "
                             "one product (joined, opt-in) or each apart (auto, apart)")
    parser.add_argument("--check", action="store_true",
                        help="exit 1 if bert-jax is slower than PyTorch eager in any "
                             "configuration run")
    parser.add_argument("--json-out", default="", help="write the raw seconds here")
    parser.add_argument("--markdown-out", default="", help="write the README's table here")
    parser.add_argument("--smoke", action="store_true",
                        help="on the CPU: BERT-tiny, fp32 and bf16 2x128, one round of one "
                             "step, no torch.compile (checks the script, measures nothing)")
    args = parser.parse_args()
    if args.smoke:
        args.presets, args.configs, args.compile = "tiny", "fp32:2x128,bf16:2x128", "none"
        args.rounds, args.steps, args.peak_size, args.peak_repeats = 1, 1, 128, 1
        args.predictions = 4
    return args


def main() -> None:
    args = parse_arguments()
    allow_tf32_in_torch()
    print_environment()
    configs = parse_configs(args.configs)
    named = {"all": configs, "none": []}
    compiled = named[args.compile] if args.compile in named else parse_configs(args.compile)
    rows, markdown, raw = [], [], []
    for preset in args.presets.split(","):
        for precision, batch_size, seq_len in configs:
            config_rows, config_markdown, config_raw = benchmark_config(
                preset, precision, batch_size, seq_len, args, compiled)
            rows += config_rows
            markdown += config_markdown
            raw.append(config_raw)
            release()
    if args.json_out:
        with open(args.json_out, "w") as file:
            json.dump({"args": vars(args), "configs": raw}, file, indent=1)
    table = markdown_table(markdown, args)
    if args.markdown_out:
        with open(args.markdown_out, "w") as file:
            file.write(table + "\n")
    print(f"\n{args.predictions} predictions, {args.rounds} rounds x {args.steps} steps; "
          f"medians; jax/row: the row's step time over bert-jax's (range over rounds)")
    print("config                frame          ms/step  round range   tokens/s TFLOP/s "
          "MFU(meas) MFU(sheet)  jax/row")
    print("\n".join(rows))
    print("\n" + table)
    if args.check:
        failures = slower_than_eager(raw)
        print("\n--check: " + ("bert-jax is slower than PyTorch eager in " + "; ".join(failures)
                               if failures else f"bert-jax is at least as fast as PyTorch "
                               f"eager in all {len(raw)} configurations"))
        if failures:
            sys.exit(1)


if __name__ == "__main__":
    # time_rounds' progress bar is noise in a log; set here, not at import, so a test that
    # imports this module leaves its process's other bars alone.
    os.environ.setdefault("TQDM_DISABLE", "1")
    main()
