"""The kernels a compiled GPU step launches, by kind, with the bytes and FLOPs of each.

XLA's GPU compiler writes the program's kernel list when asked to dump it
(`gpu_targets.compiler_options`): `*.thunk_sequence.txt`, one line per thunk (a kernel, a
cuBLAS or cuDNN call, a copy, a collective) in launch order, and `*.thunk_metadata.txt`, the
HLO instruction each thunk runs. Each thunk is read here with that instruction of the
compiled HLO text: its kind, the bytes of its operands and results (as XLA's cost analysis
counts them: every operand in full and the whole result; a custom call's scratch workspace
left out), the FLOPs of a matmul or attention call, and the purpose and direction of the JAX
op it was made for (`aot_bytes.purpose_of`: attention, MLP, LayerNorm, ...; forward,
backward or the step's own). Set against an H100's profile of the same code, the count was
within 4-9% of the measured kernels and the elementwise and reduction bytes over their
measured time gave 2.45 TB/s (issue 43).

A loop (a scanned layer stack, gradient accumulation's micro-batches) is one `kWhile` thunk
with its condition's and body's thunks listed inside it: each of those is counted once per
trip (XLA's `known_trip_count`; for the step's own loop without one, gradient accumulation
under a batch warm-up, the micro-batches of a full step), the condition's once more, nested
loops multiplied; the `kWhile` itself launches nothing and moves no bytes. A dynamic-slice
fusion (a loop reading or writing one layer's slice of a stacked array) is one kernel, a
copy of the slice it takes, whatever it wraps.

The FLOPs counted are what each call computes: a cuBLAS or Triton matmul 2 M N K (batch
included); cuDNN's fused attention 2 products of 2 B N T S H forward, and 5 backward (the
scores recomputed, then the gradients of both products' inputs), padding included; a
Pallas kernel (kind "Pallas": one Triton call, opaque to the HLO) what the kernel that
bert-jax wrote says it computes over its grid (band_kernel.compiled_flops), 0 for others.
"""

import dataclasses
import glob
import json
import math
import os
import re

from bert_jax.compiler import aot_bytes, hlo_module
from bert_jax.compiler.hlo_text import array_bytes
from bert_jax.models.layers import band_kernel

MATMUL, CUDNN, PALLAS = "matmul", "cuDNN", "Pallas"
ELEMENTWISE, REDUCTION = "elementwise", "reduction"
COPIES, COLLECTIVES, OTHER = "copies", "collectives", "other"
KINDS = (MATMUL, CUDNN, PALLAS, ELEMENTWISE, REDUCTION, COPIES, COLLECTIVES, OTHER)
MEMORY_BOUND = (ELEMENTWISE, REDUCTION)  # the kernels whose time is their bytes
_COLLECTIVE_THUNKS = re.compile(r"AllReduce|AllGather|ReduceScatter|AllToAll|"
                                r"CollectivePermute|Nccl|Send|Recv")
_THUNK_LINE = re.compile(r"( *)(\d+):\s+(k\w+)\s+\[[^\]]*\]\s*(\S*)")
_SECTION_LINE = re.compile(r"( *)(condition|body):\s*$")
_TRIP_COUNT = re.compile(r'"known_trip_count":\{"n":"(\d+)"\}')
_CONTROL_THUNKS = ("kWhile", "kConditional")  # run their inner thunks; launch nothing
_SCRATCH = re.compile(r"^[su]8\[\d+\]")  # a custom call's workspace: s8[4194304]
_TAKING = ("slice", "dynamic-slice", "gather")  # ops that read only part of their operand
_TRITON_CALL = "__gpu$xla.gpu.triton"  # a Pallas kernel, compiled by Triton
_TRITON_NAME = re.compile(r'\bname = "([^"]+)"')
_TRITON_GRID = re.compile(r"\bgrid_[xyz] = (\d+)")


@dataclasses.dataclass(frozen=True)
class Kernel:
    """One thunk of the step, in launch order."""
    name: str  # the HLO instruction it runs ("fusion.11", "custom-call.3")
    thunk: str  # XLA's thunk kind ("kCustomKernel", "kCublasLtMatmul", "kCuDnn", ...)
    kind: str  # one of KINDS
    bytes: int  # operands read in full and results written
    flops: float  # matmul and attention FLOPs (0 for the rest)
    purpose: str  # aot_bytes.PURPOSE_ORDER
    direction: str  # "forward", "backward" or "step"
    op_name: str  # the JAX op it was made for


@dataclasses.dataclass(frozen=True)
class Thunk:
    """One line of XLA's kernel list."""
    kind: str  # XLA's thunk kind
    name: str  # the HLO instruction it runs
    launches: int  # how many times a step runs it (loops' trips multiplied)
    parts: tuple[str, ...] = ()  # a dynamic-slice fusion's inner instructions


