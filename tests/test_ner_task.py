"""The `ner` task: its loss against numpy, and finetune ner -> predict -> evaluate end to end."""

import json
import os

import jax.numpy as jnp
import numpy as np
import pytest
from tolerances import ENCODER_STEPS, assert_close

from bert_jax import cli
from bert_jax.interop import model_source
from bert_jax.tasks.entity_metrics import entity_scores
from bert_jax.tasks.token_classification import NerSettings, TokenClassificationTask
from input_pipeline.tasks.conll import read_conll
from tests.finetune_helpers import tiny_model_directory

# Made-up NER: "paris" (optionally "paris city") is a place, "runs" (two pieces: run ##s)
# a person; everything else is O. Learnable by a tiny model from the word pieces alone.
FILLER = "the man went to store he bought a gallon of milk dog cat sat on mat".split()


def made_up_conll(path, count: int, seed: int) -> str:
    rng = np.random.default_rng(seed)
    lines = ["-DOCSTART- -X- O", ""]
    for _ in range(count):
        tokens = [(word, "O") for word in rng.choice(FILLER, size=int(rng.integers(2, 7)))]
        entity = [[("paris", "B-LOC")], [("paris", "B-LOC"), ("city", "I-LOC")],
                  [("runs", "B-PER")]][int(rng.integers(0, 3))]
        where = int(rng.integers(0, len(tokens) + 1))
        tokens[where:where] = entity
        lines += [f"{word} X {tag}" for word, tag in tokens] + [""]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


def test_token_loss_against_numpy():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(2, 5, 4)).astype(np.float32)
    labels = rng.integers(0, 4, size=(2, 5)).astype(np.int32)
    weights = (rng.random((2, 5)) > 0.4).astype(np.int32)
    task = TokenClassificationTask(NerSettings(label_names=("O", "B-X", "I-X", "B-Y")))
    batch = dict(labels=jnp.asarray(labels), label_weights=jnp.asarray(weights),
                 token_loss_count=jnp.asarray(weights.sum(axis=1), jnp.float32))
    sums, counts = task.sums(jnp.asarray(logits), batch), task.counts(batch)
    log_probabilities = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    nll = -np.take_along_axis(log_probabilities, labels[..., None], -1)[..., 0]
    # At most 10 terms, each a log-softmax over 4 logits (about 6 roundings), summed: 16
    # roundings of the sum's scale on each side.
    assert_close(sums["token_loss"], (nll * weights).sum(), 32)
    assert float(sums["token_accuracy"]) == ((logits.argmax(-1) == labels) * weights).sum()
    assert float(counts["num_labelled"]) == weights.sum()
    assert float(counts["token_loss_count"]) == weights.sum()


def test_training_batches_divide_the_token_loss_by_the_files_mean_count():
    """Evaluation divides by each row's own labelled pieces; training by the file's mean per
    row, so a batch of short sentences does not weigh its tokens more."""
    from bert_jax.tasks.token_classification import TrainingBatches
    from bert_jax.training.batching import BucketedBatches, sequence_features

    counts = np.array([1, 2, 9, 12], np.float32)
    features = dict(input_mask=(np.arange(14)[None] < counts[:, None] + 2).astype(np.int32),
                    token_loss_count=counts)
    sequence = {"input_mask"}
    task = TokenClassificationTask(NerSettings(label_names=("O", "B-X", "I-X")))
    assert sequence_features(task.batch_schema()) >= {"input_mask", "label_weights"}
    assert "token_loss_count" not in sequence_features(task.batch_schema())
    training = TrainingBatches(features, sequence, 2, 16, seed=0)
    batches = [next(training) for _ in range(2)]
    assert all(batch["token_loss_count"].tolist() == [6.0, 6.0] for batch in batches)
    evaluation = BucketedBatches(features, sequence, 2, 16, shuffle=False)
    assert sorted(np.concatenate([batch["token_loss_count"] for batch in evaluation])
                  ) == counts.tolist()


def test_frozen_encoder_head_reads_the_encoders_hidden_states():
    import flax.linen as nn
    import jax

    from bert_jax import inference
    from bert_jax.models.presets import preset
    from bert_jax.models.frozen_encoder_heads import FeatureTokenClassifier, FrozenEncoderTokenClassifier

    config = preset("tiny", vocab_size=40, hidden_dim=16, num_layers=2, num_heads=2,
                    mlp_dim=32, max_positions=16)
    ids = jnp.asarray(np.random.default_rng(0).integers(5, 40, (2, 7)), jnp.int32)
    mask = jnp.asarray([[1] * 7, [1] * 4 + [0] * 3], jnp.int32)
    model = FrozenEncoderTokenClassifier(config, 3, (0, 2), "concat")
    params = nn.unbox(model.init(jax.random.key(0), ids, jnp.zeros_like(ids), mask))["params"]
    logits = model.apply({"params": params}, ids, jnp.zeros_like(ids), mask)
    hidden = inference.encode(inference.encoder_params(config, params), ids,
                              jnp.zeros_like(ids), mask, config=config, layers=(0, 2))
    expected = FeatureTokenClassifier(config, 3, "concat").apply(
        {"params": params["head"]}, hidden["hidden_states"])
    assert_close(logits, expected, ENCODER_STEPS)  # the same layers, run two ways


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("ner")
    return dict(root=root, model=tiny_model_directory(root),
                train=made_up_conll(root / "train.txt", 64, 0),
                eval=made_up_conll(root / "eval.txt", 24, 1))


