"""`finetune qa` -> `predict` -> `evaluate qa` -> `convert` -> transformers, on a tiny made-up file."""

import json
import os

import numpy as np
import pytest
from finetune_helpers import tiny_model_directory
from interop_helpers import WORDS

from bert_jax.cli import main
from input_pipeline.tasks import squad, squad_metrics

ARGS = ["--batch-size", "16", "--max-seq-len", "32", "--doc-stride", "8",
        "--max-query-len", "6", "--learning-rate", "5e-3", "--no-progress"]
PLAIN = [word for word in WORDS if not word.startswith("##") and word not in ("paris", "?")]


def made_up_squad(count: int, seed: int, version_2: bool) -> dict:
    """Contexts of 10-40 words (several windows at length 32); the answer to "paris ?" is the
    word `paris` with the word after it; in v2.0 a third of the questions have no paris."""
    rng = np.random.default_rng(seed)
    paragraphs = []
    for index in range(count):
        words = list(rng.choice(PLAIN, size=int(rng.integers(10, 40))))
        impossible = version_2 and index % 3 == 0
        if not impossible:
            words.insert(int(rng.integers(0, len(words) - 1)), "paris")
        context = " ".join(words)
        qa = {"id": f"q{seed}_{index}", "question": "paris ?", "answers": []}
        if not impossible:
            start = context.index("paris")
            text = " ".join(context[start:].split()[:2])
            qa["answers"] = [{"text": text, "answer_start": start}]
        if version_2:
            qa["is_impossible"] = impossible
        paragraphs.append({"context": context, "qas": [qa]})
    return {"version": "v2.0" if version_2 else "1.1",
            "data": [{"title": "made up", "paragraphs": paragraphs}]}


def write(path, document) -> str:
    path.write_text(json.dumps(document), encoding="utf-8")
    return str(path)


@pytest.fixture(scope="module", params=[False, True], ids=["v1.1", "v2.0"])
def run(request, tmp_path_factory):
    version_2 = request.param
    root = tmp_path_factory.mktemp("qa")
    model = tiny_model_directory(root)
    train = write(root / "train.json", made_up_squad(64, 0, version_2))
    dev = write(root / "dev.json", made_up_squad(24, 1, version_2))
    workdir = str(root / "run")
    # Three epochs: v1.1 finds paris; v2.0's null odds then separate enough that the best
    # threshold lies between them (one epoch answered "" everywhere, at threshold 0).
    epochs = ["--epochs", "3"]
    assert main(["finetune", "qa", "--model", model, "--train", train, "--eval", dev,
                 "--workdir", workdir, *epochs, *ARGS]) == 0
    return dict(root=root, train=train, dev=dev, workdir=workdir, version_2=version_2)


def test_run_writes_the_official_files_and_metrics(run):
    workdir, dev = run["workdir"], squad.read_squad(run["dev"])
    with open(os.path.join(workdir, "eval_results.json")) as file:
        results = json.load(file)
    with open(os.path.join(workdir, "predictions.json")) as file:
        predictions = json.load(file)
    assert set(predictions) == {question.question_id for question in dev.questions}
    with open(os.path.join(workdir, "nbest_predictions.json")) as file:
        nbest = json.load(file)
    # A float64 softmax over at most 20 candidates: 1 to float64 steps (1e-6 is far off).
    assert all(abs(sum(entry["probability"] for entry in entries) - 1) < 1e-6
               for entries in nbest.values())
    null_odds = None
    if run["version_2"]:
        with open(os.path.join(workdir, "null_odds.json")) as file:
            null_odds = json.load(file)
    else:
        assert not os.path.exists(os.path.join(workdir, "null_odds.json"))
    final = results["final"]["metrics"]
    # The metrics are the official ones of the files written beside them.
    expected = squad_metrics.evaluate(dev.questions, predictions, run["version_2"], null_odds)
    # The same answers scored by the same float64 arithmetic (tolerances.py).
    assert {key: final[key] for key in expected} == pytest.approx(expected)
    names = ({"exact", "f1", "HasAns_exact", "NoAns_exact", "best_f1", "best_f1_thresh"}
             if run["version_2"] else {"exact_match", "f1"})
    assert names <= set(final)
    if not run["version_2"]:  # the tiny model learns to find "paris" and the word after it
        assert results["best"]["metrics"]["f1"] > 60