@dataclasses.dataclass
class _Holder:
    """A thunk of the list that may hold the lines after it (a loop, a dynamic-slice fusion)."""
    indent: int  # its line's leading spaces: the lines inside it are indented further
    kind: str
    trips: int  # a loop's trips a step (1 for anything else)
    index: int  # its Thunk's place in the list being read
    section: str = "body"  # a loop's part being read: "condition" or "body"


def _thunks(dump_directory: str, trip_counts: dict[str, int]) -> list[Thunk]:
    """The dump's kernel list in launch order, loops' inner thunks counted per trip
    (`trip_counts`: {while instruction: trips}; a loop without a known count, once)."""
    sequences = [path for path in glob.glob(os.path.join(dump_directory,
                                                         "*.thunk_sequence.txt"))]
    if len(sequences) != 1:
        raise RuntimeError(f"expected one XLA thunk sequence in {dump_directory}, found "
                           f"{len(sequences)}: the GPU compile did not dump its kernels")
    metadata = open(sequences[0].replace("thunk_sequence", "thunk_metadata")).read()
    names = {int(thunk_id): name for name, thunk_id in re.findall(
        r'profile_annotation: "([^"]+)"\s*thunk_id: (\d+)', metadata)}
    found: list[Thunk] = []
    holders: list[_Holder] = []  # the thunks the current line may be inside, innermost last
    for line in open(sequences[0]):
        section, match = _SECTION_LINE.match(line), _THUNK_LINE.match(line)
        if not (section or match):
            continue
        indent = len((section or match).group(1))
        # A section line belongs to the loop at or above its indent; a thunk is inside the
        # holders indented less than itself.
        while holders and (holders[-1].indent > indent if section
                           else holders[-1].indent >= indent):
            holders.pop()
        if section:
            if holders:
                holders[-1].section = section.group(2)
            continue
        kind, name = match.group(3), names.get(int(match.group(2)), match.group(4))
        wrapper = next((holder for holder in holders if holder.kind == "kDynamicSliceFusion"),
                       None)
        if wrapper is not None:  # part of a dynamic-slice fusion's one kernel
            thunk = found[wrapper.index]
            found[wrapper.index] = dataclasses.replace(thunk, parts=thunk.parts + (name,))
            continue
        launches = math.prod(holder.trips + (holder.section == "condition")
                             for holder in holders if holder.kind == "kWhile")
        found.append(Thunk(kind, name, launches))
        holders.append(_Holder(indent, kind, trip_counts.get(name, 1), len(found) - 1))
    return found


def _called(module, instruction) -> list:
    """Every instruction of the computations `instruction` calls, nested calls included."""
    found, pending = [], list(instruction.calls)
    while pending:
        body = module.computations.get(pending.pop(), [])
        found += body
        pending += [name for inner in body for name in inner.calls]
    return found


def _dimensions(shape: str) -> list[int]:
    """[4096, 1024] from "bf16[4096,1024]{1,0}" (the first array written in `shape`)."""
    return [int(size) for size in re.search(r"\[([\d,]*)\]", shape).group(1).split(",") if size]


def _matmul_flops(result: str, left: str, contracting) -> float:
    """2 x the result's elements x the contracted size (batch dimensions are in the result)."""
    sizes = _dimensions(left)
    return 2.0 * math.prod(_dimensions(result)) * math.prod(sizes[int(i)] for i in contracting)


def _custom_call_flops(instruction, types: dict) -> float:
    config = re.search(r"backend_config=(\{.*\})\s*$", instruction.attributes)
    if not config:
        return 0.0
    config = json.loads(config.group(1))
    first_result = re.search(r"(?:pred|[suf]\d+|bf16)\[[\d,]*\]", instruction.result).group(0)
    operands = [types.get(name, "") for name in instruction.operands]
    if "gemm_backend_config" in config:
        numbers = config["gemm_backend_config"]["dot_dimension_numbers"]
        return _matmul_flops(first_result, operands[0], numbers["lhs_contracting_dimensions"])
    if "cudnn_fmha_backend_config" in config:
        # One product, Q K^T: 2 x Q's elements (B T N H) x the keys' length S, the last
        # dimension of the (B, N, T, S) scores cuDNN is told of.
        scores = config["cudnn_fmha_backend_config"]["intermediate_tensor_shape"]
        product = 2.0 * math.prod(_dimensions(operands[0])) * int(scores["dimensions"][-1])
        return (5 if "Backward" in instruction.attributes else 2) * product
    return 0.0


