"""`finetune mlm` end to end: a fresh tied head, perplexity before/after, BertForMaskedLM export."""

import json
import os

import numpy as np
import pytest
from interop_helpers import WORDS, random_pretraining_params, write_vocab

from bert_jax.interop import model_writers
from bert_jax.cli import main
from bert_jax.models.presets import preset
from bert_jax.inference import masked_input
from input_pipeline.tokenization import load_tokenizer

ARGS = ["--epochs", "3", "--batch-size", "16", "--max-seq-len", "32", "--learning-rate", "1e-2",
        "--no-progress"]


def encoder_only_model(root) -> str:
    """A random one-layer BERT with no MLM head (as all-MiniLM-L6-v2 has none)."""
    tokenizer = load_tokenizer(write_vocab(root))
    config = preset("tiny", vocab_size=tokenizer.vocab_size, hidden_dim=32, num_layers=1,
                    num_heads=2, mlp_dim=64, max_positions=64)
    params = random_pretraining_params(config)
    destination = str(root / "encoder_only")
    model_writers.save_model(config, {"bert": params["bert"]}, tokenizer, destination)
    return destination


def domain_text(path, lines: int, seed: int) -> str:
    """A 'domain' with a strong regularity: 'the man went to store' recurs in every line."""
    rng = np.random.default_rng(seed)
    plain = [word for word in WORDS if not word.startswith("##")]
    rows = [" ".join(list(rng.choice(plain, 4)) + "the man went to store .".split())
            for _ in range(lines)]
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return str(path)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("mlm")
    model = encoder_only_model(root)
    workdir = str(root / "run")
    assert main(["finetune", "mlm", "--model", model, "--train", domain_text(
        root / "train.txt", 300, 0), "--eval", domain_text(root / "heldout.txt", 40, 1),
        "--workdir", workdir, *ARGS]) == 0
    return dict(root=root, workdir=workdir)


def test_perplexity_before_and_after_on_the_same_masks(run):
    with open(os.path.join(run["workdir"], "eval_results.json")) as file:
        results = json.load(file)
    assert [entry["step"] for entry in results["history"]][0] == 0  # before the first step
    assert len(results["history"]) == 4
    assert results["perplexity_before"] == results["history"][0]["metrics"]["perplexity"]
    assert results["perplexity"] == results["history"][-1]["metrics"]["perplexity"]
    # perplexity = exp(mean held-out cross-entropy), the loss the step computes.
    for entry in results["history"]:
        metrics = entry["metrics"]
        # exp of the same float64 mean on both sides (84 float32 steps would allow a float32
        # exp of it as well).
        assert metrics["perplexity"] == pytest.approx(np.exp(metrics["loss"]), rel=1e-5)
    assert results["perplexity"] < 0.75 * results["perplexity_before"]
    assert results["mlm_accuracy"] > results["mlm_accuracy_before"]


def test_export_as_bert_for_masked_lm_and_fill_mask(run, capsys):
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    exported = str(run["root"] / "hf")
    best = os.path.join(run["workdir"], "best")
    assert main(["convert", best, exported, "--to", "hf"]) == 0
    model, loading = transformers.BertForMaskedLM.from_pretrained(
        exported, output_loading_info=True)
    assert not loading["missing_keys"] and not loading["unexpected_keys"]
    # The decoder is tied to the word embeddings, in transformers as in ours.
    assert torch.equal(model.cls.predictions.decoder.weight,
                       model.bert.embeddings.word_embeddings.weight)
    text = "a dog the man went to [MASK] ."
    capsys.readouterr()
    assert main(["fill-mask", "--model", exported, "--top-k", "3", text]) == 0
    ours = capsys.readouterr().out.splitlines()[1].split()
    tokenizer = load_tokenizer(exported)
    ids, (position,) = masked_input(tokenizer, text, 32)
    with torch.no_grad():
        logits = model.eval()(input_ids=torch.tensor([ids], dtype=torch.long)).logits[0]
    probabilities = torch.softmax(logits[position], -1)
    top = torch.topk(probabilities, 3)
    assert ours[2::2] == [tokenizer.id_to_token(int(i)) for i in top.indices]
    # fill-mask prints 4 decimals (5e-5 off at most); the models' float32 differences, a
    # few steps of 1, are far below that.
    np.testing.assert_allclose([float(p) for p in ours[3::2]], top.values.numpy(), atol=1e-4)
