"""The span head moves to and from transformers' BertForQuestionAnswering with equal logits."""

import json
import os
import shutil

import numpy as np
import pytest
from interop_helpers import minilm_directory
from tolerances import ENCODER_STEPS, assert_close

from bert_jax.interop import model_source, model_writers
from bert_jax.cli import main
from bert_jax.models.bert_heads import BertForQuestionAnswering
from input_pipeline.tokenization import load_tokenizer

QUESTIONS = [("Who wrote the letter?", "The letter was written by Anna in Moscow, 1867."),
             ("Where?", "Pierre walked home through the snow.")]


def _our_logits(directory, batch):
    loaded = model_source.resolve(directory).load()
    config, params = loaded.config, loaded.params
    start, end = BertForQuestionAnswering(config).apply(
        {"params": {"bert": params["bert"], "qa_outputs": params["qa_outputs"]}},
        batch["input_ids"], batch["segment_ids"], batch["input_mask"])
    return np.asarray(start), np.asarray(end)


@pytest.fixture(scope="module")
def qa_model(tmp_path_factory):
    """MiniLM's encoder with a random span head, as `finetune qa` saves it."""
    root = tmp_path_factory.mktemp("qa_interop")
    loaded = model_source.resolve(minilm_directory()).load()
    config, params, vocab = loaded.config, loaded.params, loaded.source.vocab_path
    rng = np.random.default_rng(0)
    bert = {key: value for key, value in params["bert"].items() if key != "pooler"}
    head = dict(kernel=rng.normal(0, 0.5, (config.hidden_dim, 2)).astype(np.float32),
                bias=np.array([0.3, -0.2], np.float32))
    directory = str(root / "qa")
    info = dict(task="qa", settings={}, head=dict(architecture="BertForQuestionAnswering"),
                max_seq_len=64)
    model_writers.save_model(config, {"bert": bert, "qa_outputs": head}, load_tokenizer(vocab),
                             directory, task_info=info)
    return root, directory


def test_export_loads_in_transformers_with_equal_logits(qa_model):
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    root, directory = qa_model
    exported = str(root / "hf")
    assert main(["convert", directory, exported, "--to", "hf"]) == 0
    model, loading = transformers.BertForQuestionAnswering.from_pretrained(
        exported, output_loading_info=True)
    assert not loading["missing_keys"] and not loading["unexpected_keys"]
    tokenizer = load_tokenizer(exported)
    batch = tokenizer.encode_for_model(QUESTIONS, 64)
    with torch.no_grad():
        output = model.eval()(input_ids=torch.tensor(batch["input_ids"], dtype=torch.long),
                              token_type_ids=torch.tensor(batch["segment_ids"], dtype=torch.long),
                              attention_mask=torch.tensor(batch["input_mask"], dtype=torch.long))
    start, end = _our_logits(directory, batch)
    real = batch["input_mask"] > 0
    # Two implementations of MiniLM's 6 layers: ENCODER_STEPS float32 steps of the logits'
    # scale (a fixed 1e-5 failed by 1.19e-5 on another x86 CPU, logits up to 8.3).
    assert_close(start[real], output.start_logits.numpy()[real], ENCODER_STEPS)
    assert_close(end[real], output.end_logits.numpy()[real], ENCODER_STEPS)
    assert np.abs(start).max() > 0.5  # the head is not a near-zero one that hides a mix-up
    # And back: the HF directory imports as a qa model with the same logits: the same
    # float32 weights through the same code, so only XLA's choices between two compiles.
    info = model_source.resolve(exported).task_info()
    assert info["task"] == "qa"
    back_start, back_end = _our_logits(exported, batch)
    assert_close(back_start, start, ENCODER_STEPS)
    assert_close(back_end, end, ENCODER_STEPS)


def test_transformers_qa_directory_imports_and_predicts(tmp_path):
    """A directory saved by transformers itself (its own config fields) answers questions."""
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("torch")
    model = transformers.BertForQuestionAnswering.from_pretrained(minilm_directory())
    saved = str(tmp_path / "hf_qa")
    model.save_pretrained(saved)
    transformers.BertTokenizerFast.from_pretrained(minilm_directory()).save_pretrained(saved)
    if not os.path.exists(os.path.join(saved, "vocab.txt")):  # transformers 5 writes only
        shutil.copy(os.path.join(minilm_directory(), "vocab.txt"), saved)  # tokenizer.json
    questions = tmp_path / "questions.json"
    questions.write_text('{"data": [{"paragraphs": [{"context": "Anna lives in Moscow.", '
                         '"qas": [{"id": "a", "question": "Where does Anna live?"}]}]}]}')
    output = tmp_path / "answers.json"
    assert main(["predict", "--model", saved, "--input", str(questions), "--output",
                 str(output)]) == 0
    answers = json.loads(output.read_text())
    assert set(answers) == {"a"} and answers["a"] in "Anna lives in Moscow."
    assert os.path.exists(tmp_path / "nbest_predictions.json")
