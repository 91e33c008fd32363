"""SQuAD metrics against an independent re-statement of the official evaluation scripts.

`official_v1` and `official_v2` below restate `evaluate-v1.1.py` and `evaluate-v2.0.py`
(rajpurkar/SQuAD-explorer) line by line over the raw JSON, so a slip in
`squad_metrics.py` (normalisation order, empty answers, thresholds) shows up as a difference.
"""

import collections
import re
import string

import pytest

from input_pipeline.tasks.squad import parse_squad
from input_pipeline.tasks.squad_metrics import evaluate, normalize_answer


def _normalize(s):
    def remove_articles(text):
        return re.sub(r"\b(a|an|the)\b", " ", text)

    def white_space_fix(text):
        return " ".join(text.split())

    def remove_punc(text):
        exclude = set(string.punctuation)
        return "".join(ch for ch in text if ch not in exclude)

    return white_space_fix(remove_articles(remove_punc(s.lower())))


def official_v1(dataset, predictions):
    def f1_score(prediction, ground_truth):
        prediction_tokens = _normalize(prediction).split()
        ground_truth_tokens = _normalize(ground_truth).split()
        common = collections.Counter(prediction_tokens) & collections.Counter(
            ground_truth_tokens)
        num_same = sum(common.values())
        if num_same == 0:
            return 0
        precision = 1.0 * num_same / len(prediction_tokens)
        recall = 1.0 * num_same / len(ground_truth_tokens)
        return (2 * precision * recall) / (precision + recall)

    f1 = exact_match = total = 0
    for article in dataset:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                total += 1
                if qa["id"] not in predictions:
                    continue
                ground_truths = [answer["text"] for answer in qa["answers"]]
                prediction = predictions[qa["id"]]
                exact_match += max(_normalize(prediction) == _normalize(truth)
                                   for truth in ground_truths)
                f1 += max(f1_score(prediction, truth) for truth in ground_truths)
    return {"exact_match": 100.0 * exact_match / total, "f1": 100.0 * f1 / total}


def official_v2(dataset, preds, na_probs=None, na_prob_thresh=1.0):
    def compute_f1(a_gold, a_pred):
        gold_toks = _normalize(a_gold).split() if a_gold else []
        pred_toks = _normalize(a_pred).split() if a_pred else []
        common = collections.Counter(gold_toks) & collections.Counter(pred_toks)
        num_same = sum(common.values())
        if len(gold_toks) == 0 or len(pred_toks) == 0:
            return int(gold_toks == pred_toks)
        if num_same == 0:
            return 0
        precision = 1.0 * num_same / len(pred_toks)
        recall = 1.0 * num_same / len(gold_toks)
        return (2 * precision * recall) / (precision + recall)

    qid_to_has_ans = {qa["id"]: bool(qa["answers"]) for article in dataset
                      for p in article["paragraphs"] for qa in p["qas"]}
    has_ans_qids = [k for k, v in qid_to_has_ans.items() if v]
    no_ans_qids = [k for k, v in qid_to_has_ans.items() if not v]
    if na_probs is None:
        na_probs = {k: 0.0 for k in preds}
    exact_scores, f1_scores = {}, {}
    for article in dataset:
        for p in article["paragraphs"]:
            for qa in p["qas"]:
                gold_answers = [a["text"] for a in qa["answers"] if _normalize(a["text"])]
                if not gold_answers:
                    gold_answers = [""]
                a_pred = preds[qa["id"]]
                exact_scores[qa["id"]] = max(int(_normalize(a) == _normalize(a_pred))
                                             for a in gold_answers)
                f1_scores[qa["id"]] = max(compute_f1(a, a_pred) for a in gold_answers)

    def apply_no_ans_threshold(scores):
        return {qid: float(not qid_to_has_ans[qid]) if na_probs[qid] > na_prob_thresh else s
                for qid, s in scores.items()}

    def make_eval_dict(exact, f1, qid_list=None):
        qid_list = qid_list if qid_list else list(exact)
        total = len(qid_list)
        return {"exact": 100.0 * sum(exact[k] for k in qid_list) / total,
                "f1": 100.0 * sum(f1[k] for k in qid_list) / total, "total": total}

    def find_best_thresh(scores):
        num_no_ans = sum(1 for k in qid_to_has_ans if not qid_to_has_ans[k])
        cur_score = best_score = num_no_ans
        best_thresh = 0.0
        for qid in sorted(na_probs, key=lambda k: na_probs[k]):
            if qid not in scores:
                continue
            if qid_to_has_ans[qid]:
                diff = scores[qid]
            else:
                diff = -1 if preds[qid] else 0
            cur_score += diff
            if cur_score > best_score:
                best_score = cur_score
                best_thresh = na_probs[qid]
        return 100.0 * best_score / len(scores), best_thresh

    exact_thresh = apply_no_ans_threshold(exact_scores)
    f1_thresh = apply_no_ans_threshold(f1_scores)
    out_eval = make_eval_dict(exact_thresh, f1_thresh)
    for prefix, qids in (("HasAns", has_ans_qids), ("NoAns", no_ans_qids)):
        if qids:
            for key, value in make_eval_dict(exact_thresh, f1_thresh, qid_list=qids).items():
                out_eval[f"{prefix}_{key}"] = value
    best_exact, exact_thresh_value = find_best_thresh(exact_scores)
    best_f1, f1_thresh_value = find_best_thresh(f1_scores)
    out_eval.update(best_exact=best_exact, best_exact_thresh=exact_thresh_value,
                    best_f1=best_f1, best_f1_thresh=f1_thresh_value)
    return out_eval


