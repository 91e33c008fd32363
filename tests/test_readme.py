"""The README's "Using a model" commands and "From Python" code run as written, in a
directory where `runs/demo` is a tiny model (what `make pretrain` leaves, made small)."""

import os
import re
import shlex
import subprocess

import numpy as np
from interop_helpers import random_pretraining_params, write_vocab

from bert_jax import cli, model_io
from bert_jax.config import preset
from input_pipeline.tokenization import load_tokenizer

README = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.md")
# Sections whose blocks are cheap enough to run here; the others need data, a pod or a server.
RUN_SECTIONS = ("Using a model", "From Python")


def readme_blocks(section: str) -> list[tuple[str, str]]:
    """(language, code) of each fenced block under the `### section` heading."""
    text = open(README, encoding="utf-8").read()
    body = re.split(r"^#+ ", text.split(f"### {section}\n", 1)[1], flags=re.MULTILINE)[0]
    return re.findall(r"^```(\w+)\n(.*?)^```", body, flags=re.MULTILINE | re.DOTALL)


def run_bash_block(code: str) -> None:
    """`bert-jax ...` lines through the CLI in this process (one JAX start-up for all), the
    rest through bash."""
    for line in code.replace("\\\n", " ").splitlines():
        argv = shlex.split(line, comments=True)
        if not argv:
            continue
        if argv[0] == "bert-jax":
            assert cli.main(argv[1:]) == 0, line
        else:
            subprocess.run(["bash", "-c", line], check=True)


def test_readme_using_a_model_runs_as_written(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    tokenizer = load_tokenizer(write_vocab(tmp_path))
    config = preset("tiny", vocab_size=tokenizer.vocab_size)  # as configs/demo.py
    model_io.save_model(config, random_pretraining_params(config, seed=1), tokenizer,
                        "runs/demo")
    blocks = [block for section in RUN_SECTIONS for block in readme_blocks(section)]
    assert [language for language, _ in blocks] == ["bash", "python"]
    run_bash_block(blocks[0][1])
    features = np.load("features.npz")["features"]
    assert features.shape == (2, 2 * config.hidden_dim)  # two sentences, two layers joined
    assert np.load("layers.npz")["attention_layer_-1"].shape[:2] == (2, config.num_heads)
    assert "[MASK] 1:" in capsys.readouterr().out
    assert os.path.exists("runs/demo_hf/model.safetensors")
    exec(compile(blocks[1][1], "README.md", "exec"), {})
    printed = capsys.readouterr().out
    assert printed.startswith(f"(2, {config.hidden_dim}) (2, {config.hidden_dim}) [(")
    reloaded, params, _ = model_io.load_model("runs/demo_model")
    assert reloaded == config
