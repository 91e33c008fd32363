"""NVIDIA GPUs as compile targets on a host without one (deviceless AOT through jax's CUDA plugin).

XLA compiles for a GPU it cannot see from a description of it, a `GpuTargetConfigProto`
(SM count, clocks, memory, shared memory, compute capability, cuDNN and CUDA versions: the
files in `gpu_targets/`), the route of jax's own `tests/deviceless_aot_test.py`. The program
is the one the card would run: the same fusions, kernels and buffers, so its memory and its
kernel census (`gpu_census`) hold without the card (issue 43 set them against an H100's
profile). What needs the card is left out: autotuning (see `compiler_options`) and cuDNN's
workspace sizes.

    devices = topology_devices("8xh100")  # one node of 8; "h100" is one card
    with answering_for(devices[0]): lowered = train_step.lower(...)
    compiled = lowered.compile(compiler_options(dump_directory))

The install (`pip install -r requirements-gpu-compile.txt`): the CUDA plugin and its PJRT
runtime, and ptxas with libdevice (NVIDIA's nvcc and nvvm wheels); no driver, cuDNN or cuBLAS.
"""

import contextlib
import dataclasses
import importlib.resources
import re
import tempfile

from bert_jax.errors import UserError

GIB = 1024 ** 3
INSTALL = "pip install -r requirements-gpu-compile.txt"


@dataclasses.dataclass(frozen=True)
class GpuCard:
    """One card's datasheet numbers, named as `launch.tpu_types.TpuGeneration`'s so that a
    `CompileReport` reads either. Sources in `CARDS`' comments."""
    name: str  # what --topology takes: "h100", "8xh100"
    device_kind: str  # jax `Device.device_kind` (the target file's device_description_str)
    target_file: str  # its GpuTargetConfigProto in gpu_targets/
    hbm_bytes_per_chip: int  # the card's memory (the target file's device_memory_size)
    peak_bf16_flops_per_chip: float  # dense bf16 tensor-core peak (without sparsity)
    hbm_bytes_per_second_per_chip: float  # memory bandwidth
    interconnect_bytes_per_second_per_chip: float  # NVLink (or PCIe) one way, for collectives
    cores_per_chip: int = 1  # one jax device per card
    devices_per_chip: int = 1
    chips_per_host: int = 8  # an HGX/DGX node: what `--compare-meshes` treats as one host


# Datasheets: NVIDIA H100 Tensor Core GPU (SXM5: 989 dense bf16 TFLOP/s, 1,979 with sparsity;
# 3.35 TB/s; NVLink 900 GB/s both ways), A100 Tensor Core GPU (SXM4: 312 bf16 TFLOP/s;
# 2,039 GB/s at 80 GB, 1,555 GB/s at 40 GB; NVLink 600 GB/s both ways), L4 (121 dense bf16
# TFLOP/s, 242 with sparsity; 300 GB/s; no NVLink: PCIe Gen4 x16, 64 GB/s both ways).
# The memory is the target file's (the H100's measured by its driver, the others the
# datasheet's in GiB); the H100's bandwidth is its file's 3,352.32 GB/s.
CARDS = {card.name: card for card in (
    GpuCard("h100", "NVIDIA H100 80GB HBM3", "h100.txtpb", 84942979072, 989.4e12,
            3352.32e9, 900e9 / 2),
    GpuCard("a100-80gb", "NVIDIA A100-SXM4-80GB", "a100_80gb.txtpb", 80 * GIB, 312e12,
            2039e9, 600e9 / 2),
    GpuCard("a100-40gb", "NVIDIA A100-SXM4-40GB", "a100_40gb.txtpb", 40 * GIB, 312e12,
            1555e9, 600e9 / 2),
    GpuCard("l4", "NVIDIA L4", "l4.txtpb", 24 * GIB, 121e12, 300e9, 64e9 / 2),
)}
_TOPOLOGY = re.compile(r"(?:(\d+)x)?([a-z0-9-]+)")


def parse_topology(topology: str) -> tuple[GpuCard, int] | None:
    """("8xh100" -> (the H100, 8)), ("h100" -> (the H100, 1)), or None where `topology`
    names no GPU (a TPU topology such as "v5e:2x2")."""
    match = _TOPOLOGY.fullmatch(topology.strip().lower())
    if not match or match.group(2) not in CARDS:
        return None
    count = int(match.group(1) or 1)
    if not 1 <= count <= 8:
        raise UserError(f"--topology {topology!r}: a node holds 1 to 8 GPUs, got {count}")
    return CARDS[match.group(2)], count


def card_for_device_kind(device_kind: str) -> GpuCard | None:
    return next((card for card in CARDS.values() if card.device_kind == device_kind), None)


def target_config(card: GpuCard) -> str:
    """The card's GpuTargetConfigProto text, shipped with the package."""
    return (importlib.resources.files("bert_jax.compiler") / "gpu_targets"
            / card.target_file).read_text()


