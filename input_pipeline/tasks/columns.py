"""Labelled rows from TSV, CSV or JSONL files: texts and a label, by column name or index.

    TSV / CSV   with or without a header; a column is a name from the header or a 0-based
                index. TSV is read GLUE-style (no quoting: a quote is a character); CSV
                with standard quoting. Rows may carry extra trailing columns (STS-B).
    JSONL       one object a line; columns are keys.
    plain text  (`.txt`, for prediction): one text a line, `A<TAB>B` for a pair.

A header is read when `header` is True, or with `header=None` (auto) when any column is
given by name. Every error names the file and line and says what was expected.
"""

import csv
import dataclasses
import json
import os
from collections.abc import Sequence

from bert_jax.errors import UserError

Column = str | int


@dataclasses.dataclass(frozen=True)
class Row:
    texts: tuple[str, ...]  # one text, or a pair
    label: str | None  # the raw label cell (None when the file has no label column)
    line: int  # 1-based line number in the file, for error messages


@dataclasses.dataclass(frozen=True)
class ColumnSpec:
    """Which columns hold the texts and the label; saved with a fine-tuned model."""
    text_columns: tuple[Column, ...] = ()  # () = every column but the label (1 or 2 of them)
    label_column: Column = "label"
    header: bool | None = None  # None: a header exactly when a column is given by name

    def to_dict(self) -> dict:
        return dict(text_columns=list(self.text_columns), label_column=self.label_column,
                    header=self.header)

    @classmethod
    def from_dict(cls, values: dict) -> "ColumnSpec":
        return cls(tuple(values.get("text_columns", ())), values.get("label_column", "label"),
                   values.get("header"))


def parse_column(text: str) -> Column:
    """'3' -> 3 (an index), 'sentence' -> 'sentence' (a name)."""
    text = text.strip()
    return int(text) if text.isdigit() else text


def parse_columns(text: str) -> tuple[Column, ...]:
    """'sentence1,sentence2' or '5,6' -> a tuple of columns."""
    return tuple(parse_column(part) for part in text.split(",") if part.strip())


def file_format(path: str) -> str:
    """'jsonl', 'tsv', 'csv' or 'text', from the extension."""
    extension = os.path.splitext(path)[1].lower()
    formats = {".jsonl": "jsonl", ".json": "jsonl", ".tsv": "tsv", ".csv": "csv",
               ".txt": "text"}
    if extension not in formats:
        raise UserError(f"{path}: unknown file type {extension!r}; expected .tsv, .csv, "
                        ".jsonl or .txt")
    return formats[extension]


def _read_lines(path: str) -> list[str]:
    from bert_jax import files

    return files.read_user_text(path, "data", newline="").splitlines()


def _records(path: str, kind: str) -> list[tuple[int, list[str] | dict]]:
    """(line number, cells or object) for every non-blank line."""
    lines = _read_lines(path)
    numbered = [(number, line) for number, line in enumerate(lines, start=1) if line.strip()]
    if kind == "jsonl":
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
    if kind == "text":
        return [(number, line.split("\t")) for number, line in numbered]
    dialect = dict(delimiter="\t", quoting=csv.QUOTE_NONE) if kind == "tsv" else {}
    return [(number, cells) for number, cells in
            zip((number for number, _ in numbered),
                csv.reader([line for _, line in numbered], **dialect))]


def _resolve(column: Column, header: list[str] | None, path: str) -> Column:
    """A name becomes its index in the header; an index stays."""
    if isinstance(column, int):
        return column
    if header is None:
        raise UserError(f"{path}: column {column!r} is a name but the file is read without a "
                        "header; give a 0-based index or --header yes")
    if column not in header:
        raise UserError(f"{path}:1: no column {column!r} in the header {header}")
    return header.index(column)


def _cell(record, column: Column, path: str, number: int, what: str) -> str:
    if isinstance(record, dict):
        if column not in record:
            raise UserError(f"{path}:{number}: no key {column!r} ({what}); the object has "
                            f"{sorted(record)}")
        value = record[column]
        return value if isinstance(value, str) else json.dumps(value)
    if not 0 <= int(column) < len(record):
        raise UserError(f"{path}:{number}: no column {column} ({what}): the row has "
                        f"{len(record)} column(s)")
    return record[column]


def read_rows(path: str, spec: ColumnSpec, with_labels: bool = True) -> list[Row]:
    """Every row of `path` as texts (one or two) and, `with_labels`, its raw label cell.

    Without labels (prediction), a missing label column is fine; texts default as in
    training (the columns other than the label).
    """
    kind = file_format(path)
    if kind == "text":
        rows = [_text_row(path, number, cells, with_labels) for number, cells in
                _records(path, kind)]
        return _non_empty(rows, path)
    records = _records(path, kind)
    named = any(isinstance(column, str) for column in (*spec.text_columns, spec.label_column))
    header = None
    if kind != "jsonl" and (spec.header if spec.header is not None else named):
        if not records:
            raise UserError(f"{path}: the file is empty; expected a header line and rows")
        header = list(records.pop(0)[1])
    if not records:
        raise UserError(f"{path}: the file has no rows")
    label_column = spec.label_column
    text_columns = spec.text_columns
    if kind == "jsonl":
        has_label = label_column in records[0][1]
        if not text_columns:
            text_columns = tuple(key for key in records[0][1] if key != label_column)
    else:
        width = len(header) if header is not None else len(records[0][1])
        has_label = not isinstance(label_column, str) or (header and label_column in header)
        if not with_labels and not has_label:
            label_index = None
        else:
            label_index = _resolve(label_column, header, path)
        if not text_columns:
            text_columns = tuple(index for index in range(width) if index != label_index)
        text_columns = tuple(_resolve(column, header, path) for column in text_columns)
        label_column = label_index
    if not 1 <= len(text_columns) <= 2:
        raise UserError(f"{path}: found {len(text_columns)} text column(s) {list(text_columns)}; "
                        "expected one text or a pair: choose them with --text-columns")
    reading_labels = with_labels or (has_label and label_column is not None)
    rows = []
    for number, record in records:
        texts = tuple(_cell(record, column, path, number, "text") for column in text_columns)
        label = (_cell(record, label_column, path, number, "label")
                 if reading_labels and (with_labels or has_label) else None)
        rows.append(Row(texts, label, number))
    return rows


def _text_row(path: str, number: int, cells: list[str], with_labels: bool) -> Row:
    if with_labels:
        raise UserError(f"{path}: a plain-text file has no labels; expected .tsv, .csv or "
                        ".jsonl with a label column")
    if len(cells) > 2 or not all(cell.strip() for cell in cells):
        raise UserError(f"{path}:{number}: expected a non-empty text, or two separated by "
                        "one tab")
    return Row(tuple(cells), None, number)


def _non_empty(rows: list[Row], path: str) -> list[Row]:
    if not rows:
        raise UserError(f"{path}: the file has no rows")
    return rows


def encode_rows(tokenizer, rows: Sequence[Row], max_seq_len: int) -> dict:
    """Token ids of every row, (N, T) int32 each, T the longest row (truncated longest-first)."""
    texts = [row.texts[0] if len(row.texts) == 1 else row.texts for row in rows]
    return tokenizer.encode_for_model(texts, max_seq_len)
