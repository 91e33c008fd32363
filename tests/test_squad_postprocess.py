"""SQuAD post-processing on hand-made windows and hand-computed logits."""

import json
import math

import numpy as np
import pytest

from input_pipeline.tasks.squad import Question
from input_pipeline.tasks.squad_postprocess import (NO_SPAN_ODDS, postprocess,
                                                    write_predictions)
from input_pipeline.tasks.squad_windows import Windows

CONTEXT = "alpha beta gamma delta epsilon"
WORDS = {"alpha": (0, 5), "beta": (6, 10), "gamma": (11, 16), "delta": (17, 22),
         "epsilon": (23, 30)}
T = 8  # [CLS] q q [SEP] w w w [SEP]: context at positions 4, 5, 6; 7 is [SEP]


def make_windows(rows: list[tuple[int, list[str], list[bool]]]) -> Windows:
    """Windows from (question number, three context words, their max-context flags)."""
    count = len(rows)
    offsets = np.full((count, T, 2), -1, np.int32)
    max_context = np.zeros((count, T), bool)
    for index, (_, words, flags) in enumerate(rows):
        offsets[index, 4:4 + len(words)] = [WORDS[word] for word in words]
        max_context[index, 4:4 + len(words)] = flags
    zeros = np.zeros((count, T), np.int32)
    return Windows(zeros, zeros, zeros + 1, np.zeros(count, np.int32),
                   np.zeros(count, np.int32), np.array([row[0] for row in rows]), offsets,
                   max_context)


def logits(values: dict[int, float]) -> np.ndarray:
    row = np.full(T, -10.0)
    for position, value in values.items():
        row[position] = value
    return row


QUESTIONS = [Question("q0", "which?", CONTEXT, ("gamma delta epsilon",), ()),
             Question("no_windows", "none?", "", (), (), True)]
# Window 0 holds alpha beta gamma, gamma not at its maximum context; window 1 gamma delta
# epsilon. Positions 1 (question) and 7 ([SEP]) get high logits that must never be used.
WINDOWS = make_windows([(0, ["alpha", "beta", "gamma"], [True, True, False]),
                        (0, ["gamma", "delta", "epsilon"], [True, True, True])])
START = np.stack([logits({0: 1.0, 1: 9.0, 4: 2.0, 6: 5.0}),
                  logits({0: 0.2, 4: 4.0, 5: 1.0})])
END = np.stack([logits({0: 1.5, 4: 0.5, 5: 3.0, 6: 3.2, 7: 10.0}),
                logits({0: 0.1, 4: -1.0, 5: 0.0, 6: 2.5})])


def test_best_spans_by_hand():
    """Spans by hand: gamma..epsilon 4.0 + 2.5 = 6.5 (window 1); alpha..gamma 2 + 3.2 = 5.2,
    alpha..beta 5.0 (window 0); gamma from window 0 (5 + 3.2 = 8.2) is not at its maximum
    context, the question token and [SEP] are outside the context."""
    predictions, nbest, null_odds = postprocess(QUESTIONS[:1], WINDOWS, START, END,
                                                version_2=False, n_best=3)
    assert predictions == {"q0": "gamma delta epsilon"} and null_odds == {}
    texts = [entry["text"] for entry in nbest["q0"]]
    assert texts == ["gamma delta epsilon", "alpha beta gamma", "alpha beta"]
    expected = np.exp([6.5, 5.2, 5.0]) / np.exp([6.5, 5.2, 5.0]).sum()
    # float64 logits (`logits` above): the same softmax to float64 steps (default 1e-7).
    np.testing.assert_allclose([entry["probability"] for entry in nbest["q0"]], expected)
    assert nbest["q0"][1]["start_logit"] == 2.0 and nbest["q0"][1]["end_logit"] == 3.2
    # Every candidate in score order: gamma delta (4.0), delta epsilon (3.5), gamma (3.0),
    # alpha (2.5), delta (1.0).
    _, nbest, _ = postprocess(QUESTIONS[:1], WINDOWS, START, END, False, n_best=20)
    assert [entry["text"] for entry in nbest["q0"]][3:8] == [
        "gamma delta", "delta epsilon", "gamma", "alpha", "delta"]