# id -> (gold answer texts, prediction): the cases the official rules treat specially.
CASES = {
    "articles": (["the Normans"], "Normans"),
    "punctuation": (["Anglo-Norman"], "anglonorman!"),
    "several_golds": (["1066", "in 1066", "the year 1066"], "year 1066"),
    "partial": (["the Anglo-Norman language"], "Norman language of England"),
    "wrong": (["England"], "France"),
    "only_article_gold": (["the", "England"], "an"),
    "whitespace": (["Norman  conquest"], "  norman conquest "),
    "repeated_tokens": (["Norman Norman"], "Norman"),
    "unanswerable_right": ([], ""),
    "unanswerable_wrong": ([], "1066"),
    "answerable_predicted_empty": (["England"], ""),
    "unanswerable_2": ([], ""),
}


def dataset(version_2: bool, cases=CASES):
    context = " | ".join(text for golds, _ in cases.values() for text in golds)
    qas = []
    for name, (golds, _) in cases.items():
        qa = {"id": name, "question": f"question {name}?",
              "answers": [{"text": text, "answer_start": context.index(text)}
                          for text in golds]}
        if version_2:
            qa["is_impossible"] = not golds
        qas.append(qa)
    return [{"title": "t", "paragraphs": [{"context": context, "qas": qas}]}]


def questions_of(data, version_2):
    squad = parse_squad({"data": data}, "hand-made.json")
    assert squad.version_2 == version_2
    return squad.questions


def test_normalisation_matches_the_official_order():
    for text in ["The Cat's  hat!", "an apple, a pear", "the-end", "Anthem", "A.B.", "théâtre"]:
        assert normalize_answer(text) == _normalize(text)


def test_v1_equals_the_official_script_with_a_missing_prediction():
    answerable = {name: case for name, case in CASES.items() if case[0]}
    data = dataset(False, answerable)
    predictions = {name: prediction for name, (_, prediction) in answerable.items()}
    del predictions["wrong"], predictions["partial"]  # missing: they score 0
    expected = official_v1(data, predictions)
    ours = evaluate(questions_of(data, False), predictions, version_2=False)
    # Percentages of counts in float64, summed in another order than the official script's:
    # float64 steps of 100 (1.4e-14); 1e-9 is far above them (tolerances.py).
    assert ours == pytest.approx(expected, abs=1e-9)
    assert set(ours) == {"exact_match", "f1"}
    # 5 exact of 9: articles, punctuation, several_golds ("year 1066" = "the year 1066"
    # without articles), only_article_gold ("an" and "the" both normalise to ""), whitespace.
    assert ours["exact_match"] == pytest.approx(100 * 5 / 9)  # float64 arithmetic


