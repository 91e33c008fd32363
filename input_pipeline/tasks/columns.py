"""Labelled rows from TSV, CSV or JSONL files: texts and a label, by column name or index.

    TSV / CSV   with or without a header; a column is a name from the header or a 0-based
                index.
    JSONL       one object a line; columns are keys.
    plain text  (`.txt`, for prediction): one text a line, `A<TAB>B` for a pair.

How each format's text becomes records (quoting, UTF-8, newlines) is `record_files.py`.
A header is read when `header` is True; with `header=None` (auto) when any column is given
by name, or, every column given by index, when the first row's label cell says so
(`header_reason`; reported on stderr). A row wider than the header, or than the first row
when the texts are "every column but the label", is an error; without a header and every
column given by index, rows may carry extra trailing columns (STS-B's source columns).
Label cells follow `label_rules.py` (stripped; an empty one, or a row repeating the header,
is an error or, `skip_bad_rows`, skipped and counted). `read_table` also gives the columns it
read, resolved, which a fine-tuned model records so that it reads every later file by them.
Every error names the file and line and says what was expected.
"""

import argparse
import dataclasses
import json
from collections.abc import Sequence

from bert_jax.errors import UserError
from input_pipeline.tasks import label_rules
from input_pipeline.tasks.record_files import delimiter_problem, file_format, read_records

Column = str | int


@dataclasses.dataclass(frozen=True)
class Row:
    texts: tuple[str, ...]  # one text, or a pair
    label: str | None  # the raw label cell (None when the file has no label column)
    line: int  # 1-based line number in the file, for error messages
    # Every column of the input row as (name, cell), in file order, so that a prediction
    # file can keep them (an id, the text column's own name); () for plain text.
    source: tuple[tuple[str, str], ...] = ()


@dataclasses.dataclass(frozen=True)
class ColumnSpec:
    """Which columns hold the texts and the label (saved with a fine-tuned model, its text
    columns resolved: `read_table`), and how one command reads its files (not saved)."""
    text_columns: tuple[Column, ...] = ()  # () = every column but the label (1 or 2 of them)
    label_column: Column = "label"
    header: bool | None = None  # None: a header exactly when a column is given by name
    delimiter: str | None = None  # TSV/CSV cell separator; None: by extension (tab, comma)
    skip_bad_rows: bool = False  # skip (and count) rows with an empty label or a header's cells

    def to_dict(self) -> dict:
        return dict(text_columns=list(self.text_columns), label_column=self.label_column,
                    header=self.header)

    @classmethod
    def from_dict(cls, values: dict) -> "ColumnSpec":
        return cls(tuple(values.get("text_columns", ())), values.get("label_column", "label"),
                   values.get("header"))


def add_header_argument(parser) -> None:
    """`--header/--no-header` (default: detected, see the module docstring), for every command
    that reads a TSV/CSV file; `args.header` is True, False or None."""
    parser.add_argument(
        "--header", action=argparse.BooleanOptionalAction, default=None,
        help="whether a TSV/CSV file's first line is a header (default: yes when a column is "
             "given by name; with every column given by index, when the first row's label is "
             "not a label any other row has, or not a number where every other is; reported "
             "on stderr)")


def add_reading_arguments(parser) -> None:
    """`--header/--no-header`, `--delimiter` and `--skip-bad-rows`: how every command that
    reads a TSV/CSV/JSONL file of columns reads it."""
    add_header_argument(parser)
    parser.add_argument(
        "--delimiter", type=parse_delimiter, default=None, metavar="CHAR",
        help="the character between the cells of a .tsv/.csv file, e.g. ';' or tab (default: "
             "tab for .tsv, comma for .csv); read with standard CSV quoting")
    parser.add_argument(
        label_rules.SKIP_FLAG, action="store_true",
        help="skip rows whose label cell is empty or that repeat the header (two exports "
             "concatenated), and say how many on stderr (default: such a row is an error "
             "naming its line)")


def add_file_column_arguments(parser) -> None:
    """evaluate/predict: this file's own text and label columns, where its header names them
    otherwise than the training file's (default: the columns the model recorded)."""
    parser.add_argument(
        "--text-columns", type=parse_columns, default=None, metavar="A[,B]",
        help="this file's text column(s), as many as the model was trained on: header names "
             "or 0-based indices (JSONL: keys); default the columns the model was trained on")
    parser.add_argument(
        "--label-column", type=parse_column, default=None, metavar="COLUMN",
        help="this file's label column (default: the one the model was trained on)")


