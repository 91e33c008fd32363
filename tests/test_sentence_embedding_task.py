"""`finetune sentence-embedding`'s task: pair files, its train step on a mesh, STS metrics."""

import json

import jax
import numpy as np
import pytest
from interop_helpers import write_vocab
from test_training_support import tiny_run_config
from tolerances import ENCODER_STEPS, assert_close

from bert_jax import sharding
from bert_jax.errors import UserError
from bert_jax.tasks import task_module
from bert_jax.tasks.sentence_embedding import SentenceEmbeddingTask
from bert_jax.training import train_step
from input_pipeline.tokenization import load_tokenizer

STS_ROWS = [("main-captions", "MSRvid", "2012test", "0001", "5.000", "the man went to store .",
             "the man went to store ."),
            ("main-captions", "MSRvid", "2012test", "0002", "1.5", "the dog sat on mat",
             "he bought a gallon of milk", "extra", "source"),
            ("main-news", "x", "2013", "0003", "3.25", "paris city", "london city")]
NLI_ROWS = [dict(premise="the man went to store .", hypothesis="he bought milk",
                 label="entailment"),
            dict(premise="the man went to store .", hypothesis="the cat sat on mat",
                 label="contradiction"),
            dict(premise="paris city", hypothesis="london city", label="neutral"),
            dict(premise="the dog sat on mat", hypothesis="it was happy", label="entailment")]


@pytest.fixture
def files(tmp_path):
    sts = tmp_path / "sts.tsv"
    sts.write_text("".join("\t".join(row) + "\n" for row in STS_ROWS), encoding="utf-8")
    nli = tmp_path / "nli.jsonl"
    nli.write_text("".join(json.dumps(row) + "\n" for row in NLI_ROWS), encoding="utf-8")
    return str(sts), str(nli), load_tokenizer(write_vocab(tmp_path))


def test_pair_files_become_features_for_each_loss(files):
    sts, nli, tokenizer = files
    examples = SentenceEmbeddingTask("cosine").read_examples(sts, tokenizer, 16)
    # score / 5 in float32: one rounding, at most half a step (6e-8) relative, inside
    # assert_allclose's default 1e-7.
    np.testing.assert_allclose(examples.features["labels"], [1.0, 0.3, 0.65])
    np.testing.assert_array_equal(examples.gold, [5.0, 1.5, 3.25])
    features = examples.features
    assert features["input_ids_a"].shape == features["input_ids_b"].shape
    np.testing.assert_array_equal(features["input_mask"], np.maximum(
        features["input_mask_a"], features["input_mask_b"]))
    assert examples.rows[2] == ("paris city", "london city")
    mnrl = SentenceEmbeddingTask("mnrl", hard_negatives=True)
    examples = mnrl.read_examples(nli, tokenizer, 16)
    assert examples.rows == [("the man went to store .", "he bought milk", "the cat sat on mat")]
    assert mnrl.read_examples(sts, tokenizer, 16).features["weights"].sum() == 0  # eval only
    softmax = SentenceEmbeddingTask("softmax", label_names=("contradiction", "entailment"))
    with pytest.raises(UserError, match=r"nli.jsonl: label\(s\) \['neutral'\] were not"):
        softmax.read_examples(nli, tokenizer, 16)
    with pytest.raises(UserError, match="--loss cosent trains on scored pairs"):
        SentenceEmbeddingTask("cosent").read_examples(nli, tokenizer, 16)


def test_evaluation_is_scipy_correlation_of_cosines():
    from scipy import stats

    task = SentenceEmbeddingTask("cosent")
    first = np.array([[1.0, 0.0], [1.0, 1.0], [0.0, 1.0], [1.0, 0.2]])
    second = np.array([[1.0, 0.1], [1.0, 0.0], [1.0, 0.0], [0.5, 0.5]])
    predictions = task.predictions((np.stack([first, second]), None), {})
    cosines = [a @ b / np.linalg.norm(a) / np.linalg.norm(b) for a, b in zip(first, second)]
    # float64 inputs on both sides: equal to float64 steps (the default 1e-7 relative).
    np.testing.assert_allclose(predictions["cosine"], cosines)
    gold = np.array([4.0, 2.5, 0.0, 3.0])
    metrics = task.evaluate(predictions, gold)
    assert metrics["spearman"] == pytest.approx(stats.spearmanr(cosines, gold).statistic)
    assert metrics["pearson"] == pytest.approx(stats.pearsonr(cosines, gold).statistic)
    with pytest.raises(UserError, match="needs scored pairs"):
        task.evaluate(predictions, None)


