"""The splash attention kernels of a compiled step, layer by layer: which mask each runs and
the work its grid does.

A Pallas splash call is opaque to XLA's cost analysis (it counts its FLOPs as about none),
but its grid is written in its operands, which the compiled HLO lists with their types
(`operand_layout_constraints`). The first is the mask's block table (`data_next`):
(heads, query blocks, key blocks visited) for the forward and query-gradient kernels,
(heads, query blocks visited, key blocks) for the key/value-gradient one. Splash visits
only the blocks its mask touches, so the table says which mask the compiled kernel holds:

  a full mask: each 128-token query block visits all T / 128 key blocks;
  a local mask (splash's `LocalMask`, a window of w tokens on each side of the query):
  each visits the 1 + 2 ceil(w / 128) blocks the window reaches (3 for ModernBERT's 64).

The layer is in each call's op_name (`.../layer_1/attention/...`), its rows, heads, length
and head size in its query operand (rows, heads, T, head_dim): a vmapped kernel per row,
(heads, T, head_dim) where a device runs one row.
Each visit computes a block of scores and of context; the forward and the query-gradient
kernels stream a block of keys and one of values per visit, the key/value-gradient kernel a
block of queries and one of output gradients, from where those arrays are held.
"""

import dataclasses
import math
import re

from bert_jax.compiler import hlo_module
from bert_jax.compiler.hlo_text import array_shapes, element_bytes

_PHASE = re.compile(r"splash_m[hq]a_(fwd|dq|dkv)")
_LAYER = re.compile(r"/layer_(\d+)/")
_CONSTRAINTS = re.compile(r"operand_layout_constraints=\{(.*?)\}\s*,\s*\w+=")
_BLOCK = re.compile(r'block_(q|kv)\\?"\s*:\s*(\d+)')
DEFAULT_BLOCK = 128  # splash's BlockSizes.get_default()


