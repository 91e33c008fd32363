"""Documents from raw text: BERT-format files, plain prose, .gz, globs, and TFDS datasets.

A document is a list of sentences (str). Formats:
- `bert`: the original tool's input, one sentence per line, a blank line between documents.
- `prose`: paragraphs (blank-line separated; hard-wrapped lines are joined) split into
  sentences by a punctuation rule; a document ends at two or more blank lines in a row
  (a chapter or section break) or after `PROSE_DOCUMENT_SENTENCES` sentences, so that one
  unbroken book still gives many documents for next-sentence prediction.
- `tfds:NAME[:SPLIT]` (for example `tfds:wikipedia/20230601.en:train`): each example's text
  feature is a document, its lines paragraphs, split into sentences as prose. Read from a
  local `data_dir` already prepared (`tfds build`), since these machines may be offline.

Bytes that are not UTF-8 follow `encoding_errors`: `strict` stops with the file, line and
byte offset; `replace` substitutes U+FFFD and counts the replaced bytes (`ReadStats`).
"""

import codecs
import contextlib
import gzip
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from bert_jax.storage import files
from bert_jax.errors import UserError

PROSE_DOCUMENT_SENTENCES = 200
FORMATS = ("bert", "prose")

# A sentence ends at . ! or ? (and closing quotes or brackets) before whitespace and an
# upper-case letter, a digit or an opening quote: simple, and wrong only around abbreviations.
_SENTENCE_END = re.compile(
    r"""[.!?]+["'\u201d\u2019)\]]*\s+(?=["'\u201c\u2018(\[]*[A-Z0-9\u00c0-\u00de])""")


_COUNTING_REPLACE = "bert_jax.count_and_replace"
_REPLACED = [0]  # bytes replaced so far in this process


def _count_and_replace(error: UnicodeDecodeError) -> tuple[str, int]:
    _REPLACED[0] += error.end - error.start
    return "\ufffd", error.end


codecs.register_error(_COUNTING_REPLACE, _count_and_replace)


@dataclass
class ReadStats:
    """What reading found: replaced bytes per file (with `encoding_errors='replace'`)."""
    replaced_bytes: dict = field(default_factory=dict)
    bytes_read: int = 0


def split_sentences(paragraph: str) -> list[str]:
    """A paragraph's sentences, split after terminal punctuation."""
    sentences, start = [], 0
    for match in _SENTENCE_END.finditer(paragraph):
        sentences.append(paragraph[start:match.end()].strip())
        start = match.end()
    sentences.append(paragraph[start:].strip())
    return [sentence for sentence in sentences if sentence]


def expand_inputs(input_patterns: list[str]) -> list[str]:
    """Sorted files of each glob or directory (kept in pattern order); `tfds:` specs pass."""
    paths = []
    for pattern in input_patterns:
        if pattern.startswith("tfds:"):
            paths.append(pattern)
            continue
        matches = files.expand(pattern)
        if not matches:
            raise UserError(f"{pattern}: no input files match")
        paths.extend(matches)
    return paths


def _decoded_lines(path: str, encoding_errors: str, stats: ReadStats) -> Iterator[str]:
    """The file's lines as text (gzip if it ends in .gz), with the error policy applied."""
    offset = 0
    replaced = 0
    try:
        with files.open_file(path, "rb") as raw_file, (
                gzip.GzipFile(fileobj=raw_file) if path.endswith(".gz")
                else contextlib.nullcontext(raw_file)) as file:
            for number, raw in enumerate(file, start=1):
                offset += len(raw)
                stats.bytes_read += len(raw)
                if number == 1 and raw.startswith(codecs.BOM_UTF8):
                    raw = raw[len(codecs.BOM_UTF8):]  # a byte-order mark is not text
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as error:
                    if encoding_errors == "strict":
                        raise UserError(
                            f"{path}: line {number}: not UTF-8 ({error.reason}) at byte offset "
                            f"{offset - len(raw) + error.start}; fix the file or pass "
                            "--encoding-errors replace"
                            + ("" if path.endswith(".gz") else files.wide_encoding_hint(path))
                            ) from None
                    before = _REPLACED[0]
                    line = raw.decode("utf-8", errors=_COUNTING_REPLACE)
                    replaced += _REPLACED[0] - before
                yield line
    except FileNotFoundError:
        raise UserError(f"{path}: input file not found") from None
    except (gzip.BadGzipFile, EOFError, OSError) as error:
        raise UserError(f"{path}: cannot read ({error})") from None
    if replaced:
        stats.replaced_bytes[path] = replaced


# A line that ends a sentence: terminal punctuation, then closing quotes or brackets.
_ENDS_SENTENCE = re.compile(r"""[.!?:;]["'\u201d\u2019)\]]*$""")
_PROSE_SAMPLE_LINES = 2000  # lines read from the start of each file to judge its format


