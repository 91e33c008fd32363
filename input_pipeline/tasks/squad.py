"""SQuAD-format JSON (v1.1 and v2.0) read into questions; v2.0 is detected from `is_impossible`.

The file is `{"data": [{"title", "paragraphs": [{"context", "qas": [{"id", "question",
"answers": [{"text", "answer_start"}], "is_impossible"?}]}]}]}`. Every gold answer text is
kept for the metrics (the official scripts score against the texts only); an answer whose
`answer_start` does not point at its text cannot be located for training, so it is skipped
for the span (warned, counted) but still counts as a gold text.
"""

import dataclasses
import hashlib
import json
import logging

from bert_jax.errors import UserError
from bert_jax.storage.files import read_user_text

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Question:
    """One question over one context; spans are (start_char, end_char), end exclusive."""
    question_id: str
    question: str
    context: str
    answer_texts: tuple[str, ...]  # every gold text, as the official scripts read them
    answer_spans: tuple[tuple[int, int], ...]  # the answers whose answer_start checks out
    is_impossible: bool = False


@dataclasses.dataclass(frozen=True)
class SquadFile:
    questions: list[Question]
    version_2: bool  # any question carries `is_impossible`
    misplaced_answers: int  # answers skipped because answer_start does not point at the text


def _field(record: dict, key: str, kind: type, where: str):
    if not isinstance(record, dict) or key not in record:
        raise UserError(f"{where}: missing key {key!r}")
    value = record[key]
    if not isinstance(value, kind):
        expected = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
        raise UserError(f"{where}: {key!r} should be {expected}, got {type(value).__name__}")
    return value


def _answers(qa: dict, context: str, where: str,
             misplaced_so_far: int) -> tuple[list[str], list[tuple[int, int]], int]:
    """Gold texts, located spans and how many answers were misplaced (the first few warned)."""
    texts, spans, misplaced = [], [], 0
    for number, answer in enumerate(qa.get("answers") or []):
        answer_where = f"{where}, answer {number}"
        text = _field(answer, "text", str, answer_where)
        texts.append(text)
        start = answer.get("answer_start")
        if not isinstance(start, int) or isinstance(start, bool):
            raise UserError(f"{answer_where}: 'answer_start' should be an integer character "
                            f"offset, got {start!r}")
        if context[start:start + len(text)] != text:
            misplaced += 1
            log = logger.warning if misplaced_so_far + misplaced <= 5 else logger.debug
            log("%s: answer_start %d does not point at %r (context there reads "
                           "%r); answer skipped for training", answer_where, start, text,
                           context[start:start + len(text)])
            continue
        spans.append((start, start + len(text)))
    return texts, spans, misplaced


def parse_squad(document, path: str, require_answers: bool = True) -> SquadFile:
    """Questions from a parsed SQuAD JSON document; `path` names it in messages.

    Without `require_answers` (questions to answer) a question may have no `answers` key.
    """
    if not isinstance(document, dict):
        raise UserError(f"{path}: expected a JSON object with a 'data' list, "
                        f"got {type(document).__name__}")
    questions, version_2, misplaced, seen = [], False, 0, set()
    for article_index, article in enumerate(_field(document, "data", list, path)):
        article_where = f"{path}: data[{article_index}]"
        for paragraph_index, paragraph in enumerate(
                _field(article, "paragraphs", list, article_where)):
            where = f"{article_where}.paragraphs[{paragraph_index}]"
            context = _field(paragraph, "context", str, where)
            for qa_index, qa in enumerate(_field(paragraph, "qas", list, where)):
                qa_where = f"{where}.qas[{qa_index}]"
                question_id = str(_field(qa, "id", (str, int), qa_where))
                qa_where = f"{path}: question id {question_id!r}"
                if question_id in seen:
                    raise UserError(f"{qa_where}: duplicate question id")
                seen.add(question_id)
                question = _field(qa, "question", str, qa_where)
                if require_answers or "answers" in qa:
                    _field(qa, "answers", list, qa_where)
                impossible = qa.get("is_impossible", None)
                if impossible is not None:
                    version_2 = True
                    if not isinstance(impossible, bool):
                        raise UserError(f"{qa_where}: 'is_impossible' should be true or false, "
                                        f"got {impossible!r}")
                texts, spans, bad = _answers(qa, context, qa_where, misplaced)
                if impossible and texts:
                    raise UserError(f"{qa_where}: is_impossible is true but 'answers' is not "
                                    "empty")
                misplaced += bad
                questions.append(Question(question_id, question, context, tuple(texts),
                                          tuple(spans), bool(impossible)))
    if misplaced:
        logger.warning("%s: %d answer(s) skipped because answer_start does not point at "
                       "their text", path, misplaced)
    return SquadFile(questions, version_2, misplaced)


# The last file parsed: fine-tuning reads its training file twice (the task's settings need
# its version, then its examples are made), which parsed it twice and warned each misplaced
# answer twice. Keyed by the text's digest, so a changed file is parsed again.
_last_parsed: dict = {}


def read_squad(path: str, require_answers: bool = True) -> SquadFile:
    """Questions of a SQuAD v1.1 or v2.0 JSON file, in file order."""
    text = read_user_text(path, "SQuAD")
    key = (path, require_answers, hashlib.sha256(text.encode("utf-8")).digest())
    if key in _last_parsed:
        return _last_parsed[key]
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        raise UserError(f"{path}: not valid JSON ({error.msg} at line {error.lineno}, "
                        f"column {error.colno})") from None
    parsed = parse_squad(document, path, require_answers)
    _last_parsed.clear()
    _last_parsed[key] = parsed
    return parsed
