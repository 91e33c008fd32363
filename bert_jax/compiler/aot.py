"""Ahead-of-time compilation of the real train step for a TPU or GPU target, on a CPU host.

libtpu can describe a TPU slice that is not attached ("compile-only devices"), and jax's
CUDA plugin an NVIDIA GPU node (`gpu_targets`): XLA then compiles the exact program the
target would run, with the run config's mesh and shardings, and reports its memory per
device, its FLOPs and its collectives (on a GPU also its kernels, `gpu_census`). So
"does BERT-Large fit on a v4-64, and how long will it take?" costs a minute of CPU
instead of a failed pod run.

    devices = topology_devices("v4:4x4x2", "megacore")  # or topology_devices("8xh100")
    report = compile_train_step(run_config, devices)
"""

import contextlib
import dataclasses
import os
import re
import time

import ml_collections

from bert_jax import quiet
from bert_jax.compiler import aot_hlo, compile_memory, gpu_targets
from bert_jax.compiler.aot_hlo import COLLECTIVES
from bert_jax.models.config import BertConfig, Precision
from bert_jax.peak_memory import PeakMemory
from bert_jax.models.families import FAMILIES, config_from_dict
from bert_jax.errors import UserError
from input_pipeline import mixture_config
from launch.tpu_types import GIB, TpuGeneration, generation_for_device_kind, GENERATIONS

# Topology spellings seen to work with libtpu 0.0.42 (GENERATION:CHIPS_PER_DIMENSION).
TOPOLOGY_EXAMPLES = ("v3:4x8 (v3-64: 64 cores)", "v4:4x4x2 --chip-config megacore (v4-64)",
                     "v5e:16x16 (v5e-256)", "v5e:2x2", "v5e:2x4", "v5p:2x2x1", "v6e:2x2")
_TOPOLOGY_PATTERN = re.compile(r"(v\d+[a-z]*):(\d+(?:x\d+){1,2})")


def _topology_error(topology: str, reason: str) -> UserError:
    return UserError(f"--topology {topology!r}: {reason}; expected GENERATION:AxB[xC], e.g. "
                     + ", ".join(TOPOLOGY_EXAMPLES))


def topology_devices(topology: str, chip_config: str | None = None) -> list:
    """The compile-only devices of a TPU topology such as "v5e:2x2" (needs libtpu), or of
    GPUs such as "h100" or "8xh100" (needs jax's CUDA plugin: `gpu_targets`)."""
    if gpu_targets.parse_topology(topology):
        if chip_config:
            raise UserError(f"--chip-config is for TPUs; {topology!r} is a GPU target")
        return gpu_targets.topology_devices(topology)
    match = _TOPOLOGY_PATTERN.fullmatch(topology)
    if not match:
        raise _topology_error(topology, "cannot read it (GPUs: "
                              + ", ".join(gpu_targets.CARDS) + ", or 8xh100 for a node)")
    known = {generation.topology_name for generation in GENERATIONS.values()}
    if match.group(1) not in known:
        raise _topology_error(topology, f"unknown TPU generation {match.group(1)!r}")
    # Compile only: never ask a GCE metadata server (there is none), and do not take
    # libtpu's one-process lock, which a real TPU job on this host would need.
    os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    # Without a metadata server libtpu puts a warning text in the worker list and logs an
    # INVALID_ARGUMENT error about it; no workers are contacted when only compiling.
    os.environ.setdefault("TPU_WORKER_HOSTNAMES", "localhost")
    # libtpu also asks the metadata for its host's accelerator type and, finding none, prints
    # a warning at start; the compiled topology is the one named here, so name one host's.
    generation = next(generation for generation in GENERATIONS.values()
                      if generation.topology_name == match.group(1))
    one_host = generation.chips_per_host * (
        generation.cores_per_chip if generation.type_counts_cores else 1)
    os.environ.setdefault("TPU_ACCELERATOR_TYPE", f"{generation.name}-{one_host}")
    # A compile-only program cannot be loaded back from the persistent compilation cache
    # (there is no TPU client to load it into: JAX warns on every later compile), and the
    # compile is what `aot` measures: leave the cache off.
    import jax

    jax.config.update("jax_enable_compilation_cache", False)
    try:
        import libtpu  # noqa: F401  (only to give a clear error when it is missing)
    except ImportError:
        raise UserError("bert-jax aot needs libtpu: pip install -r requirements-tpu.txt") from None
    from jax.experimental import topologies

    options = {"chip_config_name": chip_config} if chip_config else {}
    try:
        with quiet.native_noise_filtered():  # libtpu's line about the TPU this host lacks
            description = topologies.get_topology_desc(
                topology_name=topology, platform="tpu", **options)
    except Exception as error:  # libtpu's own message says what it did not like
        raise _topology_error(topology, f"libtpu rejected it ({error})") from None
    return list(description.devices)


