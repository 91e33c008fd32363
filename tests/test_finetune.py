"""`finetune` -> `predict` -> `evaluate` -> `convert` -> transformers, end to end on made-up data."""

import json
import os

import numpy as np
import pytest
from finetune_helpers import made_up_sentences, tiny_model_directory, write_tsv
from tolerances import ENCODER_STEPS, assert_close, float32_steps

from bert_jax.cli import main

ARGS = ["--epochs", "2", "--batch-size", "16", "--max-seq-len", "32", "--learning-rate", "2e-3",
        "--no-progress"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("finetune")
    model = tiny_model_directory(root)
    train = write_tsv(root / "train.tsv", made_up_sentences(96, seed=0))
    # The model records the text column it trained on (`sentence`) and reads every later
    # file by it (tests/test_recorded_columns.py): the dev file names it alike.
    dev = write_tsv(root / "dev.tsv", made_up_sentences(40, seed=1))
    workdir = str(root / "run")
    assert main(["finetune", "classify", "--model", model, "--train", train, "--eval", dev,
                 "--workdir", workdir, *ARGS]) == 0
    return dict(root=root, model=model, train=train, dev=dev, workdir=workdir)


def test_finetune_writes_results_best_model_and_predictions(run):
    workdir = run["workdir"]
    with open(os.path.join(workdir, "eval_results.json")) as file:
        results = json.load(file)
    assert results["step"] == 12 and len(results["history"]) == 2  # 6 steps an epoch
    for key in ("accuracy", "f1", "matthews_correlation", "loss"):
        assert key in results["final"]["metrics"] and key in results["best"]["metrics"]
    assert results["best"]["metrics"]["accuracy"] >= results["final"]["metrics"]["accuracy"]
    assert results["settings"]["learning_rate"] == 2e-3
    with open(os.path.join(workdir, "best", "task.json")) as file:
        assert json.load(file)["settings"]["label_names"] == ["neg", "pos"]
    with open(os.path.join(workdir, "eval_predictions.jsonl")) as file:
        assert len(file.readlines()) == 40


def _direct_logits(model_directory, texts):
    """Our model's logits called directly (no batching, no bucketing)."""
    from bert_jax.interop import model_source
    from bert_jax.models.bert_heads import BertForSequenceClassification
    from input_pipeline.tokenization import load_tokenizer

    loaded = model_source.resolve(model_directory).load()
    config, params, vocab = loaded.config, loaded.params, loaded.source.vocab_path
    batch = load_tokenizer(vocab).encode_for_model(texts, 32)
    logits = BertForSequenceClassification(config, 2).apply(
        {"params": params}, batch["input_ids"], batch["segment_ids"], batch["input_mask"])
    return batch, np.asarray(logits)


def test_predict_writes_labels_in_input_order_as_the_model_computes_them(run, tmp_path):
    texts = ["the cat sat on the mat", "he was happy", "a dog went home", "happy happy city"]
    source = tmp_path / "texts.txt"
    source.write_text("\n".join(texts) + "\n", encoding="utf-8")
    output = tmp_path / "predictions.jsonl"
    best = os.path.join(run["workdir"], "best")
    assert main(["predict", "--model", best, "--input", str(source), "--output",
                 str(output)]) == 0
    records = [json.loads(line) for line in output.read_text().splitlines()]
    _, logits = _direct_logits(best, texts)
    probabilities = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    assert [record["texts"] for record in records] == [[text] for text in texts]
    assert [record["label"] for record in records] == [["neg", "pos"][i] for i in
                                                       logits.argmax(-1)]
    # predict batches and pads otherwise than the direct call (ENCODER_STEPS of the
    # probabilities' scale, 1) and writes 6 decimals (5e-7 more).
    np.testing.assert_allclose([[r["probabilities"]["neg"], r["probabilities"]["pos"]]
                                for r in records], probabilities,
                               atol=float32_steps(ENCODER_STEPS, 1.0) + 5e-7, rtol=0)
    tsv = tmp_path / "predictions.tsv"
    assert main(["predict", "--model", best, "--input", run["dev"], "--output", str(tsv)]) == 0
    lines = tsv.read_text().splitlines()
    # The input's own columns, then the prediction (the input already has a `label`).
    assert lines[0] == "label\tsentence\tpredicted_label" and len(lines) == 41
    dev = open(run["dev"], encoding="utf-8").read().splitlines()
    assert [line.rsplit("\t", 1)[0] for line in lines[1:]] == dev[1:]
    # A CSV with an id, for a model trained with `--text-columns review` (its task.json says
    # so): `predict --input my.csv --output x.tsv` keeps the id and `review`.
    import shutil

    reviewer = tmp_path / "reviewer"
    shutil.copytree(best, reviewer)
    info = json.loads((reviewer / "task.json").read_text())
    info["settings"]["columns"]["text_columns"] = ["review"]
    (reviewer / "task.json").write_text(json.dumps(info))
    reviews = tmp_path / "my.csv"
    reviews.write_text('id,review\n7,"the cat sat, happily"\n9,a dog went home\n')
    assert main(["predict", "--model", str(reviewer), "--input", str(reviews), "--output",
                 str(tsv)]) == 0
    rows = [line.split("\t") for line in tsv.read_text().splitlines()]
    assert rows[0] == ["id", "review", "label"]
    assert [row[:2] for row in rows[1:]] == [["7", "the cat sat, happily"],
                                             ["9", "a dog went home"]]
    assert {row[2] for row in rows[1:]} <= {"neg", "pos"}


def test_python_api_predict_equals_the_predict_command(run, tmp_path):
    import bert_jax

    inputs = ["the cat sat on the mat", ("he was happy", "a dog went home"), "happy city"]
    source = tmp_path / "texts.txt"
    source.write_text("".join((text if isinstance(text, str) else "\t".join(text)) + "\n"
                              for text in inputs))  # a pair as `A<TAB>B`
    output = tmp_path / "predictions.jsonl"
    best = os.path.join(run["workdir"], "best")
    assert main(["predict", "--model", best, "--input", str(source), "--output",
                 str(output)]) == 0
    records = [json.loads(line) for line in output.read_text().splitlines()]
    model = bert_jax.load(best)
    values = model.predict(inputs)
    assert [record["texts"] for record in records] == [[t] if isinstance(t, str) else list(t)
                                                       for t in inputs]
    assert values == [{key: value for key, value in record.items() if key != "texts"}
                      for record in records]
    assert {value["label"] for value in values} <= {"neg", "pos"}
    assert model.predict(inputs[1]) == values[1]  # one input: its own value, not a list


def test_evaluate_reproduces_the_best_evaluation(run, tmp_path):
    output = tmp_path / "metrics.json"
    best = os.path.join(run["workdir"], "best")
    assert main(["evaluate", "classify", "--model", best, "--data", run["dev"],
                 "--output", str(output)]) == 0
    metrics = json.loads(output.read_text())["metrics"]
    with open(os.path.join(run["workdir"], "eval_results.json")) as file:
        expected = json.load(file)["best"]["metrics"]
    for name in ("accuracy", "f1", "matthews_correlation"):
        assert metrics[name] == expected[name], name
    # The best model saved and read back, the same file: its float32 loss sums, perhaps
    # blocked otherwise (ENCODER_STEPS of the loss).
    assert_close(metrics["loss"], expected["loss"], ENCODER_STEPS)


def test_hf_export_loads_in_transformers_with_our_logits_and_labels(run, tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from interop_helpers import torch_inputs

    best = os.path.join(run["workdir"], "best")
    exported = str(tmp_path / "hf")
    assert main(["convert", best, exported, "--to", "hf"]) == 0
    model, info = transformers.AutoModelForSequenceClassification.from_pretrained(
        exported, output_loading_info=True)
    assert type(model).__name__ == "BertForSequenceClassification"
    assert not info["missing_keys"] and not info["unexpected_keys"]
    assert model.config.id2label == {0: "neg", 1: "pos"}
    texts = ["the cat sat on the mat", ("he was happy", "a dog went home")]
    batch, ours = _direct_logits(best, texts)
    with torch.no_grad():
        theirs = model.eval()(**torch_inputs(batch)).logits.numpy()
    assert_close(ours, theirs, ENCODER_STEPS)  # two implementations (tolerances.py)
    # ... and back: the HF directory imports with its head and labels and predicts the same.
    source = tmp_path / "texts.txt"
    source.write_text("the cat sat on the mat\nhe was happy\n", encoding="utf-8")
    for model_directory, name in ((best, "ours.jsonl"), (exported, "theirs.jsonl")):
        assert main(["predict", "--model", model_directory, "--input", str(source),
                     "--output", str(tmp_path / name)]) == 0
    ours_out = [json.loads(line) for line in (tmp_path / "ours.jsonl").read_text().splitlines()]
    theirs_out = [json.loads(line) for line in
                  (tmp_path / "theirs.jsonl").read_text().splitlines()]
    assert [r["label"] for r in ours_out] == [r["label"] for r in theirs_out]
    for mine, other in zip(ours_out, theirs_out):
        for label in ("neg", "pos"):
            # The same weights read from two formats (ENCODER_STEPS of 1), each written with
            # 6 decimals (1e-6 between two roundings).
            assert abs(mine["probabilities"][label] - other["probabilities"][label]) <= (
                float32_steps(ENCODER_STEPS, 1.0) + 1e-6)