def prose_format_warning(input_patterns: list[str]) -> str | None:
    """A warning when files given as BERT format look like prose, else None.

    BERT format is one sentence a line; hard-wrapped prose (most lines ending mid-sentence)
    or one paragraph a line (most lines holding several sentences) would be silently cut
    into line-sized "sentences" and blank-line "documents". Only the first lines are read.
    """
    suspects = []
    for path in expand_inputs(input_patterns):
        if path.startswith("tfds:"):
            continue
        lines = []
        for line in _decoded_lines(path, "replace", ReadStats()):
            lines.append(line.strip())
            if len(lines) >= _PROSE_SAMPLE_LINES:
                break
        text_lines = [line for line in lines if line]
        if len(text_lines) < 20:
            continue  # too little to judge
        mid_sentence = sum(not _ENDS_SENTENCE.search(line) for line in text_lines)
        several = sum(len(split_sentences(line)) > 1 for line in text_lines)
        if mid_sentence > len(text_lines) / 2:
            suspects.append(f"{path} ({100 * mid_sentence // len(text_lines)}% of its first "
                            f"{len(text_lines)} lines end mid-sentence"
                            + ("; no blank lines" if len(text_lines) == len(lines) else "")
                            + ")")
        elif several > len(text_lines) / 2:
            suspects.append(f"{path} ({100 * several // len(text_lines)}% of its first "
                            f"{len(text_lines)} lines hold several sentences)")
    if not suspects:
        return None
    return ("warning: these inputs look like prose, not BERT format (one sentence a line, a "
            "blank line between documents): " + "; ".join(suspects)
            + ". Each line will be taken as a sentence; pass --format prose to split "
            "paragraphs into sentences.")


def _bert_documents(lines: Iterator[str]) -> Iterator[list[str]]:
    document = []
    for line in lines:
        line = line.strip()
        if line:
            document.append(line)
        elif document:
            yield document
            document = []
    if document:
        yield document


def _prose_documents(lines: Iterator[str]) -> Iterator[list[str]]:
    document, paragraph, blank_run = [], [], 0
    for line in lines:
        line = line.strip()
        if line:
            if blank_run >= 2 and document:
                yield document
                document = []
            paragraph.append(line)
            blank_run = 0
            continue
        blank_run += 1
        if paragraph:
            document.extend(split_sentences(" ".join(paragraph)))
            paragraph = []
            while len(document) >= PROSE_DOCUMENT_SENTENCES:
                yield document[:PROSE_DOCUMENT_SENTENCES]
                document = document[PROSE_DOCUMENT_SENTENCES:]
    if paragraph:
        document.extend(split_sentences(" ".join(paragraph)))
    if document:
        yield document


def _tfds_documents(spec: str, data_dir: str | None, feature: str) -> Iterator[list[str]]:
    """Each example of a prepared TFDS dataset: `tfds:NAME[:SPLIT]`."""
    import tensorflow_datasets as tfds
    name, _, split = spec[len("tfds:"):].partition(":")
    try:
        builder = tfds.builder(name, data_dir=data_dir)
        dataset = builder.as_dataset(split=split or "train", shuffle_files=False)
    except Exception as error:  # tfds raises many kinds; all mean "not there"
        raise UserError(f"{spec}: cannot open this TFDS dataset in data_dir {data_dir!r} "
                        f"({type(error).__name__}: {str(error).splitlines()[0][:200]}); "
                        "prepare it there first (`tfds build`) or pass --tfds-data-dir") from None
    if feature not in dataset.element_spec:
        raise UserError(f"{spec}: no text feature {feature!r} (has "
                        f"{sorted(dataset.element_spec)}); pass --tfds-feature")
    for example in tfds.as_numpy(dataset):
        text = example[feature].decode("utf-8", errors="replace")
        sentences = [sentence for paragraph in text.splitlines()
                     for sentence in split_sentences(paragraph.strip())]
        if sentences:
            yield sentences


def read_documents(inputs: list[str], input_format: str = "bert",
                   encoding_errors: str = "strict", tfds_data_dir: str | None = None,
                   tfds_feature: str = "text", stats: ReadStats | None = None,
                   ) -> Iterator[list[str]]:
    """Every document of every input, in order, streamed (nothing is held but one document).

    An input file with no text raises `UserError` naming it.
    """
    if input_format not in FORMATS:
        raise UserError(f"--format {input_format!r}: expected one of {FORMATS}")
    if encoding_errors not in ("strict", "replace"):
        raise UserError(f"--encoding-errors {encoding_errors!r}: expected strict or replace")
    stats = stats if stats is not None else ReadStats()
    for path in expand_inputs(inputs):
        if path.startswith("tfds:"):
            yield from _tfds_documents(path, tfds_data_dir, tfds_feature)
            continue
        lines = _decoded_lines(path, encoding_errors, stats)
        split = _bert_documents if input_format == "bert" else _prose_documents
        empty = True
        for document in split(lines):
            empty = False
            yield document
        if empty:
            raise UserError(f"{path}: input file has no text (expected sentences, one a line, "
                            "a blank line between documents)")