def accelerator(device_kind: str) -> "TpuGeneration | gpu_targets.GpuCard":
    """The chip's datasheet numbers: a TPU generation, or a GPU card (same field names)."""
    return gpu_targets.card_for_device_kind(device_kind) or generation_for_device_kind(
        device_kind)


@dataclasses.dataclass(frozen=True)
class CompileReport:
    """What one compilation of the train step says about one topology. Bytes are per device."""
    topology: str
    device_kind: str
    num_devices: int
    devices_per_chip: int  # 2 for v3 (one device per core), 1 with megacore or 1-core chips
    mesh_shape: dict  # {"data": 64, "fsdp": 1, "tensor": 1}
    batch_size: int
    seq_len: int
    max_predictions: int
    argument_bytes: int  # parameters, optimizer state and batch shard, as passed in
    output_bytes: int  # the new state and metrics
    alias_bytes: int  # outputs written over donated arguments (counted once)
    temp_bytes: int  # activations, gradients and scratch during the step
    code_bytes: int  # the compiled program itself
    compiled_flops_per_device: float  # XLA's cost analysis of the per-device program
    model_flops_per_step: float  # bert_jax.compiler.flops: matmul FLOPs of the whole global step
    collectives: dict  # HLO op name -> count in the compiled program
    compile_seconds: float
    # The compiling process's peak resident memory over the compile (bert_jax.peak_memory),
    # and its resident memory when the compile began; 0 in reports written before they were.
    compile_peak_resident_bytes: int = 0
    resident_before_compile_bytes: int = 0
    # The lowered program's size, and the least memory a compile of that size took beyond
    # what the process held before (bert_jax.compiler.compile_memory); 0 in older reports.
    program_operations: int = 0
    compile_bytes_lower_bound: int = 0
    bytes_accessed_per_device: float = 0.0  # XLA's cost analysis: HBM bytes read and written
    # Bytes one device sends over the interconnect, per collective kind (bert_jax.compiler.aot_hlo).
    collective_bytes: dict = dataclasses.field(default_factory=dict)
    attention: str = aot_hlo.XLA  # the attention implementation the program holds
    # FLOPs inside Pallas kernels, which XLA's cost analysis does not see (bert_jax.compiler.flops).
    kernel_flops_per_device: float = 0.0
    # "KIND xN at OP_NAME" for collectives the mesh layout does not call for (a sharding bug;
    # bert_jax.compiler.aot_collectives says why each other one is there).
    unexplained_collectives: tuple = ()
    # XLA's RESOURCE_EXHAUSTED message when the step cannot fit at all: the TPU compiler
    # refuses to build it, so there is no memory analysis (the fields above are then 0).
    out_of_memory: str = ""
    # Where the bytes accessed go (bert_jax.compiler.aot_bytes): purpose -> {"forward", "backward",
    # "step": XLA's way of counting, "hbm": the corrected count, "ops": how many}.
    bytes_by_purpose: dict = dataclasses.field(default_factory=dict)
    # The corrected count: the bytes that touch HBM (aot_bytes.hbm_bytes), the roofline's
    # memory term; 0 where the program was not read (then XLA's count is used).
    hbm_traffic_per_device: float = 0.0
    # aot_bytes.first_principles: what the step must move, term by term.
    first_principles_bytes: dict = dataclasses.field(default_factory=dict)
    parameter_bytes_per_device: int = 0  # the float32 parameters a device holds
    # GPU targets: the kernel census (bert_jax.compiler.gpu_census), per device: kind ->
    # {"kernels", "bytes", "flops"}, and purpose -> {"kernels", "forward", "backward",
    # "step", "memory_bound"} (bytes). Empty for TPUs.
    kernels_by_kind: dict = dataclasses.field(default_factory=dict)
    kernels_by_purpose: dict = dataclasses.field(default_factory=dict)
    kernels_by_layer: dict = dataclasses.field(default_factory=dict)  # gpu_census.per_layer
    # Gradient accumulation's micro-batches in a full step: its loop's body counts this many
    # times in the bytes table, the collectives and the bound (XLA's own counts: once).
    micro_batches: int = 1
    # Splash kernels (bert_jax.compiler.aot_splash), from their compiled grids: layer ->
    # {"key_blocks": visited per query block, "of": key blocks in a row}; the model's
    # sliding window, tokens a side, to hold them to (0: none); the HBM bytes the grids
    # stream beyond reading each operand once (in the memory term).
    splash_masks: dict = dataclasses.field(default_factory=dict)
    window: int = 0
    kernel_bytes_per_device: float = 0.0
    num_layers: int = 0  # the encoder's layers (0: a report written before it was kept)
    attention_bands: bool = False  # precision.gpu_attention_bands: a GPU's sliding layers
    band_kernel: bool = False  # precision.gpu_band_kernel: a GPU's sliding layers

    @property
    def compile_cost(self) -> str:
        """What the compile took on this host: its time and the compiler's peak memory."""
        if not self.compile_peak_resident_bytes:  # a report written before it was measured
            return f"compiled in {self.compile_seconds:.1f} s"
        return (f"compiled in {self.compile_seconds:.1f} s, peak resident memory "
                f"{format_bytes(self.compile_peak_resident_bytes)} (the process held "
                f"{format_bytes(self.resident_before_compile_bytes)} before)")

    @property
    def fits(self) -> bool:
        return not self.out_of_memory and self.peak_bytes <= self.hbm_bytes_per_device

    @property
    def generation(self) -> "TpuGeneration | gpu_targets.GpuCard":
        return accelerator(self.device_kind)

    @property
    def is_gpu(self) -> bool:
        return gpu_targets.card_for_device_kind(self.device_kind) is not None

    @property
    def num_chips(self) -> int:
        return self.num_devices // self.devices_per_chip

    @property
    def peak_bytes(self) -> int:
        """Memory live at once on a device: arguments, new outputs, temporaries, code."""
        return (self.argument_bytes + self.output_bytes - self.alias_bytes + self.temp_bytes
                + self.code_bytes)

    @property
    def hbm_bytes_per_device(self) -> int:
        return self.generation.hbm_bytes_per_chip // self.devices_per_chip

    @property
    def collective_bytes_per_device(self) -> float:
        return float(sum(self.collective_bytes.values()))

    @property
    def memory_bytes_per_device(self) -> float:
        """The roofline's bytes: the corrected HBM count where the program was read (with
        what splash kernels stream), never below the state's compulsory traffic (every argument read and every output written
        once, whatever stays on chip between), else XLA's count."""
        if not self.hbm_traffic_per_device:
            return self.bytes_accessed_per_device
        return max(self.hbm_traffic_per_device + self.kernel_bytes_per_device,
                   self.argument_bytes + self.output_bytes)

    @property
    def compute_flops_per_device(self) -> float:
        """The compute term's FLOPs: XLA's count plus the Pallas kernels', never below the
        device's share of the model's matmuls. XLA counts a `while` loop's body once (it
        cannot know the trip count), and under FSDP on v4 libtpu runs every weight-gradient
        product as such a loop beside its reduce-scatter ring (`windowed_dot_general`): there
        XLA's FLOPs fall 13-15% short of the model's, as if FSDP computed less than data
        parallel. No correct program does fewer than the model's matmuls."""
        return max(self.compiled_flops_per_device + self.kernel_flops_per_device,
                   self.model_flops_per_step / self.num_devices)

    def roofline_terms(self) -> dict[str, float]:
        """Seconds per step each resource needs at its peak, per device: the step takes at
        least the largest. A term is absent where the chip table has no bandwidth for it."""
        generation, share = self.generation, self.devices_per_chip
        terms = {"compute": self.compute_flops_per_device
                 / (generation.peak_bf16_flops_per_chip / share)}
        if generation.hbm_bytes_per_second_per_chip:
            terms["memory"] = self.memory_bytes_per_device / (
                generation.hbm_bytes_per_second_per_chip / share)
        if generation.interconnect_bytes_per_second_per_chip:
            terms["interconnect"] = self.collective_bytes_per_device / (
                generation.interconnect_bytes_per_second_per_chip / share)
        return terms

    def roofline_seconds(self) -> float:
        """The roofline bound: no step is faster than its slowest resource at peak."""
        return max(self.roofline_terms().values())

    def step_seconds(self, mfu: float) -> float:
        """Projected step time if the slice sustains `mfu` of its peak bf16 FLOP/s."""
        peak = self.num_chips * self.generation.peak_bf16_flops_per_chip
        return self.model_flops_per_step / (peak * mfu)


