"""CoNLL named-entity files: `token ... TAG` per line, a blank line between sentences.

The format of the CoNLL-2002/2003 shared tasks: whitespace-separated fields, the token
first and the entity tag in a chosen column (the last by default), `-DOCSTART-` lines
between documents (not sentences: kept aside, and written back in their places when
predictions are written, so the output lines up with the input). Every token line of a file has the
same number of fields; a line that does not is an error naming the file and line.

Tags follow IOB1 (the original CoNLL-2003 release: `I-X` opens an entity, `B-X` only
separates two adjacent entities of one type) or IOB2 (`B-X` opens every entity, as most
copies now ship). Everything downstream sees IOB2: IOB1 files are converted on reading, so
the model learns one scheme and seqeval can score in its strict IOB2 mode.
"""

import dataclasses
from collections.abc import Sequence

from bert_jax.errors import UserError

DOCUMENT_START = "-DOCSTART-"
OUTSIDE = "O"
SCHEMES = ("auto", "iob1", "iob2")


@dataclasses.dataclass(frozen=True)
class Sentence:
    """One sentence: each token line's fields, its IOB2 tags (None when unlabelled)."""
    fields: tuple[tuple[str, ...], ...]  # (words, fields per line)
    tags: tuple[str, ...] | None  # (words,) IOB2 tags
    line: int  # 1-based line number of the first token; token i is on line + i

    @property
    def words(self) -> tuple[str, ...]:
        return tuple(fields[0] for fields in self.fields)


@dataclasses.dataclass(frozen=True)
class CoNLLFile:
    path: str
    sentences: list[Sentence]
    scheme: str  # the scheme the file was written in ("iob1" or "iob2"; "none" if unlabelled)
    # Each -DOCSTART- line's fields, with the index of the sentence it comes before.
    documents: tuple[tuple[int, tuple[str, ...]], ...] = ()


def _split_tag(tag: str) -> tuple[str, str]:
    """'B-PER' -> ('B', 'PER'); 'O' -> ('O', '')."""
    if tag == OUTSIDE:
        return OUTSIDE, ""
    prefix, _, entity_type = tag.partition("-")
    return prefix, entity_type


def _check_tag(tag: str, where: str) -> None:
    prefix, entity_type = _split_tag(tag)
    if prefix != OUTSIDE and (prefix not in ("B", "I") or not entity_type):
        raise UserError(f"{where}: tag {tag!r} is not an IOB tag; expected O, B-TYPE or "
                        "I-TYPE (is --tag-column the entity column?)")


def opens_entity_in_iob1(previous: str, tag: str) -> bool:
    """Whether `tag` starts an entity without a B- prefix: legal in IOB1, never in IOB2."""
    prefix, entity_type = _split_tag(tag)
    return prefix == "I" and _split_tag(previous)[1] != entity_type


def iob1_to_iob2(tags: Sequence[str]) -> list[str]:
    """Gives every entity a B- start: an I-X after O or after another type becomes B-X.

    IOB2 input comes back unchanged, so the conversion is safe to apply to either scheme.
    """
    converted, previous = [], OUTSIDE
    for tag in tags:
        if opens_entity_in_iob1(previous, tag):
            converted.append("B-" + _split_tag(tag)[1])
        else:
            converted.append(tag)
        previous = tag
    return converted


def _read_lines(path: str) -> list[str]:
    from bert_jax.storage import files

    return files.split_lines(files.read_user_text(path, "CoNLL"))


def _token_blocks(path: str, lines: list[str]
                  ) -> tuple[list[tuple[int, list[tuple[str, ...]]]], list]:
    """((first line number, fields of each token line) per sentence, the -DOCSTART- lines as
    (index of the next sentence, fields)); checks the field count."""
    blocks, current, start, num_fields, first_line = [], [], 0, None, 0
    documents = []
    for number, line in enumerate(lines, start=1):
        fields = tuple(line.split())
        if not fields or fields[0] == DOCUMENT_START:
            if current:
                blocks.append((start, current))
            current = []
            if fields:
                documents.append((len(blocks), fields))
            continue
        if num_fields is None:
            num_fields, first_line = len(fields), number
        elif len(fields) != num_fields:
            raise UserError(
                f"{path}:{number}: {len(fields)} field(s) {' '.join(fields)!r}; every token "
                f"line must have {num_fields} like line {first_line} (token ... TAG, "
                "separated by whitespace; tokens cannot contain spaces)")
        if not current:
            start = number
        current.append(fields)
    if current:
        blocks.append((start, current))
    if not blocks:
        raise UserError(f"{path}: no sentences; expected `token ... TAG` lines with a blank "
                        "line between sentences")
    return blocks, documents


