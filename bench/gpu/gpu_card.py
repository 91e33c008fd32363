"""The card under bench/gpu/gpu_step.py: its measured and datasheet peaks, matmul precision, memory.

MFU is reported against two peaks: each framework's own large matmul in the step's precision
(measured between the rounds) and the card's datasheet dense peak (DATASHEET_PEAK). Float32
matmuls run in TF32 on both sides, and the script prints each one's float32 matmul error to
show it.
"""

import gc

import numpy as np

# Datasheet dense (no sparsity) bf16 and tf32 tensor-core FLOP/s, by a name
# torch.cuda.get_device_name() contains: NVIDIA's H100 SXM / H200 and A100 datasheets.
DATASHEET_PEAK = {"H100": {"bf16": 989e12, "fp32": 494e12},
                  "H200": {"bf16": 989e12, "fp32": 494e12},
                  "A100": {"bf16": 312e12, "fp32": 156e12}}


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
