"""The two sides of bench/gpu/gpu_step.py: bert-jax's real train step and PyTorch's GPU peer.

Each step's `run(n)` runs n steps and then waits for the device once, as a training loop
does (no host sync between steps). `build_steps` makes and warms up (compiles) the steps of
one configuration: bert-jax, PyTorch eager, and PyTorch through `torch.compile`.
"""

import time

from bench.model_step import JaxStep, TorchGatheredStep

DTYPES = {"fp32": "float32", "bf16": "bfloat16"}


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
        from bert_jax.compiler import aot_hlo
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


def attention_path(batch_size: int, seq_len: int) -> str:
    """Which attention the model takes here: bert_jax/models/layers/attention.py chunks only on a CPU."""
    import jax
    from bert_jax.models.layers.attention import chunk_count
    backend = jax.default_backend()
    chunks = chunk_count(batch_size, seq_len, -1, backend)
    path = "plain (whole batch)" if chunks == 1 else f"chunked ({chunks} chunks)"
    return f"backend {backend}: automatic attention is {path}"


def build_steps(preset: str, precision: str, batch: dict, compile_loss: bool,
                attention_dropout: float, precision_overrides: dict | None = None) -> dict:
    """The steps of one configuration, warmed up (compiled); prints compile times. Both
    frameworks take `attention_dropout` (PyTorch's SDPA applies it inside its fused kernels;
    bert-jax's take it only with precision.fused_attention_dropout, layers/attention_kernels.py);
    `precision_overrides` go to bert-jax's run config (attention, fused_attention_dropout)."""
    overrides = {"attention_dropout_rate": attention_dropout}
    steps = {"bert-jax": GpuJaxStep(preset, batch, DTYPES[precision], overrides,
                                    precision_overrides=precision_overrides)}
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