@dataclasses.dataclass(frozen=True)
class SplashCall:
    layer: int  # -1 where the op_name names none
    phase: str  # "fwd", "dq" or "dkv"
    blocks_visited: int  # grid blocks per head: the mask table's last two sizes multiplied
    block_q: int
    block_kv: int
    rows: int  # sequences this device's call runs (the vmapped batch)
    heads: int
    seq_len: int
    head_dim: int
    element_bytes: int  # of the queries, keys and values
    streams_from_hbm: bool  # its (rows, heads, T, head_dim) operands are in HBM
    repeats: int = 1  # runs per step (gradient accumulation's micro-batches)

    @property
    def key_blocks(self) -> int:
        return self.seq_len // self.block_kv

    @property
    def key_blocks_per_query_block(self) -> float:
        return self.blocks_visited / (self.seq_len // self.block_q)


def _call(instruction, types: dict, repeats: int) -> SplashCall | None:
    phase = _PHASE.search(instruction.op_name) or _PHASE.search(instruction.name)
    constraints = _CONSTRAINTS.search(instruction.attributes)
    shapes = array_shapes(constraints.group(1) if constraints else "")
    tokens = [(index, shape) for index, (dtype, shape) in enumerate(shapes)
              if len(shape) in (3, 4) and (dtype.startswith("f") or dtype == "bf16")]
    if not phase or not shapes or len(shapes[0][1]) != 3 or not tokens:
        return None
    # (rows, heads, T, head_dim); XLA drops the rows where a device runs one
    index, (rows, heads, seq_len, head_dim) = tokens[0][0], (1,) * (4 - len(tokens[0][1])) + tokens[0][1]
    blocks = dict((kind, int(size)) for kind, size in _BLOCK.findall(instruction.attributes))
    operand = instruction.operands[index] if index < len(instruction.operands) else ""
    spaces = [space for _, space in hlo_module.arrays(types.get(operand, ""))]
    layer = _LAYER.search(instruction.op_name)
    return SplashCall(
        layer=int(layer.group(1)) if layer else -1, phase=phase.group(1),
        blocks_visited=shapes[0][1][1] * shapes[0][1][2],
        block_q=blocks.get("q", DEFAULT_BLOCK), block_kv=blocks.get("kv", DEFAULT_BLOCK),
        rows=rows, heads=heads, seq_len=seq_len, head_dim=head_dim,
        element_bytes=element_bytes(shapes[index][0]),
        streams_from_hbm=spaces[:1] == [0], repeats=repeats)


def splash_calls(module: hlo_module.Module, repeats: dict[str, int]) -> list[SplashCall]:
    """Every splash kernel call of the compiled program; `repeats`: hlo_module.loop_repeats."""
    found = []
    for computation, instructions in module.computations.items():
        types = {instruction.name: instruction.result for instruction in instructions}
        for instruction in instructions:
            if (instruction.opcode == "custom-call"
                    and "tpu_custom_call" in instruction.attributes
                    and "splash" in instruction.op_name + instruction.name):
                call = _call(instruction, types, repeats.get(computation, 1))
                if call is not None:
                    found.append(call)
    return found


def layer_masks(calls: list[SplashCall]) -> dict[str, dict]:
    """{layer: {"key_blocks": visited per query block, "of": key blocks in a row}} from each
    layer's forward kernel (JSON-ready: the layer as a string)."""
    return {str(call.layer): {"key_blocks": call.key_blocks_per_query_block,
                              "of": call.key_blocks}
            for call in sorted(calls, key=lambda call: call.layer) if call.phase == "fwd"}


def window_key_blocks(window: int, block: int = DEFAULT_BLOCK) -> int:
    """Key blocks a query block's window of `window` tokens on each side reaches, inside a
    long row: its own and ceil(window / block) on each side."""
    return 1 + 2 * math.ceil(window / block)


def kernel_flops(calls: list[SplashCall]) -> float:
    """The attention core's FLOPs per device and step as the kernels' grids compute them:
    each forward visit's (block_q x block_kv) scores and context over the head size, 3x the
    forward (the convention of bert_jax.compiler.flops), whole blocks counted: a local mask's
    edge blocks are computed in full and masked elementwise."""
    return float(sum(3 * 2 * 2 * call.blocks_visited * call.block_q * call.block_kv
                     * call.head_dim * call.rows * call.heads * call.repeats
                     for call in calls if call.phase == "fwd"))


def streamed_bytes(calls: list[SplashCall]) -> float:
    """HBM bytes per device and step the kernels stream beyond reading each operand once
    (which the corrected HBM count already holds): per visit two blocks of (block_kv x
    head_dim) keys and values, or, in the key/value-gradient kernel, of (block_q x head_dim)
    queries and output gradients, less the two whole arrays once; 0 where they sit on chip."""
    total = 0.0
    for call in calls:
        if not call.streams_from_hbm:
            continue
        block = call.block_q if call.phase == "dkv" else call.block_kv
        per_head = 2 * (call.blocks_visited * block - call.seq_len) * call.head_dim
        total += per_head * call.element_bytes * call.rows * call.heads * call.repeats
    return total


def describe(masks: dict[str, dict], window: int | None) -> str:
    """"layers 0, 3: full mask (8 of 8 key blocks per query block); layers 1, 2: local mask,
    3 of 8 key blocks, as a window of 64 tokens a side reaches" from `layer_masks`."""
    groups: dict[tuple, list[str]] = {}
    for layer, mask in masks.items():
        groups.setdefault((mask["key_blocks"], mask["of"]), []).append(layer)
    parts = []
    for (visited, of), layers in sorted(groups.items(), key=lambda item: -item[0][0]):
        named = "layer" + ("s " if len(layers) > 1 else " ") + ", ".join(layers)
        blocks = f"{visited:g} of {of} key blocks per query block"
        if visited == of:
            parts.append(f"{named}: full mask ({blocks})")
            continue
        expected = window is not None and visited == window_key_blocks(window)
        parts.append(f"{named}: local mask, {blocks}" + (
            f", as the model's window of {window} tokens a side reaches" if expected
            else ", NOT what the model's window reaches" if window is not None else ""))
    return "; ".join(parts)
