"""SQuAD questions cut into model windows, as the original `run_squad.py` does, with offsets.

Each window is `[CLS] question [SEP] context piece [SEP]`: the question truncated to
`max_query_len` tokens, the context cut into pieces of at most
`max_seq_len - len(question) - 3` tokens whose starts are `doc_stride` tokens apart (the
original's stride is the step between windows, not Hugging Face's overlap). Token positions
map to context characters through the fast tokenizer's offsets, so an answer's characters
become a token start/end without a character loop, and a predicted span is cut back out of
the original context. A window that does not hold the whole answer, and every window of an
unanswerable question, points at [CLS] (position 0).
"""

import dataclasses
import logging

import numpy as np

from bert_jax.errors import UserError
from input_pipeline.tasks.squad import Question

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class Windows:
    """W windows of length T (= max_seq_len), padded; arrays are numpy."""
    input_ids: np.ndarray  # (W, T) int32
    segment_ids: np.ndarray  # (W, T) int32: 0 for [CLS] question [SEP], 1 for context [SEP]
    input_mask: np.ndarray  # (W, T) int32
    start_positions: np.ndarray  # (W,) int32: answer start token, 0 = [CLS]
    end_positions: np.ndarray  # (W,) int32: answer end token (inclusive), 0 = [CLS]
    question_index: np.ndarray  # (W,) int64: which question the window belongs to
    token_offsets: np.ndarray  # (W, T, 2) int32: a context token's characters, -1 elsewhere
    max_context: np.ndarray  # (W, T) bool: this window gives the token its maximum context

    def __len__(self) -> int:
        return len(self.input_ids)

    def model_inputs(self, rows=slice(None)) -> dict[str, np.ndarray]:
        """The arrays the model and the loss read, for some rows."""
        return dict(input_ids=self.input_ids[rows], segment_ids=self.segment_ids[rows],
                    input_mask=self.input_mask[rows], start_positions=self.start_positions[rows],
                    end_positions=self.end_positions[rows])


def piece_starts(num_tokens: int, max_tokens: int, doc_stride: int) -> list[tuple[int, int]]:
    """(start, length) of each context piece, exactly as the original's `doc_spans` loop."""
    spans, start = [], 0
    while start < num_tokens:
        length = min(num_tokens - start, max_tokens)
        spans.append((start, length))
        if start + length == num_tokens:
            break
        start += min(length, doc_stride)
    return spans


def max_context_mask(spans: list[tuple[int, int]]) -> list[np.ndarray]:
    """For each span, (length,) bool: the span is the one where the token sees most context.

    The original's `_check_is_max_context`: score = min(left, right) + 0.01 * length, the
    first span winning ties.
    """
    if not spans:
        return []
    num_tokens = spans[-1][0] + spans[-1][1]
    position = np.arange(num_tokens)
    scores = np.full((len(spans), num_tokens), -np.inf)
    for index, (start, length) in enumerate(spans):
        inside = (position >= start) & (position < start + length)
        left, right = position - start, start + length - 1 - position
        scores[index, inside] = np.minimum(left, right)[inside] + 0.01 * length
    best = np.argmax(scores, axis=0)  # (num_tokens,): first maximum, as the original's `>`
    return [best[start:start + length] == index
            for index, (start, length) in enumerate(spans)]


def answer_tokens(offsets: np.ndarray, span: tuple[int, int]) -> tuple[int, int]:
    """First and last context token (inclusive) covering the character span [start, end)."""
    first = int(np.searchsorted(offsets[:, 1], span[0], side="right"))  # first token ending after
    last = int(np.searchsorted(offsets[:, 0], span[1], side="left")) - 1  # last starting before
    return first, max(first, last)


def _encode(tokenizer, texts: list[str]) -> list:
    backend = getattr(tokenizer, "backend", None)
    if backend is None:
        raise UserError("question answering needs a tokenizer with character offsets (a "
                        "vocab.txt or tokenizer.json); this model's SentencePiece has none")
    backend.no_truncation()
    backend.no_padding()
    return backend.encode_batch(texts, add_special_tokens=False)


def _check_lengths(max_seq_len: int, doc_stride: int, max_query_len: int) -> None:
    if max_query_len < 1 or doc_stride < 1:
        raise UserError(f"--max-query-len ({max_query_len}) and --doc-stride ({doc_stride}) "
                        "must be positive")
    if max_query_len + 4 > max_seq_len:
        raise UserError(f"--max-query-len {max_query_len} leaves no room for the context in "
                        f"--max-seq-len {max_seq_len} windows (needs max-query-len + 4 <= "
                        "max-seq-len: [CLS], two [SEP] and at least one context token)")