def resolved_model_config(run_config) -> tuple[BertConfig, bool]:
    """The run's model config; vocab_size 0 ("from the vocabulary file") becomes the family's
    released one (BERT's English 30,522, ModernBERT's 50,368), since AOT needs no data.
    Returns (config, whether it was substituted)."""
    values = dict(run_config.model)
    substituted = values["vocab_size"] == 0
    if substituted:
        family = FAMILIES[values.get("family", "bert")]
        values["vocab_size"] = family.config_class.__dataclass_fields__["vocab_size"].default
    return config_from_dict(values, source="run config 'model'"), substituted


def _compile(lowered):
    """(compiled, None), or (None, XLA's message) when the step does not fit in HBM (the
    TPU compiler refuses such a step; the GPU compiler builds it, and the fit says so)."""
    import jax

    try:
        return lowered.compile(), None
    except jax.errors.JaxRuntimeError as error:
        message = str(error)
        if not message.startswith("RESOURCE_EXHAUSTED"):
            raise
        return None, message.splitlines()[0]


def resolve_shapes(run_config) -> str:
    """Fills unset data.seq_len / data.max_predictions from the shards' manifest, or, with no
    shards configured, the original phase-1 shapes (128, 20); objective mlm's
    max_predictions comes from its masking schedule either way. Returns what was filled
    without shards, for the user ("" if nothing was)."""
    from bert_jax.tasks import pretraining_data

    data, objective = run_config.data, run_config.get("objective", "mlm_nsp")
    shards = data
    if data.get("sources") and not data.train_files:  # a mixture: its sources' shards
        shards = ml_collections.ConfigDict(data.to_dict())
        shards.train_files = mixture_config.all_files(data)
    if None not in (data.seq_len, data.max_predictions) or shards.train_files or data.demo_dir:
        data.update(pretraining_data.shard_shapes(shards, lambda message: None, objective))
        return ""
    filled = []
    for key, value in pretraining_data.PHASE_ONE_SHAPES.items():
        if data[key] is None and (key, objective) != ("max_predictions", "mlm"):
            data[key] = value
            filled.append(f"data.{key} {value}, the original phase 1's")
    if objective == "mlm" and data.max_predictions is None:
        # its max_predictions: the masking schedule's slots at that seq_len
        data.update(pretraining_data.shard_shapes(data, lambda message: None, objective))
        filled.append(f"data.max_predictions {data.max_predictions}, the masking schedule's "
                      f"slots at {data.seq_len} tokens")
    return "; ".join(filled)