def _predict(run, tmp_path, name: str, *flags) -> dict:
    """`bert-jax predict` of best/ on the dev questions without their answers."""
    questions = json.loads(open(run["dev"]).read())
    for paragraph in questions["data"][0]["paragraphs"]:  # questions to answer: no answers
        for qa in paragraph["qas"]:
            del qa["answers"]
            qa.pop("is_impossible", None)
    output = tmp_path / name / "answers.json"
    output.parent.mkdir()
    assert main(["predict", "--model", os.path.join(run["workdir"], "best"), "--input",
                 write(tmp_path / "q.json", questions), "--output", str(output), *flags]) == 0
    assert os.path.exists(output.parent / "nbest_predictions.json")
    return json.loads(output.read_text())


def _results(run) -> dict:
    with open(os.path.join(run["workdir"], "eval_results.json")) as file:
        return json.load(file)


def test_predict_and_evaluate_reproduce_the_run(run, tmp_path):
    best = os.path.join(run["workdir"], "best")
    answers = _predict(run, tmp_path, "default")
    import bert_jax  # the Python API answers the same questions alike

    dev_questions = squad.read_squad(run["dev"]).questions
    assert bert_jax.load(best).predict(
        [{"question": q.question, "context": q.context} for q in dev_questions]) == [
        answers[q.question_id] for q in dev_questions]
    # The run's evaluation answered at the null threshold 0 (v2.0; best/ records its own).
    at_zero = ["--null-threshold", "0"] if run["version_2"] else []
    if at_zero:
        answers = _predict(run, tmp_path, "zero", *at_zero)
    metrics = squad_metrics.evaluate(dev_questions, answers, run["version_2"])
    results = _results(run)
    # The same answers scored by the same float64 arithmetic (tolerances.py), here and below.
    assert metrics["f1"] == pytest.approx(results["best"]["metrics"]["f1"])
    metrics_path = tmp_path / "metrics.json"
    assert main(["evaluate", "qa", "--model", best, "--data", run["dev"],
                 "--output", str(metrics_path), *at_zero]) == 0
    evaluated = json.loads(metrics_path.read_text())["metrics"]
    assert evaluated["f1"] == pytest.approx(results["best"]["metrics"]["f1"])


def test_v2_run_records_its_best_f1_threshold(run):
    if not run["version_2"]:
        pytest.skip("v1.1 has no null threshold")
    results = _results(run)
    tuned = {name: results[name]["metrics"]["best_f1_thresh"] for name in ("best", "final")}
    assert results["tuned_settings"] == {name: {"null_threshold": value}
                                         for name, value in tuned.items()}
    for name, directory in (("best", "best"), ("final", "")):  # best/, and the run's weights
        with open(os.path.join(run["workdir"], directory, "task.json")) as file:
            assert json.load(file)["settings"]["null_threshold"] == tuned[name]


def test_v2_predict_uses_the_recorded_threshold_unless_told(run, tmp_path):
    if not run["version_2"]:
        pytest.skip("v1.1 has no null threshold")
    spans = _predict(run, tmp_path, "never", "--null-threshold", "1e9")  # the best spans
    with open(tmp_path / "never" / "null_odds.json") as file:  # best/'s, beside them
        null_odds = json.load(file)
    # A threshold that splits the questions, recorded as a run records its own.
    threshold = float(np.median(list(null_odds.values())))
    best = os.path.join(run["workdir"], "best")
    with open(os.path.join(best, "task.json")) as file:
        info = json.load(file)
    recorded = info["settings"]["null_threshold"]
    try:
        info["settings"]["null_threshold"] = threshold
        with open(os.path.join(best, "task.json"), "w") as file:
            json.dump(info, file)
        answers = _predict(run, tmp_path, "recorded")
    finally:
        info["settings"]["null_threshold"] = recorded
        with open(os.path.join(best, "task.json"), "w") as file:
            json.dump(info, file)
    expected = {name: "" if odds > threshold else spans[name] for name, odds in null_odds.items()}
    assert answers == expected
    assert 0 < sum(answer == "" for answer in answers.values()) < len(answers)


def test_bad_input_names_the_question_and_writes_nothing(tmp_path, capsys):
    model = tiny_model_directory(tmp_path)
    document = made_up_squad(4, 0, False)
    del document["data"][0]["paragraphs"][2]["qas"][0]["question"]
    workdir = tmp_path / "run"
    assert main(["finetune", "qa", "--model", model, "--train", write(tmp_path / "bad.json",
                                                                      document),
                 "--workdir", str(workdir), "--epochs", "1", *ARGS]) == 2
    assert "question id 'q0_2': missing key 'question'" in capsys.readouterr().err
    assert not workdir.exists()
