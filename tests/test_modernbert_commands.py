"""Every command on a ModernBERT directory as the Hub ships one (transformers' safetensors, a
byte-level BPE tokenizer.json), through `bert_jax.cli.main`, held to transformers and
sentence-transformers where they compute the same thing.

Bounds: random tiny models, float32 both sides, values of size ~1-5: 5e-5 as in
tests/test_modernbert.py (a few hundred float32 roundings of the largest terms); the
sentence-transformers comparison adds a mean over <= 30 tokens (no larger a rounding).
"""

import json
import os

import numpy as np
import pytest
from modernbert_helpers import modernbert_directory, torch_forward

from bert_jax.cli import main

BOUND = 5e-5
LINES = ["The quick brown fox jumps over the lazy dog.",
         "A short one.",
         "Paris is the capital of France, and Berlin is the capital of Germany. The quick fox."]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """(the transformers ModernBertForMaskedLM, its directory, a work directory with
    lines.txt)."""
    work = tmp_path_factory.mktemp("modernbert")
    model, directory = modernbert_directory(work / "model")
    (work / "lines.txt").write_text("\n".join(LINES) + "\n", encoding="utf-8")
    return model, directory, work


def _hf_encode(directory, texts):
    from transformers import AutoTokenizer

    encoded = AutoTokenizer.from_pretrained(directory)(texts, padding=True, return_tensors="np")
    return encoded["input_ids"], encoded["attention_mask"]


def test_features_are_transformers_hidden_states(model_dir):
    model, directory, work = model_dir
    output = work / "features.npz"
    assert main(["features", "--model", directory, "--input", str(work / "lines.txt"),
                 "--output", str(output), "--layers=0,2,-1", "--max-seq-len", "64",
                 "--attention"]) == 0
    arrays = dict(np.load(output))
    ids, mask = _hf_encode(directory, LINES)
    np.testing.assert_array_equal(arrays["input_ids"], ids)  # the tokenizer.json's own ids
    theirs = torch_forward(model, ids, mask, output_hidden_states=True).hidden_states
    real = mask[..., None] > 0
    for name, layer in (("layer_0", 0), ("layer_2", 2), ("layer_-1", 4)):
        worst = np.abs(arrays[name] - np.where(real, theirs[layer].numpy(), 0)).max()
        assert worst < BOUND, f"{name}: {worst}"
    # Layer 1 slides (window 8: 4 each side): no real token attends beyond 4 tokens away.
    real_queries = mask[:, None, :, None] > 0  # (N, 1, T, 1)
    attention = np.where(real_queries, arrays["attention_layer_2"], 0)  # (N, heads, T, T)
    distance = np.abs(np.arange(attention.shape[-1])[:, None] - np.arange(attention.shape[-1]))
    assert attention[..., distance > 4].max() == 0.0
    final = np.where(real_queries, arrays["attention_layer_-1"], 0)
    assert final[..., distance > 4].max() > 0.0  # layer 3 is global


def test_fill_mask_ranks_as_transformers(model_dir, capsys):
    model, directory, _ = model_dir
    text = "The quick brown [MASK] jumps."
    assert main(["fill-mask", "--model", directory, "--top-k", "3", text]) == 0
    printed = capsys.readouterr().out
    ids, mask = _hf_encode(directory, [text])
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(directory)
    position = int(np.flatnonzero(ids[0] == tokenizer.mask_token_id)[0])
    logits = torch_forward(model, ids, mask).logits.numpy()[0, position]
    best = tokenizer.decode([int(np.argmax(logits))])
    assert f"[MASK] 1: {best} " in printed


def test_embed_equals_sentence_transformers_of_the_export(model_dir):
    sentence_transformers = pytest.importorskip("sentence_transformers")
    _, directory, work = model_dir
    exported = work / "st"
    assert main(["convert", directory, str(exported), "--to", "sentence-transformers"]) == 0
    reference = sentence_transformers.SentenceTransformer(str(exported), device="cpu")
    assert type(reference[0].auto_model).__name__ == "ModernBertModel"
    theirs = reference.encode(LINES, convert_to_numpy=True)
    for model in (directory, str(exported)):
        output = work / f"embeddings_{os.path.basename(model)}.npy"
        assert main(["embed", "--model", model, "--input", str(work / "lines.txt"),
                     "--output", str(output)]) == 0
        assert np.abs(np.load(output) - theirs).max() < BOUND


