"""CoNLL-U dependency treebanks (Universal Dependencies), read one sentence at a time.

Format (https://universaldependencies.org/format.html): one word a line with ten tab-separated
columns ID FORM LEMMA UPOS XPOS FEATS HEAD DEPREL DEPS MISC, `#` comment lines, and a blank
line after each sentence. Two kinds of lines are not syntactic words and are skipped:
multi-word token ranges (`1-2  don't`, whose parts `1 do` and `2 n't` follow as words) and
empty nodes of enhanced dependencies (`8.1`, which have no basic HEAD).
"""

import dataclasses
from collections.abc import Iterator

from bert_jax.errors import UserError

NUM_COLUMNS = 10


@dataclasses.dataclass(frozen=True)
class Sentence:
    """One sentence's syntactic words; `heads[i]` is 1-based (0 = the root), as in the file."""
    words: tuple[str, ...]
    heads: tuple[int, ...]
    relations: tuple[str, ...]  # DEPREL with its subtype, e.g. "nmod:poss"
    sentence_id: str  # the `# sent_id` comment, or "<file>:<first line>" without one


def _parse_word(path: str, number: int, columns: list[str], expected_id: int
                ) -> tuple[str, int, str]:
    """(form, head, relation) of a word line, or a UserError naming the line."""
    where = f"{path}:{number}"
    if columns[0] != str(expected_id):
        raise UserError(f"{where}: expected word ID {expected_id}, found {columns[0]!r} "
                        "(IDs count 1, 2, ... within each sentence)")
    try:
        head = int(columns[6])
    except ValueError:
        raise UserError(f"{where}: HEAD (column 7) must be an integer, found "
                        f"{columns[6]!r}") from None
    if head < 0 or not columns[7] or columns[7] == "_":
        raise UserError(f"{where}: expected a HEAD >= 0 and a DEPREL, found "
                        f"{columns[6]!r} and {columns[7]!r}")
    return columns[1], head, columns[7]


def _finish(path: str, first_line: int, sentence_id: str | None,
            words: list[tuple[str, int, str]]) -> Sentence:
    for form, head, _ in words:
        if head > len(words):
            raise UserError(f"{path}: the sentence starting at line {first_line} has a HEAD "
                            f"{head} beyond its {len(words)} words (word {form!r})")
    forms, heads, relations = zip(*words)
    return Sentence(forms, heads, relations, sentence_id or f"{path}:{first_line}")


def read_conllu(path: str) -> Iterator[Sentence]:
    """The sentences of `path`, in order, streamed. Raises UserError at the first bad line."""
    from bert_jax.storage import files

    try:
        # Iterating the file splits at newlines only; a leading byte-order mark is dropped.
        file = files.open_file(path, newline="")
    except FileNotFoundError:
        raise UserError(f"{path}: treebank file not found") from None
    with file:
        words, sentence_id, first_line, number = [], None, 0, 0
        try:
            for number, line in enumerate(file, start=1):
                line = line.rstrip("\n").rstrip("\r")
                if not line.strip():
                    if words:
                        yield _finish(path, first_line, sentence_id, words)
                    words, sentence_id, first_line = [], None, 0
                    continue
                first_line = first_line or number
                if line.startswith("#"):
                    if line.startswith("# sent_id"):
                        sentence_id = line.partition("=")[2].strip()
                    continue
                columns = line.split("\t")
                if len(columns) != NUM_COLUMNS:
                    raise UserError(f"{path}:{number}: expected {NUM_COLUMNS} tab-separated "
                                    f"columns (CoNLL-U), found {len(columns)}: {line[:60]!r}")
                if "-" in columns[0] or "." in columns[0]:
                    continue  # a multi-word token range or an empty node: not a basic word
                words.append(_parse_word(path, number, columns, len(words) + 1))
        except UnicodeDecodeError as error:
            raise UserError(f"{path}:{number + 1}: not UTF-8 text ({error.reason})") from None
        if words:
            yield _finish(path, first_line, sentence_id, words)