def compile_train_step(run_config, devices: list, topology: str = "",
                       memory_check: bool = True) -> CompileReport:
    """Compiles the real train step (bert_jax.training.train_step) for `devices` and measures it.

    With `memory_check`, refuses (UserError) before compiling where this machine has less
    memory available than the least a compile of the program's size took
    (bert_jax.compiler.compile_memory)."""
    from bert_jax.compiler import aot_measure, flops
    from bert_jax import sharding
    from bert_jax.tasks.pretraining import task_from_run_config
    from bert_jax.training import train_step

    resolve_shapes(run_config)
    model_config, _ = resolved_model_config(run_config)
    mesh = sharding.mesh_from_config(run_config.mesh, devices)
    start = time.perf_counter()
    device, data = devices[0], run_config.data
    kernels, out_of_memory = None, None
    with PeakMemory() as peak:
        is_gpu = gpu_targets.card_for_device_kind(device.device_kind) is not None
        # Building the step traces the model once (its abstract state), so cuDNN's checks
        # must answer for the target there too, not only when the step is lowered.
        with gpu_targets.answering_for(device) if is_gpu else contextlib.nullcontext():
            bundle = train_step.build_train_step(
                run_config, mesh, task_from_run_config(run_config), model_config=model_config)
            lowered = bundle.train_step.lower(
                bundle.abstract_state, bundle.abstract_batch, bundle.abstract_rng)
        operations = compile_memory.program_operations(lowered)
        least = compile_memory.LOWER_BOUNDS["gpu" if is_gpu else "tpu"].bytes(operations)
        if memory_check:
            compile_memory.check(least, f"the train step for {topology or device.device_kind}",
                                 resident_before=peak.before)
        if is_gpu:
            compiled, kernels = gpu_targets.compile_with_census(lowered,
                                                                run_config.grad_accum_steps)
        else:
            compiled, out_of_memory = _compile(lowered)
    compile_seconds = time.perf_counter() - start
    # Out of memory: no memory analysis or cost to read (the fields stay 0).
    measured = dict.fromkeys(("argument_bytes", "output_bytes", "alias_bytes", "temp_bytes",
                              "code_bytes", "compiled_flops_per_device"), 0)
    measured["collectives"] = dict.fromkeys(COLLECTIVES, 0)
    if compiled is not None:
        measured = aot_measure.measure(compiled, model_config, run_config, dict(mesh.shape),
                                       kernels)
    precision = Precision.from_run_config(run_config)
    return CompileReport(
        topology=topology, device_kind=device.device_kind, num_devices=len(devices),
        devices_per_chip=devices_per_chip(device),
        mesh_shape=dict(mesh.shape), batch_size=run_config.batch_size, seq_len=data.seq_len,
        max_predictions=data.max_predictions, **measured,
        model_flops_per_step=float(flops.train_step_flops(
            model_config, run_config.batch_size, data.seq_len, data.max_predictions)),
        compile_seconds=compile_seconds, compile_peak_resident_bytes=peak.bytes,
        program_operations=operations, compile_bytes_lower_bound=least,
        resident_before_compile_bytes=peak.before, out_of_memory=out_of_memory or "",
        micro_batches=run_config.grad_accum_steps, window=getattr(model_config, "window", 0),
        num_layers=model_config.num_layers,
        attention_bands=precision.gpu_attention_bands, band_kernel=precision.gpu_band_kernel)


def devices_per_chip(device) -> int:
    """2 for a v3 or v4 chip whose cores are devices, 1 with megacore or a 1-core chip."""
    return accelerator(device.device_kind).cores_per_chip // getattr(device, "num_cores", 1)


def format_bytes(num_bytes: float) -> str:
    """GiB with two decimals, or MiB below one GiB (BERT-tiny's step needs a few MiB)."""
    if abs(num_bytes) >= GIB:
        return f"{num_bytes / GIB:.2f} GiB"
    return f"{num_bytes / 2**20:.1f} MiB"