def test_max_answer_length_and_reversed_spans():
    predictions, nbest, _ = postprocess(QUESTIONS[:1], WINDOWS, START, END, False,
                                        max_answer_len=2)
    assert predictions["q0"] == "alpha beta"  # 5.0; the 3-token spans (6.5, 5.2) are too long
    assert "delta gamma" not in {entry["text"] for entry in nbest["q0"]}
    assert all(len(entry["text"].split()) <= 2 for entry in nbest["q0"])


def test_version_2_null_score_and_threshold():
    """Null score = min over windows of start[CLS] + end[CLS] = min(2.5, 0.3) = 0.3."""
    predictions, nbest, null_odds = postprocess(QUESTIONS, WINDOWS, START, END, True,
                                                n_best=3)
    assert null_odds["q0"] == pytest.approx(0.3 - 6.5)  # float64 sums: approx's default
    assert predictions["q0"] == "gamma delta epsilon"
    # The null entry ranks below the top three and is appended with window 1's [CLS] logits.
    assert nbest["q0"][-1] == dict(text="", probability=pytest.approx(
        math.exp(0.3) / sum(map(math.exp, [6.5, 5.2, 5.0, 0.3]))), start_logit=0.2,
        end_logit=0.1)
    predictions, _, _ = postprocess(QUESTIONS, WINDOWS, START, END, True, n_best=3,
                                    null_threshold=-6.3)
    assert predictions["q0"] == ""  # -6.2 > -6.3
    # A question with no windows still gets a prediction.
    assert predictions["no_windows"] == "" and null_odds["no_windows"] == NO_SPAN_ODDS


def test_duplicate_texts_are_dropped_in_order():
    question = Question("dup", "?", "ab ab", ("ab",), ((0, 2),))
    windows = make_windows([(0, ["alpha", "beta"], [True, True])])
    windows.token_offsets[0, 4:6] = [(0, 2), (3, 5)]
    start = logits({4: 1.0, 5: 1.0})[None]
    _, nbest, _ = postprocess([question], windows, start, start.copy(), False)
    # (4,4) "ab", (4,5) "ab ab", (5,5) "ab" again: dropped; all score 2, stable order.
    assert [entry["text"] for entry in nbest["dup"]][:2] == ["ab", "ab ab"]
    assert [entry["text"] for entry in nbest["dup"]].count("ab") == 1


def test_outputs_are_the_official_inputs(tmp_path):
    predictions, nbest, null_odds = postprocess(QUESTIONS, WINDOWS, START, END, True)
    write_predictions(str(tmp_path), predictions, nbest, null_odds)
    assert json.loads((tmp_path / "predictions.json").read_text()) == predictions
    # JSON carries float64 exactly (approx's default only for the form).
    assert json.loads((tmp_path / "null_odds.json").read_text()) == pytest.approx(null_odds)
    assert set(json.loads((tmp_path / "nbest_predictions.json").read_text())) == {
        "q0", "no_windows"}
    assert sorted(path.name for path in tmp_path.iterdir()) == [
        "nbest_predictions.json", "null_odds.json", "predictions.json"]


def test_padding_never_takes_an_n_best_slot():
    """Logits for the padded width or only up to the longest window give the same answers."""
    windows = make_windows([(0, ["alpha", "beta", "gamma"], [True, True, False]),
                            (0, ["gamma", "delta", "epsilon"], [True, True, True])])
    windows.input_mask[:, 7] = 0  # position 7 is padding here
    start, end = START.copy(), END.copy()
    start[:, 7] = end[:, 7] = 50.0
    full = postprocess(QUESTIONS, windows, start, end, True, n_best=1)
    trimmed = postprocess(QUESTIONS, windows, start[:, :7], end[:, :7], True, n_best=1)
    assert full == trimmed
    assert full[0]["q0"] == "gamma delta epsilon"  # n_best=1: 4 + 2.5 with both top picks