def make_windows(questions: list[Question], tokenizer, max_seq_len: int = 384,
                 doc_stride: int = 128, max_query_len: int = 64,
                 training: bool = False) -> Windows:
    """All windows of `questions`; in training, answerable questions with no located answer
    are left out (their answers were misplaced: see `squad.py`)."""
    _check_lengths(max_seq_len, doc_stride, max_query_len)
    contexts = list(dict.fromkeys(question.context for question in questions))
    context_index = {context: index for index, context in enumerate(contexts)}
    context_encodings = _encode(tokenizer, contexts)
    question_encodings = _encode(tokenizer, [question.question for question in questions])
    rows, truncated, unlocated = [], [], []
    for number, (question, query) in enumerate(zip(questions, question_encodings)):
        if training and not question.is_impossible and not question.answer_spans:
            unlocated.append(question.question_id)
            continue
        query_ids = query.ids[:max_query_len]
        if len(query.ids) > max_query_len:
            truncated.append(question.question_id)
        context = context_encodings[context_index[question.context]]
        rows.extend(_question_windows(number, question, query_ids, np.array(context.ids),
                                      np.array(context.offsets, np.int64).reshape(-1, 2),
                                      tokenizer, max_seq_len, doc_stride))
    if truncated:
        logger.warning("%d question(s) longer than --max-query-len %d tokens were truncated, "
                       "e.g. question id %s", len(truncated), max_query_len,
                       ", ".join(repr(name) for name in truncated[:5]))
    if unlocated:
        logger.warning("%d answerable question(s) left out of training: none of their "
                       "answers could be located, e.g. question id %s", len(unlocated),
                       ", ".join(repr(name) for name in unlocated[:5]))
    return _stack(rows, max_seq_len, tokenizer.pad_id)


def _question_windows(number: int, question: Question, query_ids: list[int],
                      context_ids: np.ndarray, offsets: np.ndarray, tokenizer,
                      max_seq_len: int, doc_stride: int) -> list[dict]:
    """The windows of one question, as dicts of unpadded arrays."""
    spans = piece_starts(len(context_ids), max_seq_len - len(query_ids) - 3, doc_stride)
    answer = None
    if question.answer_spans and not question.is_impossible:
        answer = answer_tokens(offsets, question.answer_spans[0])  # the original trains on one
    prefix = [tokenizer.cls_id, *query_ids, tokenizer.sep_id]
    windows = []
    for (start, length), max_context in zip(spans, max_context_mask(spans)):
        ids = np.array([*prefix, *context_ids[start:start + length], tokenizer.sep_id])
        window_offsets = np.full((len(ids), 2), -1, np.int64)
        window_offsets[len(prefix):len(prefix) + length] = offsets[start:start + length]
        is_max = np.zeros(len(ids), bool)
        is_max[len(prefix):len(prefix) + length] = max_context
        start_position = end_position = 0
        if answer is not None and start <= answer[0] and answer[1] < start + length:
            start_position = answer[0] - start + len(prefix)
            end_position = answer[1] - start + len(prefix)
        windows.append(dict(ids=ids, context_start=len(prefix), offsets=window_offsets,
                            max_context=is_max, start=start_position, end=end_position,
                            question=number))
    return windows


def _stack(rows: list[dict], max_seq_len: int, pad_id: int) -> Windows:
    count = len(rows)
    windows = Windows(
        input_ids=np.full((count, max_seq_len), pad_id, np.int32),
        segment_ids=np.zeros((count, max_seq_len), np.int32),
        input_mask=np.zeros((count, max_seq_len), np.int32),
        start_positions=np.array([row["start"] for row in rows], np.int32).reshape(count),
        end_positions=np.array([row["end"] for row in rows], np.int32).reshape(count),
        question_index=np.array([row["question"] for row in rows], np.int64).reshape(count),
        token_offsets=np.full((count, max_seq_len, 2), -1, np.int32),
        max_context=np.zeros((count, max_seq_len), bool))
    for index, row in enumerate(rows):
        length = len(row["ids"])
        windows.input_ids[index, :length] = row["ids"]
        windows.segment_ids[index, row["context_start"]:length] = 1
        windows.input_mask[index, :length] = 1
        windows.token_offsets[index, :length] = row["offsets"]
        windows.max_context[index, :length] = row["max_context"]
    return windows
