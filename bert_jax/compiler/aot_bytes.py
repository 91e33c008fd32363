"""Where a compiled train step's `bytes accessed` go: every op's bytes, named by purpose.

XLA's cost analysis counts, for each op of the program, the bytes of every operand it reads
and of the result it writes, and sums them. This module repeats that count op by op from
the compiled HLO text (`bert_jax.compiler.hlo_module`) and groups the ops by what they are for, from
the JAX `op_name` each op carries: the model's scopes (`bert/layer_3/attention/...`; a
`transpose(jvp(...))` prefix marks the backward pass) and the step's own
(`bert_jax.training.optimizer`: gradient_norm, gradient_clipping, optimizer_update,
finite_check). A fusion is named by its own op_name (XLA gives it its root's); an op
without one (XLA's copies between memories, a combined collective's buffers) by the first
op that reads its result, else by what it reads. Collectives are one purpose whatever they
carry, and "other" holds what no rule names: the loss sums, the step counter, the dropout
key's fold-in.

Beside it, a count from first principles (`first_principles`): parameters, gradients and
the optimizer's moments read and written once per step, the weights read in the forward and
backward passes, and each activation written once and read once in each direction.
"""

import collections
import dataclasses
import re

from bert_jax.compiler import hlo_module
from bert_jax.compiler.aot_hlo import COLLECTIVES

# Ops that move no bytes of their own: they name, slice into or bundle other buffers.
FREE_OPCODES = frozenset({"parameter", "constant", "get-tuple-element", "tuple", "bitcast",
                          "partition-id", "replica-id", "after-all", "opt-barrier"})
_COLLECTIVE_OPCODES = tuple(COLLECTIVES) + tuple(kind + "-start" for kind in COLLECTIVES)

# (purpose, pattern on the op_name); the first that matches names the op. The step's own
# scopes come first: an optimizer op's name holds no model scope, but a model op's name
# never holds theirs.
PURPOSES = (
    ("finite check", r"finite_check"),
    ("gradient clipping", r"gradient_clipping"),
    ("gradient norm", r"gradient_norm"),
    ("optimizer update", r"optimizer_update"),
    ("LayerNorm", r"layer_norm|_norm/|/norm/"),  # BERT's; ModernBERT's attention_norm, ...
    ("dropout (random bits, masks)", r"[Dd]ropout|threefry|random_bits"),
    ("attention", r"/attention\b"),
    ("MLP", r"/mlp\b"),
    ("embeddings", r"/embeddings\b"),
    ("MLM head and loss", r"mlm_head|/head/|word_logits|take_along_axis|log_softmax|"
                          r"cross_entropy"),  # losses.SCOPE
    ("NSP head and pooler", r"nsp_head|pool"),
)
COLLECTIVE_PURPOSE = "collectives' buffers"
OTHER = "other"
HBM = 0  # memory space 0: the chip's HBM; the others are on chip (or the host's)
PURPOSE_ORDER = tuple(name for name, _ in PURPOSES) + (COLLECTIVE_PURPOSE, OTHER)


@dataclasses.dataclass(frozen=True)
class OpBytes:
    name: str  # the HLO instruction
    opcode: str
    op_name: str  # the JAX op_name it was attributed by
    purpose: str  # one of PURPOSE_ORDER
    direction: str  # "forward", "backward" or "step" (everything outside the model)
    # Per step: an op in gradient accumulation's loop counts once per micro-batch.
    read_bytes: int  # as XLA's cost analysis counts them (counted_bytes)
    written_bytes: int
    hbm_read_bytes: int  # the corrected count: what touches HBM (counted_bytes)
    hbm_written_bytes: int  # the results that go to HBM


def purpose_of(op_name: str, opcode: str) -> str:
    if opcode in _COLLECTIVE_OPCODES:
        return COLLECTIVE_PURPOSE
    for purpose, pattern in PURPOSES:
        if re.search(pattern, op_name):
            return purpose
    return OTHER


def direction_of(op_name: str) -> str:
    if "transpose(jvp(" in op_name:
        return "backward"
    return "forward" if "jvp(" in op_name else "step"


def _naming(module: hlo_module.Module) -> dict[str, str]:
    """The op_name each entry instruction is attributed by (module docstring)."""
    instructions = module.entry_instructions()
    names = {instruction.name: instruction.op_name for instruction in instructions}
    readers: dict[str, list[str]] = collections.defaultdict(list)
    for instruction in instructions:
        for operand in instruction.operands:
            readers[operand].append(instruction.name)
    for instruction in instructions:  # a fusion without a name: its root's
        if not names[instruction.name] and instruction.opcode == "fusion" and instruction.calls:
            body = module.computations.get(instruction.calls[0], [])
            named = [inner.op_name for inner in body if inner.op_name]
            names[instruction.name] = named[-1] if named else ""
    def resolve(name: str, seen: set) -> str:
        if names.get(name) or name in seen:
            return names.get(name, "")
        seen.add(name)
        for reader in readers[name]:
            found = resolve(reader, seen)
            if found and not found.startswith("args["):
                return found
        return ""
    by_name = module.by_name(module.entry)
    for instruction in instructions:
        if not names[instruction.name] or names[instruction.name].startswith("args["):
            found = resolve(instruction.name, set()) if not names[instruction.name] else ""
            if not found:
                for operand in instruction.operands:
                    if names.get(operand) and operand in by_name:
                        found = names[operand]
                        break
            names[instruction.name] = found or names[instruction.name]
    return names