def test_v2_equals_the_official_script_with_null_odds():
    data = dataset(True)
    predictions = {name: prediction for name, (_, prediction) in CASES.items()}
    # Null odds not in the order of the truth, so the best threshold lies inside the range.
    null_odds = {name: float(number % 5) - 1.5 + 0.1 * number
                 for number, name in enumerate(CASES)}
    expected = official_v2(data, predictions, null_odds, na_prob_thresh=1e9)
    ours = evaluate(questions_of(data, True), predictions, version_2=True, null_odds=null_odds)
    assert ours == pytest.approx(expected, abs=1e-9)
    assert {"exact", "f1", "HasAns_exact", "HasAns_f1", "NoAns_exact", "NoAns_f1",
            "best_exact", "best_exact_thresh", "best_f1", "best_f1_thresh"} <= set(ours)
    assert ours["NoAns_total"] == 3 and ours["NoAns_exact"] == pytest.approx(200 / 3)  # float64
    assert ours["best_f1"] >= ours["f1"] and ours["best_exact"] >= ours["exact"]
    # Without null odds: the official script run without --na-prob-file.
    expected = official_v2(data, predictions)
    ours = evaluate(questions_of(data, True), predictions, version_2=True)
    assert ours == pytest.approx({key: value for key, value in expected.items()
                                  if not key.startswith("best")}, abs=1e-9)


def test_v2_missing_prediction_scores_zero_where_the_official_script_stops():
    data = dataset(True)
    predictions = {name: prediction for name, (_, prediction) in CASES.items()}
    with pytest.raises(KeyError):
        official_v2(data, {k: v for k, v in predictions.items() if k != "unanswerable_right"})
    complete = evaluate(questions_of(data, True), predictions, version_2=True)
    del predictions["unanswerable_right"]
    ours = evaluate(questions_of(data, True), predictions, version_2=True,
                    null_odds={name: 0.0 for name in predictions})
    assert ours["total"] == len(CASES)
    # Percentages in float64 on both sides (tolerances.py), here and below.
    assert ours["exact"] == pytest.approx(complete["exact"] - 100 / len(CASES))
    assert ours["NoAns_exact"] == pytest.approx(complete["NoAns_exact"] - 100 / 3)
    # The missing question is never right at any threshold: the official best over the
    # other questions, over one more question.
    others = dataset(True, {k: v for k, v in CASES.items() if k != "unanswerable_right"})
    expected = official_v2(others, predictions, {name: 0.0 for name in predictions}, 1e9)
    for key in ("best_exact", "best_f1"):
        assert ours[key] == pytest.approx(expected[key] * (len(CASES) - 1) / len(CASES))


@pytest.mark.parametrize("cases, null_odds", [
    # Every question unanswerable, every prediction an answer, every null odd negative: the
    # official script says best_f1 100 "at 0.0", a threshold that answers both (issue 51).
    ({"impossible_1": ([], "1066"), "impossible_2": ([], "England")},
     {"impossible_1": -3.0, "impossible_2": -1.0}),
    # Every question unanswerable and every null odd positive: 0.0 already answers nothing.
    ({"impossible_1": ([], "1066"), "impossible_2": ([], "England")},
     {"impossible_1": 2.0, "impossible_2": 0.5}),
    ({name: case for name, case in CASES.items()},
     {name: float(number % 5) - 1.5 + 0.1 * number for number, name in enumerate(CASES)}),
])
def test_v2_best_threshold_scores_its_best_under_the_official_rule(cases, null_odds):
    """The property the threshold is for: the official script, run with --na-prob-thresh at
    the reported best threshold, scores the reported best."""
    data = dataset(True, cases)
    predictions = {name: prediction for name, (_, prediction) in cases.items()}
    ours = evaluate(questions_of(data, True), predictions, version_2=True, null_odds=null_odds)
    for key in ("exact", "f1"):
        at_threshold = official_v2(data, predictions, null_odds, ours[f"best_{key}_thresh"])
        assert at_threshold[key] == pytest.approx(ours[f"best_{key}"], abs=1e-9)  # float64
    official = official_v2(data, predictions, null_odds, na_prob_thresh=1e9)
    assert ours["best_f1"] == pytest.approx(official["best_f1"], abs=1e-9)
    if official["best_f1_thresh"] != 0.0 or min(null_odds.values()) > 0:
        assert ours["best_f1_thresh"] == official["best_f1_thresh"]  # where it is right