def test_export_keeps_the_tokenizer_and_refuses_tf_formats(model_dir):
    from transformers import AutoTokenizer

    _, directory, work = model_dir
    assert main(["convert", directory, str(work / "bj"), "--to", "bert-jax"]) == 0
    assert main(["convert", str(work / "bj"), str(work / "hf"), "--to", "hf"]) == 0
    config = json.loads((work / "hf" / "config.json").read_text())
    assert config["architectures"] == ["ModernBertForMaskedLM"]
    original, again = (AutoTokenizer.from_pretrained(str(path)) for path in (directory,
                                                                          work / "hf"))
    assert original(LINES)["input_ids"] == again(LINES)["input_ids"]
    for target in ("tf-checkpoint", "saved-model"):
        assert main(["convert", directory, str(work / target), "--to", target]) == 2
        assert not (work / target).exists()


def test_fine_tuned_classifier_predicts_what_its_transformers_export_predicts(model_dir):
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    _, directory, work = model_dir
    rows = [("a gripping, funny film", "pos"), ("dull and far too long", "neg"),
            ("the best thing this year", "pos"), ("I walked out", "neg")] * 4
    (work / "train.tsv").write_text("sentence\tlabel\n" + "".join(
        f"{text}\t{label}\n" for text, label in rows), encoding="utf-8")
    (work / "texts.txt").write_text("a funny film\nfar too long\n", encoding="utf-8")
    assert main(["finetune", "classify", "--model", directory, "--train",
                 str(work / "train.tsv"), "--workdir", str(work / "run"), "--epochs", "2",
                 "--batch-size", "8", "--max-seq-len", "32", "--learning-rate", "1e-3",
                 "--no-progress"]) == 0
    assert main(["predict", "--model", str(work / "run"), "--input", str(work / "texts.txt"),
                 "--output", str(work / "predicted.jsonl")]) == 0
    predicted = [json.loads(line) for line in (work / "predicted.jsonl").read_text().splitlines()]
    assert main(["evaluate", "classify", "--model", str(work / "run"), "--data",
                 str(work / "train.tsv")]) == 0
    assert main(["convert", str(work / "run"), str(work / "run_hf"), "--to", "hf"]) == 0
    config = json.loads((work / "run_hf" / "config.json").read_text())
    assert config["architectures"] == ["ModernBertForSequenceClassification"]
    model = AutoModelForSequenceClassification.from_pretrained(str(work / "run_hf")).eval()
    encoded = AutoTokenizer.from_pretrained(str(work / "run_hf"))(
        ["a funny film", "far too long"], padding=True, return_tensors="pt")
    with torch.no_grad():
        probabilities = torch.softmax(model(**encoded).logits, -1).numpy()
    labels = [config["id2label"][str(index)] for index in probabilities.argmax(-1)]
    assert [row["label"] for row in predicted] == labels
    for row, expected in zip(predicted, probabilities):  # predict writes 6 decimals
        ours = [row["probabilities"][config["id2label"][str(index)]] for index in range(2)]
        assert np.abs(np.asarray(ours) - expected).max() < BOUND


def test_a_directory_without_its_tokenizer_and_a_text_too_long_are_one_line_errors(
        model_dir, capsys):
    _, directory, work = model_dir
    bare = work / "bare"
    bare.mkdir()
    for name in ("config.json", "model.safetensors"):
        (bare / name).write_bytes((work / "model" / name).read_bytes())
    arguments = ["--input", str(work / "lines.txt"), "--output", str(work / "x.npy")]
    assert main(["embed", "--model", str(bare), *arguments]) == 2
    error = capsys.readouterr().err
    assert "no tokenizer" in error and "tokenizer.json" in error and error.count("\n") == 1
    assert main(["embed", "--model", directory, "--max-seq-len", "65", *arguments]) == 2
    assert "64 positions" in capsys.readouterr().err
    assert not (work / "x.npy").exists()