def _pallas_flops(instruction, types: dict) -> float:
    """A Pallas kernel's FLOPs where bert-jax wrote it (band_kernel: its Triton call's name,
    grid and queries say), else 0: Triton's program is opaque to the HLO."""
    name = _TRITON_NAME.search(instruction.attributes)
    programs = math.prod(int(size) for size in _TRITON_GRID.findall(instruction.attributes))
    queries = _dimensions(types.get(instruction.operands[0], "")) if instruction.operands else []
    flops = band_kernel.compiled_flops(name.group(1), programs, queries) if name else None
    return flops or 0.0


def _kind_and_flops(thunk: str, instruction, module, types: dict) -> tuple[str, float]:
    if instruction is not None and _TRITON_CALL in instruction.attributes:
        return PALLAS, _pallas_flops(instruction, types)
    if _COLLECTIVE_THUNKS.search(thunk):
        return COLLECTIVES, 0.0
    if thunk in ("kGemm", "kCublasLtMatmul", "kCuDnn"):
        flops = _custom_call_flops(instruction, types) if instruction else 0.0
        return (CUDNN if thunk == "kCuDnn" else MATMUL), flops
    if thunk in ("kCopy", "kDeviceToDeviceCopy") or thunk.startswith(("kMemset", "kMemzero")):
        return COPIES, 0.0
    if thunk not in ("kKernel", "kCustomKernel") or instruction is None:
        return OTHER, 0.0
    inner = _called(module, instruction)
    dots = [op for op in inner if op.opcode == "dot"]
    if dots:
        inner_types = {op.name: op.result for op in inner}
        return MATMUL, sum(_matmul_flops(
            dot.result, inner_types.get(dot.operands[0], ""),
            re.search(r"lhs_contracting_dims=\{([\d,]*)\}", dot.attributes).group(1).split(","))
            for dot in dots)
    if any(op.opcode in ("reduce", "reduce-window") for op in inner):
        return REDUCTION, 0.0
    return ELEMENTWISE, 0.0


def _sliced_reads(module, fusion) -> dict[int, int]:
    """{operand index: bytes} for a fusion's operands that it reads only through slices or
    gathers (looking through bitcasts): what those take, not the whole operand."""
    body = module.computations.get(fusion.calls[0], []) if fusion.calls else []
    users = {}
    for inner in body:
        for operand in inner.operands:
            users.setdefault(operand, []).append(inner)

    def taken(name: str) -> int | None:  # bytes taken from `name`, None if read in full
        total = 0
        for user in users.get(name, []):
            if user.opcode == "bitcast":
                inner = taken(user.name)
            elif user.opcode in _TAKING and user.operands[0] == name:
                inner = user.result_bytes
            else:
                inner = None
            if inner is None:
                return None
            total += inner
        return total
    found = {}
    for inner in body:
        if inner.opcode == "parameter" and users.get(inner.name):
            size = taken(inner.name)
            if size is not None and size < inner.result_bytes:
                found[inner.parameter_number] = size
    return found


def _updated_in_place(module, fusion) -> tuple[dict[int, int], int | None]:
    """({parameter index: 0}, bytes written) for a fusion whose result is a
    dynamic-update-slice of its own parameter (a loop writing one layer's slice of a stacked
    array; one output of a tuple may be): XLA gives the result that parameter's buffer, so
    the kernel writes the update and reads nothing else of it. ({}, None) for other ops."""
    body = module.computations.get(fusion.calls[0], []) if fusion.calls else []
    if not body:
        return {}, None
    by_name = {inner.name: inner for inner in body}
    root = body[-1]  # the ROOT, written last
    outputs = [by_name.get(name) for name in root.operands] if root.opcode == "tuple" else [root]
    skipped, written = {}, 0
    for output in outputs:
        buffer = by_name.get(output.operands[0]) if output and output.operands else None
        if output is not None and output.opcode == "dynamic-update-slice" and (
                buffer is not None and buffer.opcode == "parameter"):
            skipped[buffer.parameter_number] = 0
            written += by_name[output.operands[1]].result_bytes
        elif output is not None:
            written += output.result_bytes
    return (skipped, written) if skipped else ({}, None)


def _bytes(module, instruction, types: dict) -> int:
    """Operands and results; an operand read only through slices or gathers counts what
    they take, a buffer updated in place only the update written into it, and a custom
    call's u8/s8 workspace is left out."""
    results = re.findall(r"(?:pred|[suf]\d+|bf16|f8e\w+)\[[\d,]*\]", instruction.result)
    if instruction.opcode == "custom-call":
        results = [shape for shape in results if not _SCRATCH.match(shape)]
    sliced, written = {}, None
    if instruction.opcode == "fusion":
        skipped, written = _updated_in_place(module, instruction)
        sliced = {**_sliced_reads(module, instruction), **skipped}
    operands = sum(sliced.get(index, sum(array_bytes(types.get(name, ""))))
                   for index, name in enumerate(instruction.operands))
    return (sum(array_bytes(" ".join(results))) if written is None else written) + operands


