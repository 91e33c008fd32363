"""SQuAD exact match and F1 with the official evaluation scripts' semantics, in points 0-100.

v1.1 (`evaluate-v1.1.py`): answers normalised (lower-case, punctuation and the articles
a/an/the removed, whitespace collapsed), the maximum over the gold answers, a missing
prediction scores 0; keys `exact_match`, `f1`.
v2.0 (`evaluate-v2.0.py`): the same normalisation; gold answers that normalise to nothing
are dropped and an unanswerable question's gold is [""]; F1 is 1 when both sides are empty;
keys `exact`, `f1`, `total`, `HasAns_*`, `NoAns_*` and, given null odds, `best_exact`,
`best_exact_thresh`, `best_f1`, `best_f1_thresh` (the threshold on the null odds that
maximises each). The official v2.0 script stops with a KeyError when a prediction is missing;
here a missing prediction scores 0 and counts in every total, as v1.1 does.
"""

import collections
import logging
import math
import re
import string

from input_pipeline.tasks.squad import Question

logger = logging.getLogger(__name__)

_PUNCTUATION = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)


def normalize_answer(text: str) -> str:
    """Lower-case, drop punctuation, drop articles, collapse whitespace (in that order)."""
    text = "".join(character for character in text.lower() if character not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def _f1(prediction_tokens: list[str], gold_tokens: list[str]) -> float:
    common = collections.Counter(prediction_tokens) & collections.Counter(gold_tokens)
    overlap = sum(common.values())
    if overlap == 0:
        return 0.0
    precision, recall = overlap / len(prediction_tokens), overlap / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def f1_v1(prediction: str, gold: str) -> float:
    return _f1(normalize_answer(prediction).split(), normalize_answer(gold).split())


def f1_v2(prediction: str, gold: str) -> float:
    prediction_tokens, gold_tokens = (normalize_answer(prediction).split(),
                                      normalize_answer(gold).split())
    if not prediction_tokens or not gold_tokens:
        return float(prediction_tokens == gold_tokens)
    return _f1(prediction_tokens, gold_tokens)


def exact(prediction: str, gold: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(gold))


def _warn_missing(questions: list[Question], predictions: dict) -> None:
    missing = [question.question_id for question in questions
               if question.question_id not in predictions]
    if missing:
        logger.warning("%d question(s) have no prediction and score 0, e.g. %s",
                       len(missing), ", ".join(repr(name) for name in missing[:5]))


def evaluate_v1(questions: list[Question], predictions: dict[str, str]) -> dict[str, float]:
    """{"exact_match", "f1"} as `evaluate-v1.1.py` prints them."""
    _warn_missing(questions, predictions)
    exact_total = f1_total = 0.0
    for question in questions:
        if question.question_id not in predictions:
            continue
        prediction = predictions[question.question_id]
        exact_total += max(exact(prediction, gold) for gold in question.answer_texts)
        f1_total += max(f1_v1(prediction, gold) for gold in question.answer_texts)
    count = len(questions)
    return {"exact_match": 100.0 * exact_total / count, "f1": 100.0 * f1_total / count}


def _raw_scores_v2(questions, predictions) -> tuple[dict, dict]:
    exact_scores, f1_scores = {}, {}
    for question in questions:
        golds = [text for text in question.answer_texts if normalize_answer(text)] or [""]
        prediction = predictions.get(question.question_id)
        if prediction is None:
            exact_scores[question.question_id] = f1_scores[question.question_id] = 0.0
            continue
        exact_scores[question.question_id] = max(exact(prediction, gold) for gold in golds)
        f1_scores[question.question_id] = max(f1_v2(prediction, gold) for gold in golds)
    return exact_scores, f1_scores


def _best_threshold(questions, predictions, scores, null_odds) -> tuple[float, float]:
    """The official `find_best_thresh`: predict "" above a threshold on the null odds.

    Its starting point, every question answered "", is the threshold below every null odd;
    the official script reports it as 0.0, right for its probabilities in [0, 1] but a
    threshold that answers every question whose null odds are negative (here they are
    null score - best span score, any real). So it is the largest float below the lowest
    null odd: a threshold that answers nothing, as the score it comes with assumes."""
    has_answer = {question.question_id: bool(question.answer_texts) for question in questions}
    predicted = [name for name in null_odds if name in predictions]
    # Everything predicted unanswerable: right exactly on the unanswerable questions (a
    # question without a prediction is never right, see the module docstring).
    current = best = sum(1 for name in predicted if not has_answer.get(name, True))
    lowest = min((null_odds[name] for name in predicted), default=0.0)
    best_threshold = min(0.0, math.nextafter(lowest, -math.inf))
    for name in sorted(predicted, key=lambda name: null_odds[name]):
        if name not in scores:
            continue
        if has_answer[name]:
            current += scores[name]
        else:
            current += -1 if predictions[name] else 0
        if current > best:
            best, best_threshold = current, null_odds[name]
    return 100.0 * best / len(scores), best_threshold


def evaluate_v2(questions: list[Question], predictions: dict[str, str],
                null_odds: dict[str, float] | None = None) -> dict[str, float]:
    """The dictionary `evaluate-v2.0.py` prints (without --na-prob-file if null_odds is None)."""
    _warn_missing(questions, predictions)
    exact_scores, f1_scores = _raw_scores_v2(questions, predictions)
    results = {}

    def add(prefix: str, names: list[str]) -> None:
        results[f"{prefix}exact"] = 100.0 * sum(exact_scores[name] for name in names) / len(names)
        results[f"{prefix}f1"] = 100.0 * sum(f1_scores[name] for name in names) / len(names)
        results[f"{prefix}total"] = len(names)

    add("", [question.question_id for question in questions])
    for prefix, answerable in (("HasAns_", True), ("NoAns_", False)):
        names = [question.question_id for question in questions
                 if bool(question.answer_texts) == answerable]
        if names:
            add(prefix, names)
    if null_odds is not None:
        for key, scores in (("exact", exact_scores), ("f1", f1_scores)):
            best, threshold = _best_threshold(questions, predictions, scores, null_odds)
            results[f"best_{key}"], results[f"best_{key}_thresh"] = best, threshold
    return results


def evaluate(questions: list[Question], predictions: dict[str, str], version_2: bool,
             null_odds: dict[str, float] | None = None) -> dict[str, float]:
    """The official metrics of the file's version."""
    if not questions:
        return {}
    return evaluate_v2(questions, predictions, null_odds) if version_2 \
        else evaluate_v1(questions, predictions)