def parse_delimiter(text: str) -> str:
    """`--delimiter`: one character, or `tab` (a tab is awkward to type in a shell)."""
    value = "\t" if text in ("tab", "\\t") else text
    if len(value) != 1 or value in "\"\r\n":
        raise argparse.ArgumentTypeError(f"expected one character (or tab), got {text!r}")
    return value


def parse_column(text: str) -> Column:
    """'3' -> 3 (an index), 'sentence' -> 'sentence' (a name)."""
    text = text.strip()
    return int(text) if text.isdigit() else text


def parse_columns(text: str) -> tuple[Column, ...]:
    """'sentence1,sentence2' or '5,6' -> a tuple of columns."""
    return tuple(parse_column(part) for part in text.split(",") if part.strip())


def _resolve(column: Column, header: list[str] | None, path: str) -> Column:
    """A name becomes its index in the header; an index stays."""
    if isinstance(column, int):
        return column
    if header is None:
        raise UserError(f"{path}: column {column!r} is a name but the file is read without a "
                        "header; give a 0-based index or --header")
    if column not in header:
        raise UserError(f"{path}:1: no column {column!r} in the header {header}; name the "
                        "file's columns with --text-columns / --label-column")
    return header.index(column)


def _cell(record, column: Column, path: str, number: int, what: str) -> str:
    if isinstance(record, dict):
        if column not in record:
            raise UserError(f"{path}:{number}: no key {column!r} ({what}); the object has "
                            f"{sorted(record)}")
        value = record[column]
        if what == "label" and isinstance(value, (list, dict)):
            raise UserError(f"{path}:{number}: the label {column!r} is a JSON "
                            f"{'list' if isinstance(value, list) else 'object'} "
                            f"({json.dumps(value)[:60]}); expected one label: a string, a "
                            "number or true/false")
        return value if isinstance(value, str) else json.dumps(value)
    if not 0 <= int(column) < len(record):
        raise UserError(f"{path}:{number}: no column {column} ({what}): the row has "
                        f"{len(record)} column(s)")
    return record[column]


def is_number(text: str) -> bool:
    """Whether a cell reads as a number (a regression label, a score)."""
    try:
        float(text)
    except ValueError:
        return False
    return True


def header_reason(label_cells: Sequence[str], numeric_labels: bool) -> str | None:
    """Why the first row looks like a header, judged by the label column alone, or None.

    It does when its label is not a number and every other row's is, or (class labels)
    when its label is not one any other row has while the other rows' labels repeat (a
    file of distinct labels gives no evidence either way).
    """
    first, others = label_cells[0], list(label_cells[1:])
    if not others:
        return None
    if not is_number(first) and all(is_number(label) for label in others):
        return f"its label cell {first!r} is not a number and every other row's is"
    if numeric_labels or first in set(others) or len(set(others)) == len(others):
        return None
    return f"its label cell {first!r} is not a label that any other row has"


def _same_cells(cells: Sequence[str], header: Sequence[str]) -> bool:
    """Whether a row repeats the header (white space, byte-order marks and trailing empty
    cells aside): two exports concatenated, the second one's header in the middle."""
    def cleaned(values):
        values = [value.replace("\ufeff", "").strip() for value in values]
        while values and not values[-1]:
            values.pop()
        return values
    return cleaned(cells) == cleaned(header)


def _split_header(path: str, records: list, spec: ColumnSpec, label_index: int | None,
                  numeric_labels: bool) -> list[str] | None:
    """Removes and returns the header row: as `spec.header` says, or detected (see
    `header_reason`; rows repeating the first one aside) when no column is given by name;
    says so on stderr when detected."""
    named = any(isinstance(column, str) for column in (*spec.text_columns, spec.label_column))
    if spec.header is False:
        return None
    if spec.header is None and not named:
        if label_index is None or any(len(cells) <= label_index for _, cells in records):
            return None
        first = records[0][1]
        labels = [first[label_index].strip()] + [
            cells[label_index].strip() for _, cells in records[1:]
            if not _same_cells(cells, first)]
        reason = header_reason(labels, numeric_labels)
        if reason is None:
            return None
        label_rules.say_once(f"{path}: line {records[0][0]} taken as a header ({reason}); "
                             "pass --no-header to read it as data")
    if not records:
        raise UserError(f"{path}: the file is empty; expected a header line and rows")
    return list(records.pop(0)[1])


