"""A BEIR-format retrieval dataset, read with BEIR's own conventions (its `GenericDataLoader`).

A BEIR directory holds
  corpus.jsonl      one JSON object a line: {"_id": ..., "title": ..., "text": ...}
  queries.jsonl     one JSON object a line: {"_id": ..., "text": ...}
  qrels/SPLIT.tsv   a header line, then query-id <TAB> corpus-id <TAB> score (an integer)
and is read as BEIR reads it: the header of the qrels file is skipped whatever it says, the
queries kept are those the qrels name (in the qrels' order), and a document's text is its
title and text joined by one space and stripped, as BEIR's sentence-transformers wrapper
(`beir.retrieval.models.util.extract_corpus_sentences`, sep=" ") and mteb's retrieval
loader join them; a missing or null title is the empty one (the join is then the stripped
text). Where BEIR would fail later or silently (a qrels row naming a query or a document the
files do not hold, an `_id` twice, a line that is not JSON) this reader stops with one line
naming the file and line. An integer `_id` is read as its decimal string, as the qrels hold
every id as text. Every path may be local or gs:// (bert_jax/storage/files.py).
"""

import csv
import dataclasses
import json

from bert_jax.errors import UserError
from bert_jax.storage import files

CORPUS, QUERIES, QRELS_DIRECTORY = "corpus.jsonl", "queries.jsonl", "qrels"


@dataclasses.dataclass(frozen=True)
class BeirDataset:
    document_ids: list[str]
    document_texts: list[str]  # title and text joined, as BEIR embeds a document
    query_ids: list[str]  # those the qrels name, in their order
    query_texts: list[str]
    qrels: dict[str, dict[str, int]]  # query id -> document id -> relevance (0 is judged)


def document_text(title: str | None, text: str) -> str:
    """A corpus entry as BEIR's sentence-transformers wrapper embeds it."""
    return ((title or "") + " " + text).strip()


def _jsonl_records(path: str, what: str):
    """(line number, object) of each non-blank line of a JSONL file."""
    lines = files.split_lines(files.read_user_text(path, what))
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise UserError(f"{path}: line {number} is not JSON ({error.msg})") from None
        if not isinstance(record, dict):
            raise UserError(f"{path}: line {number} is not a JSON object")
        yield number, record


def _identifier(record: dict, path: str, number: int) -> str:
    value = record.get("_id")
    if isinstance(value, bool) or not isinstance(value, (str, int)) or value == "":
        raise UserError(f'{path}: line {number} has no "_id" (a non-empty string)')
    return str(value)


def _text_field(record: dict, key: str, path: str, number: int, optional: bool = False) -> str:
    value = record.get(key)
    if value is None and optional:
        return ""
    if not isinstance(value, str):
        raise UserError(f'{path}: line {number} has no "{key}" string')
    return value


def _read_texts(path: str, what: str, join) -> dict[str, str]:
    """_id -> text of a BEIR JSONL file; `join(record, number)` makes the text."""
    texts, lines = {}, {}
    for number, record in _jsonl_records(path, what):
        identifier = _identifier(record, path, number)
        if identifier in texts:
            raise UserError(f"{path}: line {number} repeats _id {identifier!r} "
                            f"(first on line {lines[identifier]})")
        texts[identifier], lines[identifier] = join(record, number), number
    if not texts:
        raise UserError(f"{path}: the {what} file has no records")
    return texts


def read_corpus(path: str) -> dict[str, str]:
    """_id -> the document's text as BEIR embeds it (title and text joined)."""
    return _read_texts(path, "corpus", lambda record, number: document_text(
        _text_field(record, "title", path, number, optional=True),
        _text_field(record, "text", path, number)))


def read_queries(path: str) -> dict[str, str]:
    return _read_texts(path, "queries",
                       lambda record, number: _text_field(record, "text", path, number))


def read_qrels(path: str) -> dict[str, dict[str, int]]:
    """query id -> document id -> score, the header line skipped (as BEIR skips it)."""
    text = files.read_user_text(path, "qrels", newline="")
    rows = list(csv.reader(files.split_lines(text), delimiter="\t", quoting=csv.QUOTE_MINIMAL))
    qrels = {}
    for number, row in enumerate(rows[1:], start=2):
        if not row:
            continue
        if len(row) != 3:
            raise UserError(f"{path}: line {number} has {len(row)} columns; expected 3 "
                            "tab-separated: query-id, corpus-id, score")
        query_id, document_id, score = row
        try:
            qrels.setdefault(query_id, {})[document_id] = int(score)
        except ValueError:
            raise UserError(f"{path}: line {number}: score {score!r} is not an integer") from None
    if not qrels:
        raise UserError(f"{path}: no judgements after the header line")
    return qrels


def _check_named(qrels: dict, queries: dict, corpus: dict, qrels_path: str) -> None:
    for query_id, judged in qrels.items():
        if query_id not in queries:
            raise UserError(f"{qrels_path}: query {query_id!r} is not in {QUERIES}")
        unknown = next((document for document in judged if document not in corpus), None)
        if unknown is not None:
            raise UserError(f"{qrels_path}: query {query_id!r} judges document {unknown!r}, "
                            f"which is not in {CORPUS}")


def read_beir(directory: str, split: str = "test") -> BeirDataset:
    """The BEIR dataset in `directory` with the judgements of qrels/SPLIT.tsv."""
    if not files.isdir(directory):
        raise UserError(f"{directory}: not a directory; expected a BEIR dataset ({CORPUS}, "
                        f"{QUERIES}, {QRELS_DIRECTORY}/{split}.tsv)")
    qrels_path = files.join(directory, QRELS_DIRECTORY, f"{split}.tsv")
    qrels = read_qrels(qrels_path)
    queries = read_queries(files.join(directory, QUERIES))
    corpus = read_corpus(files.join(directory, CORPUS))
    _check_named(qrels, queries, corpus, qrels_path)
    return BeirDataset(document_ids=list(corpus), document_texts=list(corpus.values()),
                       query_ids=list(qrels), query_texts=[queries[query] for query in qrels],
                       qrels=qrels)
