"""Every command on a EuroBERT directory as the Hub ships one (transformers' safetensors, a
Llama-3-style byte-level BPE tokenizer.json naming BOS, EOS and <|mask|>), through
`bert_jax.cli.main` and `bert_jax.load`, held to transformers and sentence-transformers where
they compute the same thing.

Bounds: random tiny models, float32 both sides, values of size ~1-5: 5e-5 as in
tests/test_eurobert.py; the sentence-transformers comparison adds a mean over <= 30 tokens
(no larger a rounding).
"""

import json
import os

import numpy as np
import pytest
from eurobert_helpers import eurobert_directory, torch_forward

import bert_jax
from bert_jax.cli import main

BOUND = 5e-5
LINES = ["The quick brown fox jumps over the lazy dog.",
         "A short one.",
         "Paris is the capital of France, and Berlin is the capital of Germany. The quick fox."]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """(the transformers EuroBertForMaskedLM, its directory, a work directory with
    lines.txt)."""
    work = tmp_path_factory.mktemp("eurobert")
    model, directory = eurobert_directory(work / "model")
    (work / "lines.txt").write_text("\n".join(LINES) + "\n", encoding="utf-8")
    return model, directory, work


def _hf_encode(directory, texts, pairs=None):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(directory)
    encoded = tokenizer(texts, pairs, padding=True, return_tensors="np")
    return encoded["input_ids"], encoded["attention_mask"]


def test_tokenizer_ids_equal_pretrained_tokenizer_fast(model_dir):
    """BOS A EOS (B EOS) with the special tokens written in the text, as transformers'
    PreTrainedTokenizerFast makes them from the same files; pad is EOS, there is no [UNK]."""
    from input_pipeline.tokenization import load_tokenizer

    _, directory, _ = model_dir
    tokenizer = load_tokenizer(directory)
    texts = ["The quick brown <|mask|> jumps.", "Héllo  wörld\n\tdone <|end_of_text|> x",
             "中文字符 2024-12-18 it's"]
    ours = tokenizer.encode_for_model(texts, 64)
    ids, mask = _hf_encode(directory, texts)
    np.testing.assert_array_equal(ours["input_ids"], ids)
    np.testing.assert_array_equal(ours["input_mask"], mask)
    ours = tokenizer.encode_for_model(list(zip(texts, LINES)), 64)
    ids, _ = _hf_encode(directory, texts, LINES)
    np.testing.assert_array_equal(ours["input_ids"], ids)
    assert tokenizer.unk_id is None and tokenizer.pad_id == tokenizer.sep_id
    assert tokenizer.tokens[tokenizer.cls_id] == "<|begin_of_text|>"


def test_features_are_transformers_hidden_states(model_dir):
    model, directory, work = model_dir
    output = work / "features.npz"
    assert main(["features", "--model", directory, "--input", str(work / "lines.txt"),
                 "--output", str(output), "--layers=0,2,-1", "--max-seq-len", "64",
                 "--attention"]) == 0
    arrays = dict(np.load(output))
    ids, mask = _hf_encode(directory, LINES)
    np.testing.assert_array_equal(arrays["input_ids"], ids)  # the tokenizer.json's own ids
    theirs = torch_forward(model, ids, mask, output_hidden_states=True)
    real = mask[..., None] > 0
    for name, layer in (("layer_0", 0), ("layer_2", 2), ("layer_-1", 3)):
        worst = np.abs(arrays[name] - np.where(real, theirs.hidden_states[layer].numpy(), 0)).max()
        assert worst < BOUND, f"{name}: {worst}"
    attention = arrays["attention_layer_2"]  # (N, 4 heads, T, T): every query head's own map
    assert attention.shape[1] == 4
    np.testing.assert_allclose(attention.sum(-1)[mask[:, None, :].repeat(4, 1) > 0], 1.0,
                               atol=1e-5)


def test_fill_mask_and_load_rank_as_transformers(model_dir, capsys):
    model, directory, _ = model_dir
    text = "The quick brown <|mask|> jumps."
    assert main(["fill-mask", "--model", directory, "--top-k", "3", text]) == 0
    printed = capsys.readouterr().out
    ids, mask = _hf_encode(directory, [text])
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(directory)
    position = int(np.flatnonzero(ids[0] == tokenizer.mask_token_id)[0])
    logits = torch_forward(model, ids, mask).logits.numpy()[0, position]
    best = tokenizer.decode([int(np.argmax(logits))])
    assert f"[MASK] 1: {best} " in printed
    loaded = bert_jax.load(directory)
    [candidates] = loaded.fill_mask(text, top_k=1)
    assert candidates[0][0] == best.strip() or candidates[0][0] == best


def test_embed_equals_sentence_transformers_of_the_export(model_dir):
    sentence_transformers = pytest.importorskip("sentence_transformers")
    _, directory, work = model_dir
    exported = work / "st"
    assert main(["convert", directory, str(exported), "--to", "sentence-transformers"]) == 0
    reference = sentence_transformers.SentenceTransformer(str(exported), device="cpu")
    assert type(reference[0].auto_model).__name__ == "EuroBertModel"
    theirs = reference.encode(LINES, convert_to_numpy=True)
    for model in (directory, str(exported)):
        output = work / f"embeddings_{os.path.basename(model)}.npy"
        assert main(["embed", "--model", model, "--input", str(work / "lines.txt"),
                     "--output", str(output)]) == 0
        assert np.abs(np.load(output) - theirs).max() < BOUND


def test_export_keeps_the_tokenizer(model_dir):
    from transformers import AutoTokenizer

    _, directory, work = model_dir
    assert main(["convert", directory, str(work / "bj"), "--to", "bert-jax"]) == 0
    assert main(["convert", str(work / "bj"), str(work / "hf"), "--to", "hf"]) == 0
    config = json.loads((work / "hf" / "config.json").read_text())
    assert config["architectures"] == ["EuroBertForMaskedLM"]
    original, again = (AutoTokenizer.from_pretrained(str(path)) for path in (directory,
                                                                          work / "hf"))
    assert original(LINES)["input_ids"] == again(LINES)["input_ids"]
    assert again.mask_token == "<|mask|>" and again.pad_token_id == again.eos_token_id


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
    assert config["architectures"] == ["EuroBertForSequenceClassification"]
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


def test_question_answering_is_refused_in_one_line(model_dir, capsys):
    """transformers has no EuroBertForQuestionAnswering: `finetune qa` says so and writes
    nothing."""
    _, directory, work = model_dir
    squad = {"version": "v1.1", "data": [{"title": "t", "paragraphs": [{
        "context": "Paris is the capital of France.", "qas": [{
            "id": "1", "question": "What is the capital?",
            "answers": [{"text": "Paris", "answer_start": 0}]}]}]}]}
    (work / "squad.json").write_text(json.dumps(squad), encoding="utf-8")
    assert main(["finetune", "qa", "--model", directory, "--train", str(work / "squad.json"),
                 "--workdir", str(work / "qa"), "--max-seq-len", "64", "--doc-stride", "16",
                 "--max-query-len", "16", "--no-progress"]) == 2
    error = capsys.readouterr().err
    assert "a eurobert model has no span head" in error and error.count("\n") == 1
    assert not (work / "qa").exists()