def census(dump_directory: str, hlo_text: str, loop_trips: int = 1) -> list[Kernel]:
    """Every kernel launch of the dumped program, read with its instruction in `hlo_text`:
    a kernel inside a loop appears once per trip; the step's own loop, where XLA does not
    know its trips, runs `loop_trips` (gradient accumulation's micro-batches)."""
    module = hlo_module.parse(hlo_text)
    located = {}  # instruction name -> (instruction, the result types of its computation)
    for instructions in module.computations.values():
        types = {instruction.name: instruction.result for instruction in instructions}
        located.update((instruction.name, (instruction, types)) for instruction in instructions)
    trip_counts = {loop.name: loop_trips for loop in hlo_module.step_loops(module)}
    trip_counts.update({name: int(trips.group(1)) for name, (instruction, _) in located.items()
                        if instruction.opcode == "while"
                        and (trips := _TRIP_COUNT.search(instruction.attributes))})
    named = {op.name: op for op in aot_bytes.op_bytes(hlo_text)}
    kernels = []
    for thunk in _thunks(dump_directory, trip_counts):
        if thunk.kind in ("kAsyncStart", "kAsyncDone") or (
                _COLLECTIVE_THUNKS.search(thunk.kind) and thunk.kind.endswith("Done")):
            # An asynchronous collective's wrapper (the collective is listed inside it) and
            # the wait for it: no kernels of their own.
            continue
        instruction, types = located.get(thunk.name, (None, {}))
        if thunk.kind in _CONTROL_THUNKS:
            kind, flops, moved = OTHER, 0.0, 0
        elif thunk.kind == "kDynamicSliceFusion":  # a copy of the slice its parts move
            kind, flops = COPIES, 0.0
            moved = sum(_bytes(module, *located[part]) for part in thunk.parts
                        if part in located)
        else:
            kind, flops = _kind_and_flops(thunk.kind, instruction, module, types)
            moved = _bytes(module, instruction, types) if instruction else 0
        op = named.get(thunk.name)
        kernels += [Kernel(
            name=thunk.name, thunk=thunk.kind, kind=kind, bytes=moved, flops=flops,
            purpose=op.purpose if op else aot_bytes.OTHER,
            direction=op.direction if op else "step",
            op_name=op.op_name if op else "")] * thunk.launches
    return kernels


def by_kind(kernels: list[Kernel]) -> dict[str, dict]:
    """{kind: {"kernels", "bytes", "flops"}} in KINDS order, every kind present."""
    table = {kind: {"kernels": 0, "bytes": 0, "flops": 0.0} for kind in KINDS}
    for kernel in kernels:
        row = table[kernel.kind]
        row["kernels"] += 1
        row["bytes"] += kernel.bytes
        row["flops"] += kernel.flops
    return table


def by_purpose(kernels: list[Kernel]) -> dict[str, dict]:
    """{purpose: {"kernels", "forward", "backward", "step" (bytes), "memory_bound" (the
    elementwise and reduction kernels' bytes)}} for the purposes that have kernels."""
    table = {}
    for kernel in kernels:
        row = table.setdefault(kernel.purpose, {"kernels": 0, "forward": 0, "backward": 0,
                                                "step": 0, "memory_bound": 0})
        row["kernels"] += 1
        row[kernel.direction] += kernel.bytes
        row["memory_bound"] += kernel.bytes if kernel.kind in MEMORY_BOUND else 0
    order = aot_bytes.PURPOSE_ORDER
    return dict(sorted(table.items(), key=lambda item: order.index(item[0])))


def per_layer(kernels: list[Kernel]) -> dict[int, dict]:
    """{layer index: {"kernels", "memory_bound" (bytes)}} of the kernels made for each
    encoder layer's ops (`/layer_N/` in their op_name); the embeddings, heads, loss and the
    update are in none. A deeper model of the same width adds about one middle layer's."""
    table = {}
    for kernel in kernels:
        match = re.search(r"/layer_(\d+)/", kernel.op_name)
        if match:
            row = table.setdefault(int(match.group(1)), {"kernels": 0, "memory_bound": 0})
            row["kernels"] += 1
            row["memory_bound"] += kernel.bytes if kernel.kind in MEMORY_BOUND else 0
    return dict(sorted(table.items()))
