"""A sequence length past the model's position table is refused up front by every command
(issue 24, 4.1). Positions past the table have no embedding: the old code ran on and wrote
NaN probabilities (predict, evaluate, the API) or stopped later with a misleading
"loss not finite" (finetune, pretrain). Each test fails on the code before the check."""

import json

import numpy as np
import pytest
from finetune_helpers import made_up_sentences, write_tsv
from interop_helpers import random_pretraining_params, write_vocab
from pipeline_helpers import make_corpus, write_vocabulary

import bert_jax
from bert_jax.interop import model_writers
from bert_jax.cli import main
from bert_jax.models.presets import preset
from bert_jax.errors import UserError
from input_pipeline.tokenization import load_tokenizer

POSITIONS = 64
REFUSED = rf"--max-seq-len 128 is longer than the model's {POSITIONS} positions"


@pytest.fixture(scope="module")
def classifier(tmp_path_factory):
    """A fine-tuned-looking classify model directory with 64 positions, and a labelled file."""
    from bert_jax.tasks import task_module
    from bert_jax.training.finetune import task_info

    root = tmp_path_factory.mktemp("length")
    tokenizer = load_tokenizer(write_vocab(root))
    config = preset("tiny", vocab_size=tokenizer.vocab_size, hidden_dim=32, num_layers=1,
                    num_heads=2, mlp_dim=64, max_positions=POSITIONS)
    rng = np.random.default_rng(0)
    params = {"bert": random_pretraining_params(config)["bert"],
              "classifier": {"kernel": rng.normal(0, 0.3, (32, 2)).astype(np.float32),
                             "bias": np.zeros(2, np.float32)}}
    task = task_module("classify").TASK.from_settings({"label_names": ["neg", "pos"]})
    model = str(root / "model")
    model_writers.save_model(config, params, tokenizer, model, task_info=task_info(task, 32))
    data = write_tsv(root / "dev.tsv", made_up_sentences(12, seed=1))
    return model, data


def test_predict_and_evaluate_refuse_a_length_past_the_positions(classifier, tmp_path, capsys):
    model, data = classifier
    texts = tmp_path / "texts.txt"
    texts.write_text("the man went to the store\nhe was happy\n", encoding="utf-8")
    output = tmp_path / "predictions.jsonl"
    assert main(["predict", "--model", model, "--input", str(texts), "--output", str(output),
                 "--max-seq-len", "128"]) == 2
    assert "--max-seq-len 128 is longer than the model's 64 positions" in (
        capsys.readouterr().err)
    assert not output.exists()
    metrics = tmp_path / "metrics.json"
    assert main(["evaluate", "classify", "--model", model, "--data", data, "--output",
                 str(metrics), "--max-seq-len", "128"]) == 2
    assert "--max-seq-len 128 is longer" in capsys.readouterr().err
    assert not metrics.exists()
    with pytest.raises(UserError, match=REFUSED):
        bert_jax.load(model).predict("the man went to the store", max_seq_len=128)
    with pytest.raises(UserError, match="max_seq_len 128 is longer"):
        bert_jax.load(model).features("the man went to the store", max_seq_len=128)
    # At the table's own length the probabilities are numbers.
    assert main(["predict", "--model", model, "--input", str(texts), "--output", str(output),
                 "--max-seq-len", str(POSITIONS)]) == 0
    rows = [json.loads(line) for line in output.read_text().splitlines()]
    assert all(np.isfinite(list(row["probabilities"].values())).all() for row in rows)


def test_finetune_refuses_before_reading_or_writing_anything(classifier, tmp_path, capsys):
    model, data = classifier
    workdir = tmp_path / "run"
    assert main(["finetune", "classify", "--model", model, "--train", data, "--workdir",
                 str(workdir), "--max-seq-len", "128", "--no-progress"]) == 2
    error = capsys.readouterr().err
    assert "--max-seq-len 128 is longer than the model's 64 positions" in error
    assert "not finite" not in error and not workdir.exists()


def test_pretrain_refuses_shards_longer_than_the_model_positions(tmp_path, capsys):
    vocab = write_vocabulary(str(tmp_path))
    corpus = tmp_path / "corpus.txt"
    make_corpus(str(corpus), num_documents=10, seed=1)
    shards = tmp_path / "shards"
    assert main(["create-data", "--input", str(corpus), "--vocab", vocab, "--output-dir",
                 str(shards), "--max-seq-len", "64", "--max-predictions", "5",
                 "--num-shards", "1", "--dupe-factor", "1", "--quiet"]) == 0
    workdir = tmp_path / "run"
    assert main(["pretrain", "--config", "demo", "--workdir", str(workdir),
                 "--config.data.demo_dir=", f"--config.data.train_files={shards}",
                 f"--config.data.vocab_path={vocab}", "--config.data.max_predictions=5",
                 "--config.model.max_positions=32", "--no-progress"]) == 2
    error = capsys.readouterr().err
    assert "data.seq_len 64 is longer than the model's 32 positions" in error
    assert not workdir.exists()