def finetune(data, workdir, epochs: int, *extra) -> int:
    # One bucket (every sentence fits 16 pieces) and two evaluations: few compilations.
    return cli.main(["finetune", "ner", "--model", data["model"], "--train", data["train"],
                     "--eval", data["eval"], "--workdir", workdir, "--epochs", str(epochs),
                     "--max-seq-len", "16", "--batch-size", "16", "--learning-rate", "2e-2",
                     f"--config.finetune.eval_every_steps={epochs * 2}", "--no-progress",
                     *extra])


@pytest.fixture(scope="module")
def run(data):
    workdir = str(data["root"] / "run")
    assert finetune(data, workdir, 8) == 0
    return workdir


def test_finetune_ner_learns_and_reports_seqeval_metrics(run):
    with open(os.path.join(run, "eval_results.json")) as file:
        results = json.load(file)
    best = results["best"]["metrics"]
    for name in ("precision", "recall", "f1", "accuracy", "loss", "LOC_f1", "PER_support"):
        assert name in best
    assert best["f1"] > 0.9, best  # the made-up entities are learnable
    info = model_source.resolve(os.path.join(run, "best")).task_info()
    assert info["settings"]["label_names"] == ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]


def test_predict_writes_conll_columns_that_score_as_evaluate_does(run, data, tmp_path):
    output = str(tmp_path / "predicted.txt")
    assert cli.main(["predict", "--model", os.path.join(run, "best"), "--input", data["eval"],
                     "--output", output]) == 0
    gold = read_conll(data["eval"]).sentences
    predicted = read_conll(output).sentences  # the last column now: the predicted tag
    assert [s.words for s in predicted] == [s.words for s in gold]
    assert [[f[:-1] for f in s.fields] for s in predicted] == [list(s.fields) for s in gold]
    import bert_jax  # the Python API tags the same sentences alike

    model = bert_jax.load(os.path.join(run, "best"))
    values = model.predict([" ".join(s.words) for s in gold])
    assert values == [{"words": list(s.words), "tags": list(s.tags)} for s in predicted]
    scores = entity_scores([s.tags for s in gold], [s.tags for s in predicted])
    metrics_path = str(tmp_path / "metrics.json")
    assert cli.main(["evaluate", "ner", "--model", os.path.join(run, "best"), "--data",
                     data["eval"], "--output", metrics_path]) == 0
    with open(metrics_path) as file:
        metrics = json.load(file)["metrics"]
    # The same tags scored by the same float64 code (tolerances.py: approx's default).
    assert metrics["f1"] == pytest.approx(scores["f1"])
    assert metrics["accuracy"] == pytest.approx(scores["accuracy"])


def test_frozen_encoder_trains_only_the_layer_mix_and_head(data):
    workdir = str(data["root"] / "frozen")
    assert finetune(data, workdir, 1, "--freeze-encoder", "--layers=0,-1",
                    "--combine", "scalar-mix") == 0
    initial = model_source.resolve(data["model"]).load().params
    trained = model_source.resolve(os.path.join(workdir, "best")).load().params
    np.testing.assert_array_equal(trained["bert"]["layer_0"]["mlp"]["output"]["kernel"],
                                  initial["bert"]["layer_0"]["mlp"]["output"]["kernel"])
    mix = trained["head"]["combination"]
    assert mix["layer_weights"].shape == (2,) and float(np.abs(mix["layer_weights"]).sum()) > 0


def test_eval_tag_unseen_in_training_fails_before_any_output(data, tmp_path, capsys):
    bad = tmp_path / "bad.txt"
    bad.write_text("paris X B-LOC\n\nibm X B-ORG\n", encoding="utf-8")
    workdir = tmp_path / "never"
    status = cli.main(["finetune", "ner", "--model", data["model"], "--train", data["train"],
                       "--eval", str(bad), "--workdir", str(workdir), "--max-seq-len", "16",
                       "--no-progress"])  # the tiny model has 64 positions
    assert status == 2
    assert f"{bad}:3: tag 'B-ORG' was not seen in training" in capsys.readouterr().err
    assert not workdir.exists()


def test_hf_export_is_a_token_classifier_with_our_logits_and_tags(run, data, tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from bert_jax.models.bert_heads import BertForTokenClassification
    from input_pipeline.tasks import word_labels
    from input_pipeline.tokenization import load_tokenizer

    best, exported = os.path.join(run, "best"), str(tmp_path / "hf")
    assert cli.main(["convert", best, exported, "--to", "hf"]) == 0
    model, info = transformers.AutoModelForTokenClassification.from_pretrained(
        exported, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    assert model.config.id2label == dict(enumerate(["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]))
    loaded = model_source.resolve(best).load()
    config, params, vocab = loaded.config, loaded.params, loaded.source.vocab_path
    sentences = [s.words for s in read_conll(data["eval"]).sentences[:4]]
    windows = word_labels.align(load_tokenizer(vocab), sentences, None, {}, 16)
    batch = word_labels.pad_windows(windows, 16)
    ours = BertForTokenClassification(config, 5).apply(
        {"params": params}, batch["input_ids"], batch["segment_ids"], batch["input_mask"])
    with torch.no_grad():
        theirs = model.eval()(input_ids=torch.tensor(batch["input_ids"], dtype=torch.long),
                              attention_mask=torch.tensor(batch["input_mask"])).logits.numpy()
    real = batch["input_mask"] > 0
    assert_close(np.asarray(ours)[real], theirs[real], ENCODER_STEPS)  # two implementations
    # ... and back: the HF directory predicts the same tags through `predict`.
    for model_directory, name in ((best, "ours.txt"), (exported, "theirs.txt")):
        assert cli.main(["predict", "--model", model_directory, "--input", data["eval"],
                         "--output", str(tmp_path / name)]) == 0
    assert (tmp_path / "ours.txt").read_text() == (tmp_path / "theirs.txt").read_text()