def _total(pieces: list[tuple[int, int]], hbm_only: bool) -> int:
    return sum(size for size, space in pieces if space == HBM or not hbm_only)


def _is_bitcast_call(instruction) -> bool:
    """libtpu's `ConcatBitcast`: slices laid side by side, read as one array; moves nothing."""
    return (instruction.opcode == "custom-call"
            and 'custom_call_target="ConcatBitcast"' in instruction.attributes)


_ALIASED = re.compile(r"\{(\d+)\}:\s*\((\d+),")


def _carried(instruction, result_arrays: int) -> tuple[set, set] | None:
    """(result indices, operand indices) a collective fusion carries through in place, or
    None. Only for a flat result tuple, whose array i is result i."""
    if (instruction.opcode != "fusion"
            or "calls=%async_collective_fusion" not in instruction.attributes):
        return None
    _, marker, rest = instruction.attributes.partition("output_to_operand_aliasing=")
    if not marker or re.sub(r"\{[^}]*\}", "", instruction.result).count("(") != 1:
        return None
    aliasing, _ = hlo_module.split_balanced(rest, "{}")
    pairs = [(int(result), int(operand)) for result, operand in _ALIASED.findall(aliasing)]
    if any(result >= result_arrays for result, _ in pairs):
        return None
    return {result for result, _ in pairs}, {operand for _, operand in pairs}


