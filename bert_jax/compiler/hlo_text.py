"""The pieces of HLO text that every reader of a compiled program needs: array shapes, their
bytes, and where a computation begins.

`aot_hlo` (collectives), `hlo_module` (instructions), `aot_splash` and `gpu_census` all read
them; they live here, a floor below those modules, so that none of them imports another for
a helper.
"""

import math
import re

# An array type as HLO writes it: "bf16[8,128]", "f32[]", "pred[4]" (the layout "{1,0}" after
# it is not part of the match).
ARRAY_SHAPE = re.compile(r"\b(pred|[suf]\d+|bf16|f8e\w+)\[([\d,]*)\]")
_ELEMENT_BYTES = {"pred": 1, "bf16": 2}
_COMPUTATION = re.compile(r"^(?P<entry>ENTRY\s+)?%(?P<name>[\w.\-]+)\s")


def element_bytes(dtype: str) -> int:
    if dtype in _ELEMENT_BYTES:
        return _ELEMENT_BYTES[dtype]
    if dtype.startswith("f8"):
        return 1
    return int(dtype[1:]) // 8


def array_shapes(text: str) -> list[tuple[str, tuple[int, ...]]]:
    """(dtype, dimensions) of each array shape written in `text`."""
    return [(dtype, tuple(int(dim) for dim in filter(None, dims.split(","))))
            for dtype, dims in ARRAY_SHAPE.findall(text)]


def array_bytes(text: str) -> list[int]:
    """Bytes of each array shape written in `text` ("bf16[8,128]{1,0}, f32[4]" -> [2048, 16])."""
    return [math.prod(dims) * element_bytes(dtype) for dtype, dims in array_shapes(text)]


def computation_header(line: str) -> tuple[str, bool] | None:
    """(name, whether it is the entry) where `line` opens a computation, else None."""
    header = _COMPUTATION.match(line)
    if header and line.rstrip().endswith("{"):
        return header.group("name"), bool(header.group("entry"))
    return None
