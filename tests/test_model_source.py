"""A model path is resolved once and each of its files read once (interop/model_source.py).

Counted from inside the process: every Python-level open of a file in the model directory
(through an audit hook on "open" events), the safetensors reads (safetensors opens its file in
Rust, where no audit hook sees it, so `safetensors.safe_open` is counted instead), the
vocabulary parses and the Hub look-ups (`hub.resolve`).
"""

import collections
import contextlib
import os
import sys

import pytest
from finetune_helpers import made_up_sentences, write_tsv
from interop_helpers import random_pretraining_params, write_vocab

from bert_jax.cli import main

_opened = []  # absolute paths opened while a `counting` block records
_recording = [False]


def _audit(event, args):
    if event == "open" and _recording[0] and isinstance(args[0], (str, bytes, os.PathLike)):
        _opened.append(os.path.abspath(os.fsdecode(args[0])))


sys.addaudithook(_audit)  # an audit hook cannot be removed: it records only inside `counting`


@contextlib.contextmanager
def counting(monkeypatch, directory: str):
    """Counter of {file name in `directory`: opens, 'weights <file>': safetensors reads,
    'vocabulary parses', 'hub.resolve'} for the block."""
    import safetensors

    from bert_jax.interop import hub
    from input_pipeline import tokenization

    counts = collections.Counter()

    def wrap(module, name, key):
        original = getattr(module, name)

        def counted(*args, **kwargs):
            counts[key(*args)] += 1
            return original(*args, **kwargs)
        monkeypatch.setattr(module, name, counted)

    wrap(safetensors, "safe_open", lambda path, *_: f"weights {os.path.basename(path)}")
    wrap(tokenization, "read_vocabulary", lambda *_: "vocabulary parses")
    wrap(hub, "resolve", lambda *_: "hub.resolve")
    _opened.clear()
    _recording[0] = True
    try:
        yield counts
    finally:
        _recording[0] = False
        for path in _opened:
            if os.path.dirname(path) == directory:
                counts[os.path.basename(path)] += 1


@pytest.fixture(scope="module")
def hf_model(tmp_path_factory):
    """A tiny random BERT saved as a Hugging Face directory (config.json, model.safetensors,
    vocab.txt, tokenizer_config.json), and small data to run it on."""
    from bert_jax.interop import model_writers
    from bert_jax.models.presets import preset
    from input_pipeline.tokenization import load_tokenizer

    root = tmp_path_factory.mktemp("model_source")
    tokenizer = load_tokenizer(write_vocab(root))
    config = preset("tiny", vocab_size=tokenizer.vocab_size, hidden_dim=32, num_layers=1,
                    num_heads=2, mlp_dim=64, max_positions=64)
    directory = str(root / "hf")
    model_writers.export_huggingface(config, random_pretraining_params(config), tokenizer,
                                     directory)
    assert sorted(os.listdir(directory)) == ["config.json", "model.safetensors",
                                             "tokenizer_config.json", "vocab.txt"]
    train = write_tsv(root / "train.tsv", made_up_sentences(16, seed=0))
    lines = root / "lines.txt"
    lines.write_text("the cat sat on the mat\nhe was happy\n", encoding="utf-8")
    return dict(root=root, directory=directory, train=train, lines=str(lines))


def _finetune(model, workdir, *extra):
    return main(["finetune", "classify", "--model", model["directory"], "--train",
                 model["train"], "--workdir", workdir, "--epochs", "1", "--batch-size", "8",
                 "--max-seq-len", "16", "--no-progress", *extra])


def test_finetune_reads_each_model_file_once_and_a_resumed_run_no_weights(
        hf_model, monkeypatch, capsys):
    workdir = str(hf_model["root"] / "run")
    with counting(monkeypatch, hf_model["directory"]) as counts:
        assert _finetune(hf_model, workdir) == 0  # 16 rows, batch 8 (one row a device): 2 steps
    assert "initialised from " + hf_model["directory"] in capsys.readouterr().out
    # vocab.txt and tokenizer_config.json twice: the tokenizer's one parse, and the byte copy
    # into WORKDIR (the casing travels with the vocabulary).
    assert counts == {"hub.resolve": 1, "config.json": 1, "weights model.safetensors": 1,
                      "vocabulary parses": 1, "vocab.txt": 2, "tokenizer_config.json": 2}
    with counting(monkeypatch, hf_model["directory"]) as counts:
        assert _finetune(hf_model, workdir) == 0  # complete: resumes, trains nothing
    assert "the run is complete" in capsys.readouterr().out
    assert counts["weights model.safetensors"] == 0 and counts["config.json"] == 1


def test_finetune_print_config_reads_the_config_alone(hf_model, monkeypatch, capsys):
    with counting(monkeypatch, hf_model["directory"]) as counts:
        assert _finetune(hf_model, str(hf_model["root"] / "unused"), "--print-config") == 0
    assert "model.hidden_dim" in capsys.readouterr().out
    assert counts == {"hub.resolve": 1, "config.json": 1}
    assert not os.path.exists(hf_model["root"] / "unused")


def test_embed_reads_each_model_file_once(hf_model, monkeypatch, capsys):
    import numpy as np

    output = str(hf_model["root"] / "embeddings.npy")
    with counting(monkeypatch, hf_model["directory"]) as counts:
        assert main(["embed", "--model", hf_model["directory"], "--input", hf_model["lines"],
                     "--output", output, "--no-progress"]) == 0
    assert np.load(output).shape == (2, 32)
    assert counts == {"hub.resolve": 1, "config.json": 1, "weights model.safetensors": 1,
                      "vocabulary parses": 1, "vocab.txt": 1, "tokenizer_config.json": 1}


def test_python_api_reads_each_model_file_once(hf_model, monkeypatch):
    import bert_jax

    with counting(monkeypatch, hf_model["directory"]) as counts:
        model = bert_jax.load(hf_model["directory"])
        vectors = model.embed(["the cat sat on the mat", "he was happy"])
        features = model.features("he was happy", pool="mean")
    assert vectors.shape == (2, 32) and features.shape == (32,)
    assert model.source.name == hf_model["directory"] and model.source.kind == "huggingface"
    assert counts == {"hub.resolve": 1, "config.json": 1, "weights model.safetensors": 1,
                      "vocabulary parses": 1, "vocab.txt": 1, "tokenizer_config.json": 1}


def test_a_source_loads_its_weights_once_while_they_are_held(hf_model, monkeypatch):
    import gc

    from bert_jax.interop import model_source

    with counting(monkeypatch, hf_model["directory"]) as counts:
        source = model_source.resolve(hf_model["directory"])
        assert model_source.resolve(source) is source  # a resolved source passes through
        first = source.load()
        assert source.load() is first and first.config is source.config()
        assert first.tokenizer is source.tokenizer() and source.task_info() is None
        del first
        gc.collect()  # no one holds the weights: the next load reads them again
        source.load()
    assert counts == {"hub.resolve": 1, "config.json": 1, "weights model.safetensors": 2,
                      "vocabulary parses": 1, "vocab.txt": 1, "tokenizer_config.json": 1}