def counted_bytes(instruction, types: dict, hbm_only: bool) -> tuple[int, int]:
    """(bytes read, bytes written) by one op.

    hbm_only=False counts as XLA's cost analysis does, which these rules reproduce op by
    op (their sum is within a few percent of its `bytes accessed`): every operand in full
    and the whole result, except that a `copy-done` or `slice-done` (the end of an
    asynchronous copy) reads nothing and writes its result, a `slice-start` reads its
    slice and writes nothing, and a `ConcatBitcast` reads nothing and writes its result.

    hbm_only=True is the corrected count, the bytes that touch HBM, less:
    - arrays in another memory space (S(1) VMEM, S(2) SMEM, S(3) v4's CMEM, the other
      on-chip spaces: `{1,0:T(8,128)S(3)}`): XLA counts a buffer the compiler prefetched
      on chip as read from HBM by every op that reads it;
    - the bookkeeping of asynchronous copies: XLA counts a `copy-start` as writing its
      whole result tuple (destination and source) and the `copy-done` as writing the
      destination again, three writes of a buffer moved once, and a `ConcatBitcast` as
      writing the slices it only lays side by side. Here a copy or slice reads its source
      and writes its destination once, at its start; the done and the bitcast move nothing.

    Both counts leave out what a collective fusion (libtpu's `async_collective_fusion`, a
    piece of computation run while a collective is in flight) only carries: the in-flight
    collective's buffers enter as operands and leave as the results aliased to them
    (`output_to_operand_aliasing`), in place. Counted in full, the word-embedding table
    being gathered under FSDP was read and written by each of dozens of such fusions
    (2.4x XLA's own total on v5e).
    """
    opcode = instruction.opcode
    results = hlo_module.arrays(instruction.result)
    per_operand = [hlo_module.arrays(types.get(operand, "")) for operand in instruction.operands]
    carried = _carried(instruction, len(results))
    if carried:
        results = [piece for index, piece in enumerate(results) if index not in carried[0]]
        per_operand = [pieces for index, pieces in enumerate(per_operand)
                       if index not in carried[1]]
    operands = [piece for pieces in per_operand for piece in pieces]
    if opcode in ("copy-done", "slice-done") or _is_bitcast_call(instruction):
        return 0, 0 if hbm_only else _total(results, False)
    if opcode == "slice-start":  # ((source), destination, flag)
        destination = results[1:2]
        read = [(size, space) for (size, _), (_, space) in zip(destination, operands[:1])]
        return _total(read, hbm_only), _total(destination, True) if hbm_only else 0
    if hbm_only and opcode == "copy-start":  # (destination, source, flag)
        results = results[:1]
    elif hbm_only and opcode.endswith("-start"):  # (operands..., outputs...): the outputs
        arrays = [piece for piece in results if piece[0] > 4]
        results = arrays[len(arrays) // 2:] if len(arrays) % 2 == 0 else arrays
    elif hbm_only and opcode.endswith("-done"):
        return 0, 0
    return _total(operands, hbm_only), _total(results, hbm_only)


def op_bytes(hlo_text: str, loop_trips: int = 1) -> list[OpBytes]:
    """Every op that moves bytes, with its operands' and result's bytes and purpose.

    A `while` moves nothing itself (its state stays where it is): the ops of its body are
    counted in its place, once, as XLA's cost analysis counts a loop (it cannot know the trip
    count), except the body of gradient accumulation's loop, whose ops count `loop_trips`
    times (the micro-batches of a full step; `hlo_module.loop_repeats`). libtpu's own loops
    are the windowed matmuls beside FSDP's gradient permutes, whose bodies work on chip;
    counting such a body once keeps the corrected count a floor. A `conditional` (a CPU
    step's optimizer update, `train_step._update_if`) likewise counts its branches' ops."""
    module = hlo_module.parse(hlo_text)
    names = _naming(module)
    repeats = hlo_module.loop_repeats(module, loop_trips)
    found: list[OpBytes] = []

    def count(computation: str, inherited: str) -> None:
        instructions = module.computations.get(computation, [])
        types = {instruction.name: instruction.result for instruction in instructions}
        times = repeats.get(computation, 1)
        for instruction in instructions:
            op_name = (names.get(instruction.name, "") if computation == module.entry
                       else instruction.op_name) or inherited
            if instruction.opcode in ("while", "conditional"):
                for called in instruction.calls:
                    count(called, op_name)
                continue
            if instruction.opcode in FREE_OPCODES:
                continue
            read, written = counted_bytes(instruction, types, hbm_only=False)
            hbm_read, hbm_written = counted_bytes(instruction, types, hbm_only=True)
            found.append(OpBytes(
                name=instruction.name, opcode=instruction.opcode, op_name=op_name,
                purpose=purpose_of(op_name, instruction.opcode),
                direction=direction_of(op_name),
                read_bytes=read * times, written_bytes=written * times,
                hbm_read_bytes=hbm_read * times, hbm_written_bytes=hbm_written * times))

    count(module.entry, "")
    return found


def by_purpose(ops: list[OpBytes]) -> dict[str, dict[str, int]]:
    """{purpose: {"forward": bytes, "backward": ..., "step": ..., "ops": count}}."""
    table = {purpose: {"forward": 0, "backward": 0, "step": 0, "ops": 0, "hbm": 0}
             for purpose in PURPOSE_ORDER}
    for op in ops:
        row = table[op.purpose]
        row[op.direction] += op.read_bytes + op.written_bytes
        row["hbm"] += op.hbm_read_bytes + op.hbm_written_bytes
        row["ops"] += 1
    return table


def state_bytes(hlo_text: str) -> dict[str, int]:
    """Bytes per device of the step's parameters and optimizer state, from the entry
    parameters' names (`args[0].params[...]`, `args[0].opt_state...`)."""
    module = hlo_module.parse(hlo_text)
    found = {"params": 0, "opt_state": 0}
    for instruction in module.entry_instructions():
        if instruction.opcode != "parameter":
            continue
        for part in found:
            if instruction.op_name.startswith(f"args[0].{part}"):
                found[part] += instruction.result_bytes
    return found


def first_principles(params_bytes: int, has_moments: bool, gathered_factor: int,
                     model_config, tokens: int, seq_len: int, compute_bytes: int,
                     remat: bool) -> dict[str, float]:
    """HBM bytes one device must move in a step, counted from what the step is, not from
    the program (float32 parameters and moments; `params_bytes` the device's share,
    `tokens` the device's share of the batch's tokens):

    - optimizer update: parameters, gradients and both moments read once, parameters and
      moments written once (AdamW or LAMB: 4 reads and 3 writes of a parameter-sized tree);
    - gradients: written once by the backward pass (whole, x `gathered_factor`, under FSDP);
    - weights in the passes: each weight (gathered whole under FSDP) read in float32 and
      written in the compute dtype once, that copy read by the forward and by the
      backward's input-gradient product;
    - activations: each layer's saved tensors (per token: query, key, value, context,
      attention output, two LayerNorms' inputs and outputs, the MLP's 4 H intermediate
      before and after GELU, the MLP output: 18 H values; per token and head the scores,
      probabilities and dropout mask: 3 T values) written by the forward and read by the
      backward, their gradients written and read once: 4 passes, 6 with remat.
    """
    used = params_bytes * gathered_factor
    per_token = 18 * model_config.hidden_dim + 3 * model_config.num_heads * seq_len
    passes = 6 if remat else 4
    return {
        "optimizer update: read p, g, m, v; write p, m, v": float(
            (7 if has_moments else 3) * params_bytes),
        "gradients written by the backward pass": float(used),
        "weights: read f32, compute copy written and read twice": used * (
            1 + 3 * compute_bytes / 4),
        f"activations: {passes} passes, (18 H + 3 heads T) per token and layer": float(
            passes * tokens * model_config.num_layers * per_token * compute_bytes),
    }