def _check_width(path: str, records: list, header: list[str] | None, fixed_width: bool
                 ) -> None:
    """A row with more non-empty cells than the header (or, texts defaulted, than the first
    row) is an error, not a dropped field. Without a header and with every column given by
    index, rows may carry further trailing columns (STS-B adds source columns to some rows)."""
    if header is None and not fixed_width:
        return
    width = len(header) if header is not None else len(records[0][1])
    declared = f"the header has {width}" if header is not None else f"the first row has {width}"
    for number, cells in records:
        if any(cell.strip() for cell in cells[width:]):  # trailing empty cells hold nothing
            raise UserError(f"{path}:{number}: the row has {len(cells)} columns, {declared}; "
                            "a text holding the delimiter must be quoted (in a .csv file; a "
                            ".tsv file is read unquoted, as GLUE ships it)")


def read_rows(path: str, spec: ColumnSpec, with_labels: bool = True,
              numeric_labels: bool = False) -> list[Row]:
    """Every row of `path` as texts (one or two) and, `with_labels`, its label cell.

    Without labels (prediction), a missing label column is fine; texts default as in
    training (the columns other than the label). `numeric_labels` (regression) tells header
    detection that every label is a number. Labels follow `label_rules`: stripped, and a
    row with an empty one (`with_labels`) or repeating the header is an error, or skipped.
    """
    return read_table(path, spec, with_labels, numeric_labels)[0]


def read_table(path: str, spec: ColumnSpec, with_labels: bool = True,
               numeric_labels: bool = False) -> tuple[list[Row], ColumnSpec]:
    """(`read_rows`, `spec` with the text columns it read, "every column but the label"
    resolved: header names or JSONL keys where the label is given by name, else indices),
    what a fine-tuned model records so that later files are read by the same columns."""
    kind = file_format(path)
    records = read_records(path, kind, spec.delimiter)
    if kind == "text":
        return _non_empty([_text_row(path, number, cells, with_labels)
                           for number, cells in records], path), spec
    if kind == "jsonl":
        rows, text_columns = _jsonl_rows(path, records, spec, with_labels)
        header_repeats = []
    else:
        first = records[0] if records else None
        try:
            rows, text_columns, header_repeats = _table_rows(path, records, spec, with_labels,
                                                             numeric_labels)
        except UserError as error:  # one column where several were expected: the separator?
            raise delimiter_problem(path, kind, spec.delimiter, first) or error from None
    rows = label_rules.screen_rows(path, rows, header_repeats, with_labels, spec.skip_bad_rows)
    return rows, dataclasses.replace(spec, text_columns=text_columns)


def _table_rows(path: str, records: list, spec: ColumnSpec, with_labels: bool,
                numeric_labels: bool) -> tuple[list[Row], tuple, list[int]]:
    """(rows, the text columns as `read_table` records them, lines repeating the header)."""
    label_index = spec.label_column if isinstance(spec.label_column, int) else None
    first_line = records[0][0] if records else 1  # the header's, when there is one
    header = _split_header(path, records, spec, label_index, numeric_labels)
    header_repeats = [number for number, cells in records
                      if header is not None and _same_cells(cells, header)]
    records[:] = [record for record in records if record[0] not in set(header_repeats)]
    if not records:
        raise UserError(f"{path}: the file has no rows")
    width = len(header) if header is not None else len(records[0][1])
    has_label = not isinstance(spec.label_column, str) or bool(
        header and spec.label_column in header)
    label_index = (_resolve(spec.label_column, header, path)
                   if with_labels or has_label else None)
    text_columns = tuple(_resolve(column, header, path) for column in spec.text_columns) or \
        tuple(index for index in range(width) if index != label_index)
    _check_text_count(path, text_columns)
    names = header or [f"column_{index}" for index in range(width)]
    _check_label_not_text(path, first_line, [names[index] if index < len(names) else index
                                             for index in text_columns if index == label_index])
    _check_width(path, records, header, fixed_width=not spec.text_columns)
    rows = [Row(tuple(_cell(cells, column, path, number, "text") for column in text_columns),
                _label_cell(cells, label_index, path, number)
                if label_index is not None else None, number,
                tuple(zip(names, [*cells, *[""] * (len(names) - len(cells))])))
            for number, cells in records]
    by_name = header is not None and isinstance(spec.label_column, str)
    recorded = spec.text_columns or tuple(
        header[index] if by_name else index for index in text_columns)
    return rows, recorded, header_repeats


