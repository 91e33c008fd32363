"""Window logits turned into answers, as the original `run_squad.py` (`write_predictions`) does.

For each question: over all its windows, the `n_best` highest start and end logits are
paired; a pair is skipped when either token is outside the context, the start token does not
have its maximum context in this window, the end comes before the start, or the span is
longer than `max_answer_len` tokens. Candidates are ranked by start + end logit, duplicates
of a text dropped, the best `n_best` kept with softmax probabilities. The answer text is cut
from the original context by the tokens' character offsets. For SQuAD v2.0 the null score is
the minimum over windows of start[CLS] + end[CLS]; the question is predicted unanswerable
when null score - best span score > `null_threshold`, and that difference is its null odds.

Departures: padding positions do not take n-best slots (the original lets them take a
slot and then skips them), so the answer does not depend on how far a batch was padded; and
where the original has no answer to give, a question with no windows or no valid span is
predicted "" (the original writes the nonce text "empty" in v1.1 and fails in v2.0), its null
odds `NO_SPAN_ODDS`.
"""

import math
import os

import numpy as np

from bert_jax.storage import json_values
from input_pipeline.tasks.squad import Question
from input_pipeline.tasks.squad_windows import Windows

NO_SPAN_ODDS = 1e6  # the original's initial null score: certainly unanswerable


def _best_indexes(logits: np.ndarray, count: int) -> np.ndarray:
    """Positions of the `count` largest logits, ties in position order (a stable sort)."""
    return np.argsort(-logits, kind="stable")[:count]


def _softmax(scores: list[float]) -> list[float]:
    if not scores:
        return []
    largest = max(scores)
    exponentials = [math.exp(score - largest) for score in scores]
    total = sum(exponentials)
    return [value / total for value in exponentials]


def _candidates(window: int, windows: Windows, start_logits: np.ndarray,
                end_logits: np.ndarray, n_best: int, max_answer_len: int) -> list[tuple]:
    """Valid (score, window, start, end, start_logit, end_logit) spans of one window."""
    offsets, max_context = windows.token_offsets[window], windows.max_context[window]
    in_context = offsets[:, 0] >= 0
    found = []
    for start in _best_indexes(start_logits, n_best):
        if not (in_context[start] and max_context[start]):
            continue
        for end in _best_indexes(end_logits, n_best):
            if not in_context[end] or end < start or end - start + 1 > max_answer_len:
                continue
            start_logit, end_logit = float(start_logits[start]), float(end_logits[end])
            found.append((start_logit + end_logit, window, int(start), int(end),
                          start_logit, end_logit))
    return found


def _answer_question(question: Question, window_rows: np.ndarray, windows: Windows,
                     start_logits: np.ndarray, end_logits: np.ndarray, version_2: bool,
                     n_best: int, max_answer_len: int) -> tuple[list[dict], float | None]:
    """The n-best list of one question and, for v2.0, its null score (None in v1.1)."""
    candidates, null = [], None
    for window in window_rows:
        candidates += _candidates(window, windows, start_logits[window], end_logits[window],
                                  n_best, max_answer_len)
        null_score = float(start_logits[window, 0] + end_logits[window, 0])
        if version_2 and (null is None or null_score < null[0]):  # the first minimum
            null = (null_score, float(start_logits[window, 0]), float(end_logits[window, 0]))
    if null is not None:
        candidates.append((null[0], -1, 0, 0, null[1], null[2]))
    candidates.sort(key=lambda candidate: candidate[0], reverse=True)  # stable, as sorted()
    nbest, seen = [], set()
    for _, window, start, end, start_logit, end_logit in candidates:
        if len(nbest) >= n_best:
            break
        text = ""
        if start > 0:
            offsets = windows.token_offsets[window]
            text = question.context[offsets[start, 0]:offsets[end, 1]]
        if text in seen:
            continue
        seen.add(text)
        nbest.append(dict(text=text, start_logit=start_logit, end_logit=end_logit))
    if null is not None and "" not in seen:
        nbest.append(dict(text="", start_logit=null[1], end_logit=null[2]))
    probabilities = _softmax([entry["start_logit"] + entry["end_logit"] for entry in nbest])
    nbest = [dict(text=entry["text"], probability=probability, start_logit=entry["start_logit"],
                  end_logit=entry["end_logit"])
             for entry, probability in zip(nbest, probabilities)]
    return nbest, (null[0] if null is not None else None)


def postprocess(questions: list[Question], windows: Windows, start_logits: np.ndarray,
                end_logits: np.ndarray, version_2: bool, n_best: int = 20,
                max_answer_len: int = 30, null_threshold: float = 0.0
                ) -> tuple[dict[str, str], dict[str, list[dict]], dict[str, float]]:
    """(predictions id -> text, n-best lists id -> entries, null odds id -> float; {} in v1.1).

    start_logits, end_logits: (W, T) for the W windows in `windows`.
    """
    # Logits may come for fewer positions than the windows hold (batches padded only to
    # their longest window); padding positions are never candidates, here or in the original.
    width = np.asarray(start_logits).shape[1]
    padding = windows.input_mask[:, :width] == 0
    start_logits = np.where(padding, -np.inf, np.asarray(start_logits, np.float64))
    end_logits = np.where(padding, -np.inf, np.asarray(end_logits, np.float64))
    order = np.argsort(windows.question_index, kind="stable")
    bounds = np.searchsorted(windows.question_index[order], np.arange(len(questions) + 1))
    predictions, all_nbest, null_odds = {}, {}, {}
    for number, question in enumerate(questions):
        rows = order[bounds[number]:bounds[number + 1]]
        nbest, null_score = _answer_question(question, rows, windows, start_logits,
                                             end_logits, version_2, n_best, max_answer_len)
        best_span = next((entry for entry in nbest if entry["text"]), None)
        all_nbest[question.question_id] = nbest
        if best_span is None:  # no windows or no valid span: see the module docstring
            predictions[question.question_id] = ""
            if version_2:
                null_odds[question.question_id] = NO_SPAN_ODDS
            continue
        if not version_2:
            predictions[question.question_id] = nbest[0]["text"]
            continue
        difference = null_score - best_span["start_logit"] - best_span["end_logit"]
        null_odds[question.question_id] = difference
        predictions[question.question_id] = "" if difference > null_threshold \
            else best_span["text"]
    return predictions, all_nbest, null_odds


def write_json(path: str, value) -> None:
    """Writes JSON through the file layer's atomic writer: no half-written file is left."""
    from bert_jax.storage import files

    with files.atomic_write(path) as file:
        json_values.dump(value, file, indent=2, ensure_ascii=False)
        file.write("\n")


def write_predictions(directory: str, predictions: dict, nbest: dict, null_odds: dict,
                      predictions_name: str = "predictions.json") -> None:
    """predictions.json (or `predictions_name`), nbest_predictions.json and, for v2.0,
    null_odds.json in `directory`."""
    os.makedirs(directory, exist_ok=True)
    write_json(os.path.join(directory, predictions_name), predictions)
    write_json(os.path.join(directory, "nbest_predictions.json"), nbest)
    if null_odds:
        write_json(os.path.join(directory, "null_odds.json"), null_odds)
