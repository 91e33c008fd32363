"""A compiled HLO module's instructions, read from its text (`compiled.as_text()`).

XLA's cost analysis gives one number for the bytes a program moves. To say where they go,
each instruction of the entry computation is read here with its result type, its operands
(compiled TPU HLO names them without types, so their types come from the instructions
that define them), the computations it calls and the JAX `op_name` of its metadata.

    module = parse(compiled.as_text())
    for instruction in module.entry_instructions(): ...

A step with gradient accumulation holds one JAX loop (`lax.scan`, or `fori_loop` under a
batch warm-up) whose body runs each micro-batch; XLA's cost analysis counts its body once,
as it cannot know the trip count (a warm-up's is a traced number). `loop_repeats` says
which computations that loop runs and how often, so that a step's bytes can be counted
per optimizer step.
"""

import dataclasses
import re

from bert_jax.compiler.hlo_text import array_bytes, computation_header

_DEFINITION = re.compile(r"^\s*(?:ROOT\s+)?%(?P<name>[\w.\-]+)\s*=\s*(?P<rest>.*)$")
_CALLS = re.compile(r"\b(?:calls|body|condition|to_apply|branch_computations)=\{?"
                    r"(%[\w.\-]+(?:,\s*%[\w.\-]+)*)\}?")
_OP_NAME = re.compile(r'op_name="([^"]*)"')
_OPERAND = re.compile(r"%([\w.\-]+)")
_ARRAY = re.compile(r"(?P<shape>\b(?:pred|[suf]\d+|bf16|f8e\w+)\[[\d,]*\])(?P<layout>\{[^}]*\})?")
_MEMORY_SPACE = re.compile(r"S\((\d+)\)")
# A loop JAX wrote (lax.scan, fori_loop) directly in the jitted step: its op_name is the
# step's and "while"; libtpu's own loops (windowed matmuls) carry their matmul's name.
_JAX_LOOP = re.compile(r"^jit\([^)]*\)/while$")


@dataclasses.dataclass(frozen=True)
class Instruction:
    name: str
    result: str  # the result type as written: "f32[8,128]{1,0:T(8,128)}" or a tuple "(...)"
    opcode: str  # "fusion", "all-reduce-start", "copy", ...
    operands: tuple[str, ...]  # names of the instructions it reads
    calls: tuple[str, ...]  # computations it calls (a fusion's body, a while's body, ...)
    op_name: str  # the JAX operation it was made for ("" where XLA gave none)
    attributes: str  # the rest of the line (kind=..., slice={...}, ...)
    parameter_number: int = -1  # a parameter's index in its computation's arguments

    @property
    def result_bytes(self) -> int:
        return sum(array_bytes(self.result))


@dataclasses.dataclass
class Module:
    computations: dict  # name -> list[Instruction], in the order written
    entry: str  # the entry computation's name

    def entry_instructions(self) -> list[Instruction]:
        return self.computations[self.entry]

    def by_name(self, computation: str) -> dict[str, Instruction]:
        return {instruction.name: instruction for instruction in self.computations[computation]}


def split_balanced(text: str, brackets: str = "()") -> tuple[str, str]:
    """("(a, (b))", rest) from "(a, (b)) rest": the leading bracketed group and the rest
    (`brackets="{}"` for a brace group such as an attribute's value)."""
    depth = 0
    for index, character in enumerate(text):
        depth += {brackets[0]: 1, brackets[1]: -1}.get(character, 0)
        if depth == 0:
            return text[:index + 1], text[index + 1:]
    return text, ""


def parse_instruction(line: str) -> Instruction | None:
    """One instruction line of HLO text, or None for anything else."""
    match = _DEFINITION.match(line)
    if not match:
        return None
    rest = match.group("rest")
    if rest.startswith("("):
        result, rest = split_balanced(rest)
    else:
        result, _, rest = rest.partition(" ")
    rest = rest.strip()
    opcode, _, rest = rest.partition("(")
    operands, attributes = split_balanced("(" + rest)
    calls = tuple(name.strip().lstrip("%") for found in _CALLS.findall(attributes)
                  for name in found.split(","))
    op_name = _OP_NAME.search(attributes)
    number = re.fullmatch(r"\((\d+)\)", operands) if opcode.strip() == "parameter" else None
    return Instruction(
        name=match.group("name"), result=result, opcode=opcode.strip(),
        operands=tuple(_OPERAND.findall(operands)), calls=calls,
        op_name=op_name.group(1) if op_name else "", attributes=attributes,
        parameter_number=int(number.group(1)) if number else -1)


def _instruction_lines(hlo_text: str):
    """The text's lines, an instruction written over several joined into one: a Pallas
    kernel's frontend attributes hold JSON with line breaks (splash's block sizes), its
    op_name on a line of its own that begins with "}}"."""
    pending = ""
    for line in hlo_text.splitlines():
        opens_another = (_DEFINITION.match(line) or computation_header(line)
                         or line.rstrip() == "}")
        if pending and not opens_another:
            pending += " " + line.strip()
            if pending.count("{") == pending.count("}"):
                yield pending
                pending = ""
            continue
        if pending:
            yield pending
            pending = ""
        if _DEFINITION.match(line) and line.count("{") > line.count("}"):
            pending = line
            continue
        yield line
    if pending:
        yield pending


def parse(hlo_text: str) -> Module:
    """Every computation of the module with its instructions."""
    computations, entry, current = {}, "", None
    for line in _instruction_lines(hlo_text):
        header = computation_header(line)
        if header:
            current, is_entry = header
            computations[current] = []
            if is_entry:
                entry = current
            continue
        if current is None:
            continue
        if line.rstrip() == "}":
            current = None
            continue
        instruction = parse_instruction(line)
        if instruction is not None:
            computations[current].append(instruction)
    return Module(computations, entry)


def arrays(result: str) -> list[tuple[int, int]]:
    """(bytes, memory space) of each array written in a type: "f32[8]{0:T(128)S(3)}" is
    ((32, 3)); no S(n) in the layout is memory space 0, the chip's HBM."""
    found = []
    for match in _ARRAY.finditer(result):
        space = _MEMORY_SPACE.search(match.group("layout") or "")
        found.append((array_bytes(match.group("shape"))[0], int(space.group(1)) if space else 0))
    return found


def called_computations(module: Module, roots) -> set[str]:
    """`roots` and every computation they call, transitively."""
    found, pending = set(), list(roots)
    while pending:
        name = pending.pop()
        if name in found or name not in module.computations:
            continue
        found.add(name)
        pending.extend(called for instruction in module.computations[name]
                       for called in instruction.calls)
    return found


def step_loops(module: Module) -> list[Instruction]:
    """The while loops JAX wrote directly in the jitted step (gradient accumulation's)."""
    return [instruction for instruction in module.entry_instructions()
            if instruction.opcode == "while" and _JAX_LOOP.match(instruction.op_name)]


def loop_repeats(module: Module, trips: int) -> dict[str, int]:
    """{computation: `trips`} for every computation the step's own JAX loop runs (gradient
    accumulation's: its body, its condition and all they call), where `trips` is the loop's
    trip count in a full step. Computations absent from it run once a step."""
    loops = [instruction.calls for instruction in step_loops(module)]
    inside = called_computations(module, [name for calls in loops for name in calls])
    return dict.fromkeys(inside, trips)
