"""A compiled HLO module's instructions, read from its text (`compiled.as_text()`).

XLA's cost analysis gives one number for the bytes a program moves. To say where they go,
each instruction of the entry computation is read here with its result type, its operands
(compiled TPU HLO names them without types, so their types come from the instructions
that define them), the computations it calls and the JAX `op_name` of its metadata.

    module = parse(compiled.as_text())
    for instruction in module.entry_instructions(): ...
"""

import dataclasses
import re

from bert_jax.compiler.aot_hlo import array_bytes

_DEFINITION = re.compile(r"^\s*(?:ROOT\s+)?%(?P<name>[\w.\-]+)\s*=\s*(?P<rest>.*)$")
_COMPUTATION = re.compile(r"^(?P<entry>ENTRY\s+)?%(?P<name>[\w.\-]+)\s")
_CALLS = re.compile(r"\b(?:calls|body|condition|to_apply|branch_computations)=\{?"
                    r"(%[\w.\-]+(?:,\s*%[\w.\-]+)*)\}?")
_OP_NAME = re.compile(r'op_name="([^"]*)"')
_OPERAND = re.compile(r"%([\w.\-]+)")
_ARRAY = re.compile(r"(?P<shape>\b(?:pred|[suf]\d+|bf16|f8e\w+)\[[\d,]*\])(?P<layout>\{[^}]*\})?")
_MEMORY_SPACE = re.compile(r"S\((\d+)\)")


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


def parse(hlo_text: str) -> Module:
    """Every computation of the module with its instructions."""
    computations, entry, current = {}, "", None
    for line in hlo_text.splitlines():
        header = _COMPUTATION.match(line)
        if header and line.rstrip().endswith("{"):
            current = header.group("name")
            computations[current] = []
            if header.group("entry"):
                entry = current
            continue
        if current is None:
            continue
        if line.startswith("}"):
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