def read_conll(path: str, tag_column: int | None = -1, scheme: str = "auto") -> CoNLLFile:
    """Reads a CoNLL file; `tag_column` None reads tokens only (for prediction).

    `tag_column` is a 0-based field index, negative counting from the end. `scheme` is
    "iob1", "iob2" or "auto" (IOB1 if any entity opens with I-, else IOB2); the returned
    sentences always carry IOB2 tags.
    """
    if scheme not in SCHEMES:
        raise UserError(f"unknown tag scheme {scheme!r}; expected one of {SCHEMES}")
    blocks, documents = _token_blocks(path, _read_lines(path))
    documents = tuple(documents)
    if tag_column is None:
        return CoNLLFile(path, [Sentence(tuple(fields), None, start) for start, fields in blocks],
                         "none", documents)
    num_fields = len(blocks[0][1][0])
    column = tag_column + num_fields if tag_column < 0 else tag_column
    if not 1 <= column < num_fields:
        raise UserError(
            f"{path}:{blocks[0][0]}: tag column {tag_column} does not exist beside the token; "
            f"lines have {num_fields} field(s) (token in column 0, tag in 1..{num_fields - 1})")
    raw_tags = []
    for start, fields in blocks:
        tags = [line_fields[column] for line_fields in fields]
        for offset, tag in enumerate(tags):
            _check_tag(tag, f"{path}:{start + offset}")
        raw_tags.append(tags)
    if scheme == "auto":
        scheme = "iob1" if any(
            opens_entity_in_iob1(previous, tag)
            for tags in raw_tags for previous, tag in zip([OUTSIDE] + tags[:-1], tags)
        ) else "iob2"
    sentences = [Sentence(tuple(fields), tuple(iob1_to_iob2(tags) if scheme == "iob1" else tags),
                          start) for (start, fields), tags in zip(blocks, raw_tags)]
    return CoNLLFile(path, sentences, scheme, documents)


def label_names(sentences: Sequence[Sentence]) -> list[str]:
    """O, then B- and I- of every entity type in `sentences`, types sorted.

    Both prefixes of a type are labels even if the training file lacks one (single-word
    entities only, say), so the model may predict any well-formed IOB2 sequence.
    """
    types = {_split_tag(tag)[1] for sentence in sentences for tag in sentence.tags}
    types.discard("")
    return [OUTSIDE] + [f"{prefix}-{name}" for name in sorted(types) for prefix in "BI"]


def check_known_tags(data: CoNLLFile, labels: Sequence[str]) -> None:
    """Refuses a file (an --eval set) with an entity type the training file did not have."""
    known = set(labels)
    for sentence in data.sentences:
        for offset, tag in enumerate(sentence.tags):
            if tag not in known:
                types = sorted({_split_tag(label)[1] for label in labels} - {""})
                raise UserError(
                    f"{data.path}:{sentence.line + offset}: tag {tag!r} was not seen in "
                    f"training; the model knows the entity types {types}")


def write_conll(path: str, sentences: Sequence[Sentence], predicted: Sequence[Sequence[str]],
                documents: Sequence[tuple[int, tuple[str, ...]]] = ()) -> None:
    """Each token line as read, plus the predicted tag as a last column (conlleval's layout),
    and each -DOCSTART- line of `documents` (`CoNLLFile.documents`) in its place, tagged O
    so that every line has as many fields.

    Written through the file layer's atomic writer, so a failure leaves no half-written file.
    """
    from bert_jax.storage import files

    before = {}
    for index, fields in documents:
        before.setdefault(index, []).append(fields)

    def write_documents(file, index: int) -> None:
        for fields in before.get(index, ()):
            file.write(" ".join((*fields, OUTSIDE)) + "\n\n")

    with files.atomic_write(path) as file:
        for index, (sentence, tags) in enumerate(zip(sentences, predicted, strict=True)):
            write_documents(file, index)
            for fields, tag in zip(sentence.fields, tags, strict=True):
                file.write(" ".join((*fields, tag)) + "\n")
            file.write("\n")
        write_documents(file, len(sentences))
