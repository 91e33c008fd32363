"""Label cells as users write them: one spelling per class, no empty cell, no stray header.

The rule, the same for every task that reads labels (classify and its pairs, regress, NER
tags from CoNLL, NLI for sentence embeddings) and at any file size:
  - a label cell is read with its surrounding white space stripped, as a text is
    (`pos ` is `pos`);
  - labels that then differ only by letter case (`pos`/`Pos`), or numbers or truth values
    written two ways (`1`/`1.0`, `true`/`1`: JSON's true and 1, a spreadsheet's TRUE), are
    refused with one error that lists each group and the line where each spelling first
    occurs (`check_spellings`): a binary file with one stray `Pos` would otherwise train a
    third class without a word. `--labels-as-written` keeps them apart;
  - a file of classes must hold two at least (`check_label_count`): with one, every
    prediction would be that label at probability 1;
  - an empty label cell, and a row that repeats the header (two exports concatenated), are
    errors naming the file and line; with `--skip-bad-rows` they are skipped and counted on
    stderr (`screen_rows`).
"""

import collections
import math
import sys
from collections.abc import Iterable, Sequence

from bert_jax.errors import UserError

AS_WRITTEN_FLAG = "--labels-as-written"
SKIP_FLAG = "--skip-bad-rows"
_LISTED_LINES = 10  # lines named in a message about many rows

_ANNOUNCED: set[str] = set()  # messages said once: a file is read more than once in a run


def say_once(message: str) -> None:
    """Prints `message` on stderr the first time it comes up in this process."""
    if message not in _ANNOUNCED:
        _ANNOUNCED.add(message)
        print(message, file=sys.stderr)


def clean_label(cell: str) -> str:
    """The label a cell holds: its text without surrounding white space."""
    return cell.strip()


# Truth values as the numbers they are written as elsewhere (JSON's true and 1, a CSV's 1).
_TRUTH_VALUES = {"true": 1.0, "false": 0.0}


def _spelling_key(label: str) -> tuple:
    """What two spellings of one class share: the number (`1` = `1.0` = `01` = `true`), else
    the text without letter case. NaN and infinities are words here, not numbers."""
    try:
        number = float(label)
    except ValueError:
        number = _TRUTH_VALUES.get(label.casefold(), math.nan)
    if math.isfinite(number):
        return ("number", number)
    return ("text", label.casefold())


def spelling_groups(labels: Iterable[tuple[str, int]]) -> list[list[tuple[str, int]]]:
    """The groups of two or more spellings of one class, each spelling with the first line
    it occurs on; groups and spellings in line order. `labels` are (label, line) pairs."""
    first_lines: dict[str, int] = {}
    for label, line in labels:
        first_lines.setdefault(label, line)
    groups = collections.defaultdict(list)
    for label, line in first_lines.items():
        groups[_spelling_key(label)].append((label, line))
    found = [sorted(group, key=lambda item: item[1]) for group in groups.values()
             if len(group) > 1]
    return sorted(found, key=lambda group: group[0][1])


def check_spellings(labels: Iterable[tuple[str, int]], path: str, what: str = "label",
                    as_written: bool = False) -> None:
    """Refuses `labels` ((label, line) pairs of `path`) where one class is spelled two ways,
    unless `as_written`; one error lists every group."""
    if as_written:
        return
    groups = spelling_groups(labels)
    if not groups:
        return
    listed = "\n".join("  " + ", ".join(f"{label!r} at {path}:{line}" for label, line in group)
                       for group in groups)
    raise UserError(
        f"{path}: {what}s that differ only by letter case or by how a number is written "
        f"would train as separate classes:\n{listed}\nwrite each class one way, or pass "
        f"{AS_WRITTEN_FLAG} to keep them as separate classes")


def check_label_count(labels: Sequence[tuple[str, int]], path: str, what: str = "label",
                      hint: str = "is the label column the one you meant?") -> None:
    """Refuses a training file whose (label, line) pairs hold fewer than two classes: a
    classifier of one class predicts it for everything, at probability 1."""
    distinct = {label for label, _ in labels}
    if len(distinct) >= 2 or not labels:
        return
    label, line = labels[0]
    raise UserError(f"{path}:{line}: every row has the {what} {label!r} ({len(labels)} rows); "
                    f"a classifier needs at least two {what}s to tell apart; {hint}")


def _lines(numbers: Sequence[int]) -> str:
    shown = ", ".join(str(number) for number in numbers[:_LISTED_LINES])
    return shown + (f" and {len(numbers) - _LISTED_LINES} more"
                    if len(numbers) > _LISTED_LINES else "")


def screen_rows(path: str, rows: list, header_repeats: Sequence[int], check_labels: bool,
                skip: bool) -> list:
    """`rows` (columns.Row) without the bad ones: those with an empty label cell (when
    `check_labels`) and, already taken out, the lines in `header_repeats` that repeat the
    header. Either is an error naming the first such line, unless `skip`: then they are
    skipped and counted on stderr."""
    empty = [row.line for row in rows if check_labels and row.label == ""]
    # (lines, what one such row does, what several do)
    kinds = [kind for kind in ((list(header_repeats), "repeats the header", "repeat the header"),
                               (empty, "has an empty label cell", "have an empty label cell"))
             if kind[0]]
    if not kinds:
        return rows
    if not skip:
        line, does = min((lines[0], does) for lines, does, _ in kinds)
        others = sorted(number for lines, _, _ in kinds for number in lines if number != line)
        more = f" (bad rows also at lines {_lines(others)})" if others else ""
        raise UserError(f"{path}:{line}: the row {does}{more}; fix the file, or pass "
                        f"{SKIP_FLAG} to skip such rows")
    say_once(f"{path}: skipped " + "; ".join(
        f"{len(lines)} row(s) that {do} (line(s) {_lines(lines)})" for lines, _, do in kinds))
    dropped = set(empty)
    kept = [row for row in rows if row.line not in dropped]
    if not kept:
        raise UserError(f"{path}: no rows left after skipping the bad ones")
    return kept
