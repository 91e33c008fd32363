"""The kinds of file bert-jax writes, each recognised by its first bytes: so that a command
replaces an earlier output of its own and refuses anything else (`outputs.py`).

A kind is the format of the output, read from its head: a NumPy `.npy` (its magic), an
`.npz` (a zip whose first member is an `.npy`), a search index (an `.npz` whose first member
is the marker `bert_jax_search_index.npy`), JSON, JSON Lines, or UTF-8 text. A training file,
a corpus, an index or a model file given where another kind is written is so refused; an
earlier output of the same kind is replaced, as a rerun expects.
"""

import dataclasses
import json
import os
import struct
from collections.abc import Callable

from bert_jax.storage import files

_HEAD = 65536  # bytes read to recognise a file: one JSON line or a zip header fits
_ZIP_MAGIC = b"PK\x03\x04"
INDEX_MARKER = "bert_jax_search_index"  # the first array of every search index


@dataclasses.dataclass(frozen=True)
class FileKind:
    what: str  # for messages: "a NumPy .npy array"
    recognise: Callable[[str], bool]  # path -> whether the file there is of this kind


def _head(path: str) -> bytes:
    with files.open_file(path, "rb") as file:
        return file.read(_HEAD)


def first_zip_member(head: bytes) -> str | None:
    """The name of a zip's first member, from its local file header (offset 26: the name's
    length; 30: the name), or None for bytes that do not start a zip."""
    if not head.startswith(_ZIP_MAGIC) or len(head) < 30:
        return None
    (length,) = struct.unpack("<H", head[26:28])
    return head[30:30 + length].decode("utf-8", "replace")


def _is_npy(path: str) -> bool:
    return _head(path).startswith(b"\x93NUMPY")


def _is_npz(path: str) -> bool:
    return (first_zip_member(_head(path)) or "").endswith(".npy")


def _is_search_index(path: str) -> bool:
    return first_zip_member(_head(path)) == INDEX_MARKER + ".npy"


def _text(path: str) -> str | None:
    """The file's head as text, or None if it is not UTF-8 (a cut last character allowed)."""
    head = _head(path)
    if b"\x00" in head:
        return None
    try:
        return head.decode("utf-8")
    except UnicodeDecodeError as error:
        return head[:error.start].decode("utf-8") if error.start > len(head) - 4 else None


def _is_json(path: str) -> bool:
    try:
        json.loads(files.read_text(path))
    except (ValueError, OSError):
        return False
    return True


def _is_json_lines(path: str) -> bool:
    text = _text(path)
    lines = [line for line in (text or "").splitlines() if line.strip()]
    if not lines:
        return False
    if len(lines) == 1 and len(text.encode()) >= _HEAD - 4:  # one line longer than the head
        return lines[0].lstrip().startswith("{")
    try:
        return isinstance(json.loads(lines[0]), dict)
    except ValueError:
        return False


NPY = FileKind("a NumPy .npy array", _is_npy)
NPZ = FileKind("a NumPy .npz archive", _is_npz)
SEARCH_INDEX = FileKind("a bert-jax search index", _is_search_index)
JSON = FileKind("a JSON file", _is_json)
JSON_LINES = FileKind("a JSON Lines file (one object a line)", _is_json_lines)
TEXT = FileKind("a UTF-8 text file", lambda path: _text(path) is not None)


def kind_by_extension(path: str) -> FileKind:
    """What a text output named `path` holds: predictions as .jsonl, .json, else text."""
    extension = os.path.splitext(path)[1].lower()
    return {".jsonl": JSON_LINES, ".json": JSON, ".npy": NPY, ".npz": NPZ}.get(extension, TEXT)