def _one_step(task, batch, devices):
    config = tiny_run_config(batch_size=8)
    config.model.update(dropout_rate=0.0, attention_dropout_rate=0.0)
    mesh = sharding.make_mesh(-1, 1, 1, devices=devices)
    bundle = train_step.build_train_step(config, mesh, task=task)
    state = bundle.init_state(jax.random.PRNGKey(0))
    placed = jax.device_put(batch, bundle.batch_shardings)
    state, metrics = bundle.train_step(state, placed, jax.random.PRNGKey(1))
    return jax.device_get(metrics), jax.device_get(state.params)


def test_an_mnrl_train_step_on_eight_devices_equals_one_device():
    """The global batch's negatives span every device: sharding changes nothing."""
    task = SentenceEmbeddingTask("mnrl", hard_negatives=True)
    rng = np.random.default_rng(0)
    batch = {}
    for side in task.sides:
        lengths = rng.integers(3, 17, size=8)
        batch[f"input_mask_{side}"] = (np.arange(16)[None] < lengths[:, None]).astype(np.int32)
        batch[f"input_ids_{side}"] = rng.integers(5, 60, (8, 16)).astype(np.int32) * batch[
            f"input_mask_{side}"]
    batch["input_mask"] = np.max([batch[f"input_mask_{side}"] for side in task.sides], axis=0)
    batch["labels"] = rng.integers(0, 3, 8).astype(np.float32)
    batch["weights"] = np.array([1] * 7 + [0], np.float32)  # a filler row
    one_metrics, one_params = _one_step(task, batch, jax.devices()[:1])
    eight_metrics, eight_params = _one_step(task, batch, jax.devices()[:8])
    assert np.isfinite(one_metrics["loss"]) and one_metrics["loss"] > 0
    # Eight devices split the same float32 sums otherwise (tolerances.ENCODER_STEPS of each
    # value's scale): the loss, the gradient norm, and the parameters one update moved,
    # each rounded at its own magnitude, the largest parameter's at most.
    assert_close(eight_metrics["loss"], one_metrics["loss"], ENCODER_STEPS)
    assert_close(eight_metrics["grad_norm"], one_metrics["grad_norm"], ENCODER_STEPS)
    largest = max(np.abs(leaf).max() for leaf in jax.tree.leaves(one_params))
    jax.tree.map(lambda a, b: assert_close(a, b, ENCODER_STEPS, scale=largest), eight_params,
                 one_params)


def test_the_task_is_registered():
    assert task_module("sentence-embedding").TASK is SentenceEmbeddingTask


@pytest.mark.parametrize("loss, has_loss", [("cosent", True), ("mnrl", False)])
def test_finetune_sentence_embedding_end_to_end_scores_sts(tmp_path, files, loss, has_loss):
    """The command trains, evaluates on an STS file every epoch and keeps best/. An mnrl model
    has no loss on an STS file (no pair there carries its objective): none is reported,
    rather than a 0 that reads as a perfect loss."""
    from finetune_helpers import tiny_model_directory

    from bert_jax.cli import main

    sts, nli, _ = files
    workdir = tmp_path / "run"
    assert main(["finetune", "sentence-embedding", "--loss", loss, "--model",
                 tiny_model_directory(tmp_path), "--train", sts if loss == "cosent" else nli,
                 "--eval", sts, "--workdir", str(workdir), "--epochs", "2", "--batch-size", "8",
                 "--max-seq-len", "16", "--no-progress"]) == 0
    results = json.loads((workdir / "eval_results.json").read_text())
    for metrics in (results["final"]["metrics"], results["best"]["metrics"]):
        assert {"spearman", "pearson"} <= set(metrics)
        assert ("loss" in metrics) == has_loss
    assert (workdir / "best" / "task.json").exists()
