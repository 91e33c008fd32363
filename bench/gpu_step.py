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
MFU counts model FLOPs (`bert_jax.flops`: matmuls only, 3x forward) of the batch's real
(unpadded) tokens against each framework's measured matmul peak in the step's precision and
against the card's datasheet dense peak (DATASHEET_PEAK). --markdown-out writes the table
the README quotes, headed by the card's name. --smoke runs it all on the CPU in seconds.

Usage: python bench/gpu_step.py [--presets base,large] [--configs fp32:128x128,bf16:128x128,
           fp32:32x512,bf16:32x512] [--rounds 5] [--steps 10] [--compile all|none|CONFIGS]
           [--attention-dropout 0] [--markdown-out PATH] [--json-out PATH]
       python bench/gpu_step.py --smoke   # on the CPU, BERT-tiny, one round: checks the script
"""

import argparse
import gc
import json
import os
import statistics
import sys
import time

import numpy as np

# Before bench.model_step, which keeps JAX on the CPU unless JAX_PLATFORMS says otherwise.
# --smoke runs the whole script on the CPU (a tiny model, one round): a check that it works.
SMOKE = "--smoke" in sys.argv
os.environ.setdefault("JAX_PLATFORMS", "cpu" if SMOKE else "cuda")
# The two frameworks share the GPU: JAX must not take 75% of its memory up front.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
os.environ.setdefault("TQDM_DISABLE", "1")  # time_rounds' progress bar: noise in a log
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.model_step import JaxStep, TorchGatheredStep, make_batch, time_rounds  # noqa: E402

DTYPES = {"fp32": "float32", "bf16": "bfloat16"}
# Datasheet dense (no sparsity) bf16 and tf32 tensor-core FLOP/s, by a name
# torch.cuda.get_device_name() contains: NVIDIA's H100 SXM / H200 and A100 datasheets.
DATASHEET_PEAK = {"H100": {"bf16": 989e12, "fp32": 494e12},
                  "H200": {"bf16": 989e12, "fp32": 494e12},
                  "A100": {"bf16": 312e12, "fp32": 156e12}}


class GpuJaxStep(JaxStep):
    """model_step.JaxStep whose `run(n)` runs n steps, then waits once; it reports the
    attention implementation its compiled program holds."""

    def run(self, steps: int):
        for _ in range(steps):
            self.state, metrics = self.bundle.train_step(self.state, self.batch, self.rng)
        # One program writes state and metrics: when the metrics are ready, so is the step.
        return float(metrics["loss"])

    def while_loops(self) -> int:
        """`while` ops in the lowered step: the CPU-only chunked attention is a lax.map loop."""
        lowered = self.bundle.train_step.lower(self.state, self.batch, self.rng)
        return lowered.as_text().count("stablehlo.while")

    def attention(self) -> str:
        """The attention the compiled step holds (cuDNN's fused kernel, or XLA's einsums)."""
        from bert_jax import aot_hlo
        compiled = self.bundle.train_step.lower(self.state, self.batch, self.rng).compile()
        name, calls = aot_hlo.attention_kernel(compiled.as_text() or "")
        return f"{name}" + (f", {calls} kernel calls" if calls else "")


class GpuTorchStep(TorchGatheredStep):
    """model_step's `torch-g` step on a CUDA device: fused AdamW, optional bf16 autocast and
    torch.compile; `run(n)` runs n steps, then synchronizes once."""

    def __init__(self, model_config, batch: dict, dtype: str, compile_loss: bool = False):
        import torch
        from bench.torch_pretraining import gathered_pretraining_losses
        super().__init__(model_config, batch)
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        self.model.to(self.device)
        self.tensors = {name: value.to(self.device) for name, value in self.tensors.items()}
        hyper = {name: self.optimizer.defaults[name]
                 for name in ("lr", "betas", "eps", "weight_decay")}
        # One fused kernel updates every parameter: the recommended AdamW on a GPU.
        self.optimizer = torch.optim.AdamW(self.model.parameters(), **hyper, fused=True)
        self.bf16 = dtype == "bfloat16"
        self.losses = (torch.compile(gathered_pretraining_losses) if compile_loss
                       else gathered_pretraining_losses)

    def loss(self):
        import torch
        # Autocast over the forward pass only, as PyTorch's AMP recipe has it.
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16):
            mlm_loss, nsp_loss = self.losses(self.model, self.tensors)
        return mlm_loss + nsp_loss

    def run(self, steps: int):
        for _ in range(steps):  # no per-step float(loss): nothing waits between steps
            loss = self.update()
        return float(loss.detach())


def matmul_peaks(precision: str, size: int, repeats: int) -> dict:
    """Calls running `repeats` (size x size) products then waiting, one per framework."""
    import jax
    import jax.numpy as jnp
    import torch
    jax_dtype, torch_dtype = {"bf16": (jnp.bfloat16, torch.bfloat16),
                              "fp32": (jnp.float32, torch.float32)}[precision]
    keys = jax.random.split(jax.random.PRNGKey(0))
    jax_inputs = [jax.random.normal(key, (size, size), jax_dtype) for key in keys]
    jax_matmul = jax.jit(jnp.matmul)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch_inputs = [torch.randn(size, size, dtype=torch_dtype, device=device) for _ in range(2)]

    def run_jax():
        for _ in range(repeats):
            product = jax_matmul(*jax_inputs)
        product.block_until_ready()

    def run_torch():
        for _ in range(repeats):
            torch.matmul(*torch_inputs)
        synchronize()

    return {"bert-jax": run_jax, "torch": run_torch}


def synchronize() -> None:
    import torch
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def fp32_matmul_errors(size: int = 1024) -> dict:
    """Relative error of each framework's default float32 matmul against float64: about
    1e-7 in true float32, about 3e-4 when the tensor cores round the inputs to TF32."""
    import jax
    import jax.numpy as jnp
    import torch
    rng = np.random.default_rng(0)
    left, right = (rng.standard_normal((size, size)).astype(np.float32) for _ in range(2))
    reference = left.astype(np.float64) @ right.astype(np.float64)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    results = {"bert-jax": np.asarray(jax.jit(jnp.matmul)(left, right)),
               "torch": torch.matmul(torch.from_numpy(left).to(device),
                                     torch.from_numpy(right).to(device)).cpu().numpy()}
    return {name: float(np.linalg.norm(result - reference) / np.linalg.norm(reference))
            for name, result in results.items()}


def attention_path(batch_size: int, seq_len: int) -> str:
    """Which attention the model takes here: bert_jax/layers/attention.py chunks only on a CPU."""
    import jax
    from bert_jax.layers.attention import chunk_count
    backend = jax.default_backend()
    chunks = chunk_count(batch_size, seq_len, -1, backend)
    path = "plain (whole batch)" if chunks == 1 else f"chunked ({chunks} chunks)"
    return f"backend {backend}: automatic attention is {path}"


def build_steps(preset: str, precision: str, batch: dict, compile_loss: bool,
                attention_dropout: float) -> dict:
    """The steps of one configuration, warmed up (compiled); prints compile times. Both
    frameworks take `attention_dropout` (PyTorch's SDPA applies it inside its fused kernels;
    bert-jax's fused kernels need 0, layers/attention_kernels.py)."""
    overrides = {"attention_dropout_rate": attention_dropout}
    steps = {"bert-jax": GpuJaxStep(preset, batch, DTYPES[precision], overrides)}
    steps["torch"] = GpuTorchStep(steps["bert-jax"].model_config, batch, DTYPES[precision])
    if compile_loss:
        steps["torch.compile"] = GpuTorchStep(steps["bert-jax"].model_config, batch,
                                              DTYPES[precision], compile_loss=True)
    for name, step in list(steps.items()):
        start = time.perf_counter()
        try:
            loss = step.run(1)  # compiles
        except Exception as error:  # noqa: BLE001 - torch.compile is optional: report, go on
            if name != "torch.compile":
                raise
            print(f"  torch.compile failed, left out: {type(error).__name__}: {error}"[:2000])
            del steps[name]
            continue
        first = time.perf_counter() - start
        step.run(3)
        attention = getattr(getattr(step, "model", None), "config", None)
        attention = f", attention {attention._attn_implementation}" if attention else ""
        print(f"  {name}: first step {first:.1f} s (compilation), loss {loss:.3f}{attention}",
              flush=True)
    return steps


def benchmark_config(preset: str, precision: str, batch_size: int, seq_len: int, args,
                     compiled: list) -> tuple[list[str], list[str], dict]:
    """Text rows, markdown rows and raw seconds for one (preset, precision, batch) config."""
    from bert_jax import flops
    label = f"{preset} {precision} {batch_size}x{seq_len}"
    print(f"{label}:", flush=True)
    batch = make_batch(batch_size, seq_len, args.predictions)
    steps = build_steps(preset, precision, batch, (precision, batch_size, seq_len) in compiled,
                        args.attention_dropout)
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


def device_name() -> str:
    import torch
    return torch.cuda.get_device_name() if torch.cuda.is_available() else "CPU"


def datasheet_peak(precision: str) -> float:
    """The card's dense datasheet FLOP/s in `precision` (0 for a card not in the table)."""
    name = device_name()
    for card, peaks in DATASHEET_PEAK.items():
        if card in name:
            return peaks[precision]
    return 0.0


def markdown_table(rows: list[str], args) -> str:
    """The table the README quotes: the card's name, the settings, one row per step."""
    return "\n".join([
        f"GPU step on {device_name()}: bert-jax vs PyTorch (transformers BertForPreTraining, "
        f"SDPA attention), {args.predictions} predictions, attention dropout "
        f"{args.attention_dropout}, {args.rounds} interleaved rounds x {args.steps} steps, "
        f"medians; MFU = model FLOPs of the real tokens / the datasheet's dense peak.", "",
        "| model | precision | batch | framework | ms/step | tokens/s | MFU | time / bert-jax |",
        "|---|---|---|---|---|---|---|---|", *rows])


def memory_report() -> str:
    """Peak device memory of each framework (JAX's over the whole run; both share the GPU)."""
    import jax
    import torch
    jax_stats = jax.devices()[0].memory_stats() or {}
    torch_peak = torch.cuda.max_memory_allocated() if torch.cuda.is_available() else 0
    return (f"peak memory: bert-jax {jax_stats.get('peak_bytes_in_use', 0) / 2**30:.1f} GiB, "
            f"torch {torch_peak / 2**30:.1f} GiB")


def release() -> None:
    """Frees the last configuration's models (out of scope by now) before the next one's."""
    import torch
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def parse_configs(text: str) -> list[tuple[str, int, int]]:
    """'fp32:128x128,bf16:32x512' -> [('fp32', 128, 128), ('bf16', 32, 512)]."""
    configs = []
    for item in text.split(","):
        precision, _, shape = item.partition(":")
        if precision not in DTYPES or "x" not in shape:
            raise SystemExit(f"--configs: expected PRECISION:BATCHxSEQ with PRECISION in "
                             f"{list(DTYPES)}, got {item!r}")
        batch_size, seq_len = shape.split("x")
        configs.append((precision, int(batch_size), int(seq_len)))
    return configs


def allow_tf32_in_torch() -> None:
    """PyTorch's float32 matmuls in TF32 (its default is true float32), as JAX's on a GPU."""
    import torch
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    torch.set_float32_matmul_precision("high")


def print_environment() -> None:
    import jax
    import torch
    import transformers
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "CPU"
    print(f"jax {jax.__version__} backend {jax.default_backend()} "
          f"({jax.devices()[0].device_kind}); torch {torch.__version__} on {device}; "
          f"transformers {transformers.__version__}")
    print(f"jax_default_matmul_precision={jax.config.jax_default_matmul_precision}; torch "
          f"allow_tf32={torch.backends.cuda.matmul.allow_tf32}, "
          f"float32_matmul_precision={torch.get_float32_matmul_precision()}")
    errors = fp32_matmul_errors()
    print("fp32 matmul relative error vs float64 (1024^2; ~1e-7 fp32, ~3e-4 tf32): "
          + ", ".join(f"{name} {error:.1e}" for name, error in errors.items()), flush=True)


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


if __name__ == "__main__":
    main()