def _jsonl_rows(path: str, records: list, spec: ColumnSpec, with_labels: bool
                ) -> tuple[list[Row], tuple]:
    if not records:
        raise UserError(f"{path}: the file has no rows")
    label_column = spec.label_column
    has_label = label_column in records[0][1]
    text_columns = spec.text_columns or tuple(key for key in records[0][1]
                                              if key != label_column)
    _check_text_count(path, text_columns)
    reading_labels = with_labels or has_label
    if reading_labels:
        _check_label_not_text(path, records[0][0], [column for column in text_columns
                                                    if column == label_column])
    return [Row(tuple(_cell(record, column, path, number, "text") for column in text_columns),
                _label_cell(record, label_column, path, number) if reading_labels else None,
                number, tuple((key, value if isinstance(value, str) else json.dumps(value))
                              for key, value in record.items()))
            for number, record in records], text_columns


def _label_cell(record, column: Column, path: str, number: int) -> str:
    """The label a row holds (`label_rules.clean_label`); a JSON null is an empty cell."""
    if isinstance(record, dict) and record.get(column, "") is None:
        return ""
    return label_rules.clean_label(_cell(record, column, path, number, "label"))


def _check_label_not_text(path: str, line: int, both: list) -> None:
    """Refuses a label column that is also a text column (`--text-columns label`): the
    model would be trained to read its answer from its input."""
    if both:
        raise UserError(f"{path}:{line}: column {both[0]!r} is both a text column and the "
                        "label column, so the model would read each answer in its input; "
                        "choose other --text-columns or --label-column")


def _check_text_count(path: str, text_columns: tuple) -> None:
    if not 1 <= len(text_columns) <= 2:
        raise UserError(f"{path}: found {len(text_columns)} text column(s) {list(text_columns)}; "
                        "expected one text or a pair: choose them with --text-columns")


def _text_row(path: str, number: int, cells: list[str], with_labels: bool) -> Row:
    """One line of a plain-text file: a text, a pair, or (a blank line) the empty text,
    kept so that predictions line up with the input's lines, as `embed`'s rows do."""
    if with_labels:
        raise UserError(f"{path}: a plain-text file has no labels; expected .tsv, .csv or "
                        ".jsonl with a label column")
    if not "".join(cells).strip():
        return Row(("",), None, number)
    if len(cells) > 2 or not all(cell.strip() for cell in cells):
        raise UserError(f"{path}:{number}: expected a non-empty text, or two separated by "
                        "one tab")
    return Row(tuple(cells), None, number)


def _non_empty(rows: list[Row], path: str) -> list[Row]:
    if not rows:
        raise UserError(f"{path}: the file has no rows")
    return rows


_PAIR_LEAST = 5  # [CLS], a token of the first text, [SEP], a token of the second, [SEP]


def encode_rows(tokenizer, rows: Sequence[Row], max_seq_len: int) -> dict:
    """Token ids of every row, (N, T) int32 each, T the longest row (truncated longest-first).

    A pair needs room for a token of each text: truncated to less, one text would be gone
    and the model would learn (or answer) from the other alone."""
    if max_seq_len < _PAIR_LEAST and any(len(row.texts) == 2 for row in rows):
        raise UserError(f"--max-seq-len {max_seq_len} leaves a pair of texts no room for "
                        f"both: [CLS] A [SEP] B [SEP] needs at least {_PAIR_LEAST}")
    texts = [row.texts[0] if len(row.texts) == 1 else row.texts for row in rows]
    return tokenizer.encode_for_model(texts, max_seq_len)
