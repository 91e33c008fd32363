"""Numbered records from a TSV, CSV, JSONL or plain-text file: how a file's text becomes
rows of cells (or objects), before any column is chosen (that is `columns.py`).

    TSV         as GLUE ships it (no quoting: a quote is a character), unless a field starts
                with a quote and the whole file is valid as Excel and pandas quote a TSV
                (`"a ""b"" c"`): then read so.
    CSV         standard quoting (a quoted field may hold a delimiter or a newline).
    JSONL       one object a line.
    plain text  (`.txt`, for prediction): one text a line, `A<TAB>B` for a pair.

Every file is read as UTF-8 with a leading byte-order mark dropped, and split into lines at
newlines only. A `delimiter` other than the extension's reads TSV/CSV as CSV with that
separator (`--delimiter ';'`); a first line that holds one cell where several were expected,
with another likely separator inside, is named as a separator problem (`delimiter_problem`).
Every error names the file and line and says what was expected. A cell may be as long as
memory allows (a whole document): the csv module's own limit, 131,072 characters, is lifted.
"""

import csv
import io
import json
import os
import re
import sys

from bert_jax.storage import files
from bert_jax.errors import UserError


def file_format(path: str) -> str:
    """'jsonl', 'tsv', 'csv' or 'text', from the extension."""
    extension = os.path.splitext(path)[1].lower()
    formats = {".jsonl": "jsonl", ".json": "jsonl", ".tsv": "tsv", ".csv": "csv",
               ".txt": "text"}
    if extension not in formats:
        raise UserError(f"{path}: unknown file type {extension!r}; expected .tsv, .csv, "
                        ".jsonl or .txt")
    return formats[extension]


def read_records(path: str, kind: str, delimiter: str | None = None
                 ) -> list[tuple[int, list[str] | dict]]:
    """(first line number, cells or object) of every non-blank record (plain text: of every
    line).

    TSV/CSV go to the csv module whole, so a quoted CSV field keeps its newline and the line
    numbers after it stay right; every format splits lines at newlines only (a U+2028 in a
    text is text). `delimiter` (TSV/CSV): the cells' separator, when not the extension's.
    """
    text = files.read_user_text(path, "data", newline="")
    if kind in ("tsv", "csv") and delimiter not in (None, _SEPARATORS[kind]):
        return _parsed(path, text, dict(delimiter=delimiter, strict=True))
    if kind in ("tsv", "csv"):
        return _table_records(path, text, kind)
    lines = list(enumerate(files.split_lines(text), start=1))
    if kind == "text":  # every line, a blank one too: one prediction per input line
        return [(number, line.split("\t")) for number, line in lines]
    numbered = [(number, line) for number, line in lines if line.strip()]
    records = []
    for number, line in numbered:
        try:
            value = json.loads(line)
        except json.JSONDecodeError as error:
            raise UserError(f"{path}:{number}: not valid JSON ({error.msg})") from None
        if not isinstance(value, dict):
            raise UserError(f"{path}:{number}: expected a JSON object, got "
                            f"{type(value).__name__}")
        records.append((number, value))
    return records


def _table_records(path: str, text: str, kind: str) -> list[tuple[int, list[str]]]:
    if kind == "csv":
        # A stray quote after a closing one is an error, not a silently joined field.
        return _parsed(path, text, dict(strict=True))
    if _QUOTED_FIELD.search(text):
        # Excel and pandas quote a TSV field holding a quote, tab or newline; GLUE's TSVs
        # hold unbalanced quotes and are not valid under that quoting (STS-B, MNLI).
        try:
            return _parsed(path, text, dict(dialect="excel-tab", strict=True), raise_csv=True)
        except csv.Error:
            pass
    return _parsed(path, text, dict(delimiter="\t", quoting=csv.QUOTE_NONE))


_QUOTED_FIELD = re.compile(r'(?:^|\t)"', re.MULTILINE)


def _lift_field_limit() -> None:
    """The csv module refuses a cell over 131,072 characters; the limit is a C long, so the
    largest one this platform takes (2**31 - 1 where a long is 32 bits)."""
    limit = sys.maxsize
    while True:
        try:
            csv.field_size_limit(limit)
            return
        except OverflowError:
            limit //= 2


_lift_field_limit()


def _parsed(path: str, text: str, dialect: dict, raise_csv: bool = False
            ) -> list[tuple[int, list[str]]]:
    """(first line number, cells) of every record with a non-blank cell."""
    reader = csv.reader(io.StringIO(text, newline=""), **dialect)
    records, first_line = [], 1
    try:
        for cells in reader:
            if any(cell.strip() for cell in cells):
                records.append((first_line, cells))
            first_line = reader.line_num + 1
    except csv.Error as error:
        if raise_csv:
            raise
        raise UserError(f"{path}:{first_line}: not valid CSV ({error}); a quoted field must "
                        "end in a quote followed by the delimiter or the line's end") from None
    return records


_SEPARATORS = {"tsv": "\t", "csv": ","}
_SEPARATOR_NAMES = {"\t": "tab", ",": "comma", ";": "semicolon", "|": "pipe"}


def delimiter_problem(path: str, kind: str, delimiter: str | None,
                      first: tuple[int, list[str]] | None) -> UserError | None:
    """The error to give when a TSV/CSV file's columns cannot be found and its first record
    (line, cells) is one cell holding another likely separator (a `;`-separated CSV, a
    comma-separated .tsv, a TSV saved as .csv); None when it does not look so."""
    expected = delimiter or _SEPARATORS[kind]
    if first is None or len(first[1]) != 1:
        return None
    cell = first[1][0]
    found = [separator for separator in _SEPARATOR_NAMES
             if separator != expected and separator in cell]
    if not found:
        return None
    separator = max(found, key=cell.count)
    flag = "tab" if separator == "\t" else separator
    return UserError(
        f"{path}:{first[0]}: the first line {cell!r} looks {_SEPARATOR_NAMES[separator]}-"
        f"separated, but this .{kind} file is read as {_SEPARATOR_NAMES[expected]}-separated, "
        f"so it has one column; pass --delimiter '{flag}' (or save the file "
        f"{'tab-separated as .tsv' if kind == 'tsv' else 'comma-separated as .csv'})")
