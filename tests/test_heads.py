"""Task heads and their losses against naive numpy, and their Hugging Face export/import."""

import flax
import jax
import numpy as np
import pytest
from interop_helpers import random_pretraining_params, torch_inputs, write_vocab
from tolerances import ENCODER_STEPS, assert_close

from bert_jax import losses
from bert_jax.interop import model_source, model_writers
from bert_jax.models.presets import preset
from bert_jax.models.bert_heads import BertForSequenceClassification, BertForTokenClassification
from bert_jax.models.bert import BertModel
from input_pipeline.tokenization import load_tokenizer

CONFIG = preset("tiny", vocab_size=37, hidden_dim=32, num_layers=2, num_heads=2, mlp_dim=64,
                max_positions=32)


def _batch(seed=0, batch_size=3, seq_len=9):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(3, seq_len + 1, batch_size)
    mask = (np.arange(seq_len)[None] < lengths[:, None]).astype(np.int32)
    return dict(input_ids=(rng.integers(5, 37, (batch_size, seq_len)) * mask).astype(np.int32),
                segment_ids=((np.arange(seq_len)[None] >= lengths[:, None] // 2) * mask
                             ).astype(np.int32), input_mask=mask)


def _head_params(num_labels, with_pooler=True, seed=1):
    rng = np.random.default_rng(seed)
    params = random_pretraining_params(CONFIG, seed)
    bert = dict(params["bert"])
    if not with_pooler:
        bert.pop("pooler")
    return {"bert": bert, "classifier": {
        "kernel": rng.normal(0, 0.3, (CONFIG.hidden_dim, num_labels)).astype(np.float32),
        "bias": rng.normal(0, 0.3, (num_labels,)).astype(np.float32)}}


def _inputs(batch):
    return batch["input_ids"], batch["segment_ids"], batch["input_mask"]


def _assert_dense(logits, features, kernel, bias) -> None:
    """`logits` == features @ kernel + bias, each a float32 sum of hidden_dim products and a
    bias, in XLA's order and numpy's: hidden_dim + 1 roundings of a partial sum no larger
    than the sum of the terms' magnitudes, on each side."""
    features = np.asarray(features)
    largest = np.abs(features) @ np.abs(kernel) + np.abs(bias)
    assert_close(logits, features @ kernel + bias, 2 * (CONFIG.hidden_dim + 1), scale=largest)


def test_heads_are_a_dense_layer_on_pooled_cls_and_on_every_token():
    batch = _batch()
    params = _head_params(3)
    sequence, pooled = BertModel(CONFIG).apply({"params": params["bert"]}, *_inputs(batch))
    kernel, bias = params["classifier"]["kernel"], params["classifier"]["bias"]
    logits = BertForSequenceClassification(CONFIG, 3).apply({"params": params}, *_inputs(batch))
    _assert_dense(logits, pooled, kernel, bias)
    token_params = _head_params(3, with_pooler=False)
    token_logits = BertForTokenClassification(CONFIG, 3).apply({"params": token_params},
                                                               *_inputs(batch))
    assert token_logits.shape == (3, 9, 3)
    _assert_dense(token_logits, sequence, kernel, bias)
    # Dropout acts in training only.
    trained = BertForSequenceClassification(CONFIG, 3).apply(
        {"params": params}, *_inputs(batch), train=True, rngs={"dropout": jax.random.key(0)})
    assert not np.allclose(trained, logits)  # dropout moves logits by O(0.1), not by steps


def test_classification_and_regression_sums_match_numpy():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(6, 4)).astype(np.float32)
    labels = rng.integers(0, 4, 6).astype(np.int32)
    labels[5] = -100  # an ignored position, weight 0
    weights = np.array([1, 1, 0.5, 1, 0, 0], np.float32)
    sums = losses.classification_sums(logits, labels, weights)
    log_probabilities = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    safe = np.where(weights > 0, labels, 0)
    nll = -log_probabilities[np.arange(6), safe]
    # Each term a log-softmax over 4 logits (about 6 roundings), 6 terms summed: about 12
    # roundings of a partial sum no larger than the terms' total, on each side.
    assert_close(sums["loss"], np.sum(nll * weights), 24, scale=np.sum(nll * weights))
    np.testing.assert_array_equal(sums["accuracy"],  # counts weighted by 1 and 0.5: exact
                                  np.sum((logits.argmax(-1) == safe) * weights))
    predictions, targets = rng.normal(size=(6, 1)), rng.normal(size=6)
    # float64 inputs rounded to float32 (a step each), a difference, a square and 6 terms
    # summed: about 10 roundings of a bound on every partial sum.
    largest = np.sum((np.abs(predictions[:, 0]) + np.abs(targets)) ** 2 * weights)
    assert_close(losses.regression_sums(predictions, targets, weights)["loss"],
                 np.sum((predictions[:, 0] - targets) ** 2 * weights), 20, scale=largest)


@pytest.mark.parametrize("architecture, labels, problem", [
    ("BertForSequenceClassification", ["neg", "neutral", "pos"], "single_label_classification"),
    ("BertForSequenceClassification", ["LABEL_0"], "regression"),
    ("BertForTokenClassification", ["O", "B-PER", "I-PER", "B-LOC"], None),
])
def test_hf_export_and_import_of_heads(tmp_path, architecture, labels, problem):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    token = architecture == "BertForTokenClassification"
    params = _head_params(len(labels), with_pooler=not token)
    head = dict(architecture=architecture, label_names=labels,
                problem_type=problem or "single_label_classification")
    tokenizer = load_tokenizer(write_vocab(tmp_path))
    config = CONFIG
    assert tokenizer.vocab_size == config.vocab_size
    exported = str(tmp_path / "hf")
    model_writers.export_huggingface(config, params, tokenizer, exported, head=head)
    auto = (transformers.AutoModelForTokenClassification if token else
            transformers.AutoModelForSequenceClassification)
    model, info = auto.from_pretrained(exported, output_loading_info=True)
    assert type(model).__name__ == architecture
    assert not info["missing_keys"] and not info["unexpected_keys"]
    assert model.config.id2label == dict(enumerate(labels))
    if problem == "regression":
        assert model.config.problem_type == "regression" and model.config.num_labels == 1
    batch = _batch(seq_len=7)
    module = (BertForTokenClassification if token else BertForSequenceClassification)(
        config, len(labels))
    ours = np.asarray(module.apply({"params": params}, *_inputs(batch)))
    with torch.no_grad():
        theirs = model.eval()(**torch_inputs(batch)).logits.numpy()
    if token:  # padding positions are not predictions
        ours, theirs = ours[batch["input_mask"] > 0], theirs[batch["input_mask"] > 0]
    assert_close(ours, theirs, ENCODER_STEPS)  # two implementations (tolerances.py)
    # Back again: the same parameters, and the head with its labels.
    imported = model_source.resolve(exported).load().params
    flat = flax.traverse_util.flatten_dict
    assert set(flat(imported)) == set(flat(params))
    for path, value in flat(params).items():
        # float32 written and read back: equal to the bit (1e-7 is under a step of 1).
        np.testing.assert_allclose(flat(imported)[path], value, atol=1e-7, err_msg=str(path))
    info = model_source.resolve(exported).task_info()
    assert info["head"]["label_names"] == labels
    assert info["task"] == {"single_label_classification": "classify", "regression": "regress",
                            None: "ner"}[problem]