def _target_versions(text: str) -> tuple[tuple[int, int], int]:
    """((compute capability major, minor), cuDNN version as cuDNN numbers it) of a target."""
    def block(name: str) -> tuple[int, int]:
        body = re.search(name + r"\s*\{([^}]*)\}", text).group(1)
        major, minor = (re.search(field + r":\s*(\d+)", body) for field in ("major", "minor"))
        return int(major.group(1)) if major else 0, int(minor.group(1)) if minor else 0
    dnn_major, dnn_minor = block("dnn_version_info")
    return block("cuda_compute_capability"), dnn_major * 10000 + dnn_minor * 100


def topology_devices(topology: str) -> list:
    """The compile-only devices of `count` cards of one kind on one host (needs the plugin)."""
    card, count = parse_topology(topology) or (None, 0)
    if card is None:
        raise UserError(f"--topology {topology!r}: not a GPU; expected one of "
                        f"{sorted(CARDS)}, or N x one of them for a node, e.g. 8xh100")
    if unavailable():
        raise UserError(f"compiling for {card.device_kind} needs {unavailable()}")
    from jax.experimental import topologies

    try:
        description = topologies.get_topology_desc(
            platform="cuda", target_config=target_config(card), topology=f"1x1x{count}")
    except Exception as error:  # noqa: BLE001 (the plugin's own message says what failed)
        raise UserError(f"jax's CUDA plugin could not describe {count} x {card.device_kind} "
                        f"({error}); {INSTALL}") from None
    return list(description.devices)


@contextlib.contextmanager
def answering_for(device):
    """Traces with jax's cuDNN attention asking the target, not this host, what it is.

    jax 0.10.2's cuDNN wrapper checks the cuDNN version (it loads the local libcudnn, absent
    here: "cuDNN not found") and the compute capability (it asks the local backend, the CPU:
    "not a GPU", which would refuse packed segments and wide heads on an H100). Inside this
    block both answer from the target file, as the card's own jax would."""
    from jax._src.cudnn import fused_attention_stablehlo as cudnn

    card = card_for_device_kind(device.device_kind)
    (major, minor), cudnn_version = _target_versions(target_config(card))
    names = ("check_cudnn_version", "check_compute_capability",
             "is_cuda_compute_capability_equal")
    saved = {name: getattr(cudnn, name) for name in names}

    def capability(text: str) -> tuple[int, ...]:
        return tuple(int(part) for part in text.split("."))
    try:
        cudnn.check_cudnn_version = lambda: cudnn_version
        cudnn.check_compute_capability = lambda text: (major, minor) >= capability(text)
        cudnn.is_cuda_compute_capability_equal = lambda text: (major, minor) == capability(text)
        yield
    finally:
        for name, function in saved.items():
            setattr(cudnn, name, function)


def compiler_options(dump_directory: str) -> dict:
    """XLA options for one deviceless compile: dump its kernel list (`gpu_census` reads it)
    and choose matmuls as a GPU would.

    With no card to autotune on, XLA turns every matmul into a Triton fusion with a
    placeholder tile: the kernel count drops (epilogues fused into it) and matches no real
    run. Limiting the autotuner to cuBLAS (`CUBLASLT_FISSION`) and XLA's own emitter
    reproduced the H100's choice on jax 0.10.2: cuBLAS calls with the same fusions around
    them as the profile (issue 43, ../shared/measurements/h100/deviceless/README.md)."""
    return {"xla_dump_to": dump_directory, "xla_dump_hlo_as_text": True,
            "xla_gpu_experimental_autotune_backends": "CUBLASLT_FISSION,NATIVE_EMITTER"}


def compile_with_census(lowered, loop_trips: int = 1) -> tuple:
    """(compiled, its kernels: gpu_census.census) of a train step lowered for a GPU device
    (under `answering_for` it); `loop_trips`: the micro-batches of a full step, for a
    gradient accumulation loop whose trips XLA does not know (a batch warm-up's).

    The persistent compilation cache is off for this compile: a program loaded from it is
    not compiled, so XLA would write no kernel list to count."""
    import jax

    from bert_jax.compiler import gpu_census

    cached = jax.config.jax_enable_compilation_cache
    jax.config.update("jax_enable_compilation_cache", False)
    try:
        with tempfile.TemporaryDirectory(prefix="bert-jax-gpu-kernels-") as dump:
            compiled = lowered.compile(compiler_options(dump))
            return compiled, gpu_census.census(dump, compiled.as_text(), loop_trips)
    except jax.errors.JaxRuntimeError as error:
        if "PTX compilation provider" not in str(error):
            raise
        raise UserError(f"XLA found no ptxas to build GPU kernels with: {INSTALL} (it "
                        "brings NVIDIA's ptxas and libdevice as wheels)") from None
    finally:
        jax.config.update("jax_enable_compilation_cache", cached)


def unavailable() -> str | None:
    """Why this host cannot compile for a GPU target (what to install), or None."""
    import importlib.util

    # The plugin's Python half; without it jax has no "cuda" platform to describe.
    if not any(importlib.util.find_spec(f"jax_cuda{major}_plugin") for major in (12, 13)):
        return f"jax's CUDA plugin is not installed ({INSTALL})"
    return None
