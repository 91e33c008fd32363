"""What a compiled program's HLO text says: its collectives, the bytes they move, its kernels.

XLA's cost analysis gives FLOPs and bytes accessed in HBM, but not what crosses the
interconnect, and it sees nothing inside a Pallas kernel (a `tpu_custom_call`). This module
reads the compiled HLO text (`compiled.as_text()`) for both.

Bytes per device over the interconnect, for a collective over a group of n devices on an
operand of S bytes per device, as the bandwidth-optimal ring algorithms move them:
  all-reduce          2 (n - 1) / n * S   (a reduce-scatter, then an all-gather)
  all-gather          (n - 1) * S         (S is the shard; every other shard arrives)
  reduce-scatter      (n - 1) / n * S
  all-to-all          (n - 1) / n * S
  collective-permute  S                   (each device sends its operand once)
Compiled TPU HLO prints no operand types, so S is derived from the output's size.
A collective inside a loop body is counted once, except in gradient accumulation's loop,
whose body's bytes count once per micro-batch (`repeats`: hlo_module.loop_repeats).
"""

import dataclasses
import re

from bert_jax.compiler.hlo_text import ARRAY_SHAPE, array_bytes, computation_header

# HLO instructions that move data between devices; "-start" is the async form of each.
COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")
_INSTRUCTION = re.compile(
    r"=\s*(?P<result>.*?)\s(?P<kind>" + "|".join(COLLECTIVES)
    + r")(?P<start>-start)?\((?P<operands>[^)]*)\)(?P<attributes>.*)$")
_GROUPS_LIST = re.compile(r"replica_groups=\{\{([\d,]*)\}")
_GROUPS_IOTA = re.compile(r"replica_groups=\[\d+,(\d+)\]<=")
# libtpu's named form: replica_groups=mesh['axis_0'=4,'axis_1'=2] {'axis_0'}
# or, with the devices reordered: ...=2], device_ids=([2,2]T(1,0)) {'axis_0'}
_GROUPS_MESH = re.compile(
    r"replica_groups=mesh\[([^\]]*)\](?:,\s*device_ids=\S*)?\s*\{([^}]*)\}")
_MESH_AXIS = re.compile(r"'([^']+)'=(\d+)")
_CHANNEL = re.compile(r"channel_id=(\d+)")
_OP_NAME = re.compile(r'op_name="([^"]*)"')
_PAIRS = re.compile(r"source_target_pairs=(\{[\d,{}]*\})")

# What a program holds for attention, by the custom call that marks it.
SPLASH = "splash (Pallas)"
CUDNN = "cuDNN fused attention"
XLA = "XLA (einsum, softmax, einsum)"


def output_bytes(result: str, is_start: bool) -> int:
    """Bytes of a collective's output from its result type. Compiled TPU HLO does not print
    operand types, so the result is read: an async "-start" returns (inputs..., outputs...)
    and, for a collective-permute, two u32[] scalars, which are dropped first."""
    arrays = [size for size, (_, dims) in zip(array_bytes(result), ARRAY_SHAPE.findall(result))
              if not (is_start and dims == "")]
    if is_start and len(arrays) % 2 == 0:
        arrays = arrays[len(arrays) // 2:]
    return sum(arrays)


def _group_size(attributes: str, num_devices: int) -> int:
    listed = _GROUPS_LIST.search(attributes)
    if listed:
        return len(listed.group(1).split(","))
    iota = _GROUPS_IOTA.search(attributes)
    if iota:
        return int(iota.group(1))
    named = _GROUPS_MESH.search(attributes)
    if named:
        sizes = dict((axis, int(size)) for axis, size in _MESH_AXIS.findall(named.group(1)))
        group = 1
        for axis in re.findall(r"'([^']+)'", named.group(2)):
            group *= sizes.get(axis, 1)
        return group
    return num_devices


def _wire_bytes(kind: str, output: int, group: int) -> float:
    """Bytes one device sends for one collective whose output on each device is `output`
    bytes (the ring algorithms of the module docstring, written in the output's size)."""
    if group <= 1 and kind != "collective-permute":
        return 0.0
    share = (group - 1) / group
    return {"all-reduce": 2 * share * output,  # output = operand
            "all-gather": share * output,  # output = the gathered whole
            "reduce-scatter": (group - 1) * output,  # output = the shard
            "all-to-all": share * output,
            "collective-permute": float(output)}[kind]


@dataclasses.dataclass(frozen=True)
class Collective:
    """One collective of a compiled program."""
    kind: str  # one of COLLECTIVES
    op_name: str  # the JAX operation it was made for ("" where XLA combined several)
    group_size: int  # devices in each of its groups
    bytes_sent: float  # per device and step, by the ring algorithms of the module docstring
    source_target_pairs: str = ""  # a collective-permute's {{0,1},{1,2},...}


def collective_ops(hlo_text: str, num_devices: int,
                   repeats: dict[str, int] | None = None) -> list[Collective]:
    """Every collective in compiled HLO text, once each; the bytes of one in a computation
    of `repeats` (gradient accumulation's loop) times its repeats, per step.

    Async pairs count once: the "-start" half carries the operands, "-done" is not matched.
    One collective can be written in several computations (libtpu's async collective
    fusions repeat it in each fusion it is pipelined through): those share a channel id
    and count once.
    """
    found, seen, times = [], set(), 1
    for line in hlo_text.splitlines():
        header = computation_header(line)
        if header:
            times = (repeats or {}).get(header[0], 1)
            continue
        match = _INSTRUCTION.search(line)
        if not match:
            continue
        kind, attributes = match.group("kind"), match.group("attributes")
        channel = _CHANNEL.search(attributes)
        if channel:
            if (kind, channel.group(1)) in seen:
                continue
            seen.add((kind, channel.group(1)))
        group = _group_size(attributes, num_devices)
        output = output_bytes(match.group("result"), bool(match.group("start")))
        op_name, pairs = _OP_NAME.search(attributes), _PAIRS.search(attributes)
        found.append(Collective(kind, op_name.group(1) if op_name else "", group,
                                _wire_bytes(kind, output, group) * times,
                                pairs.group(1) if pairs else ""))
    return found


def totals(found: list[Collective]) -> tuple[dict[str, int], dict[str, float]]:
    """(count, bytes sent per device) of each collective kind."""
    counts = dict.fromkeys(COLLECTIVES, 0)
    wire = dict.fromkeys(COLLECTIVES, 0.0)
    for collective in found:
        counts[collective.kind] += 1
        wire[collective.kind] += collective.bytes_sent
    return counts, wire


def collectives(hlo_text: str, num_devices: int) -> tuple[dict[str, int], dict[str, float]]:
    """(count, bytes sent per device) of each collective kind in compiled HLO text."""
    return totals(collective_ops(hlo_text, num_devices))


def attention_kernel(hlo_text: str) -> tuple[str, int]:
    """Which attention the program holds, and how many of its kernel calls there are."""
    splash = sum(1 for line in hlo_text.splitlines()
                 if "tpu_custom_call" in line and "splash" in line)
    if splash:
        return SPLASH, splash
    cudnn = sum(1 for line in hlo_text.splitlines()
                if "custom_call_target=\"__cudnn$fmha" in line)
    if cudnn:
        return CUDNN, cudnn
    return XLA, 0
