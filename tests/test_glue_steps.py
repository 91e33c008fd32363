"""`bert-jax glue --every-checkpoint N`: the suite at a pre-training run's saved steps, a table
per step and a PNG per task of score against step and tokens seen."""

import json
import os

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest
from finetune_helpers import tiny_model_directory
from interop_helpers import random_pretraining_params
from matplotlib import image

from bert_jax.cli import main
from bert_jax.errors import UserError
from bert_jax.evaluation import glue_steps
from bert_jax.interop import model_source
from input_pipeline.glue_examples import write_glue_layout

STEPS = (2, 4, 6)


def _pretraining_run(root) -> str:
    """A run's files as the trainer leaves them: model_config.json, vocab.txt, run_config.json
    and checkpoints/<step>/params, other random parameters at each step."""
    model = tiny_model_directory(root)
    run = root / "run"
    (run / "checkpoints").mkdir(parents=True)
    for name in ("model_config.json", "vocab.txt"):
        (run / name).write_bytes(open(os.path.join(model, name), "rb").read())
    (run / "run_config.json").write_text(json.dumps({"batch_size": 8, "data": {"seq_len": 32}}))
    config = model_source.resolve(model).config()
    checkpointer = ocp.StandardCheckpointer()
    for step in STEPS:
        params = jax.tree.map(np.asarray, random_pretraining_params(config, seed=step))
        checkpointer.save(str(run / "checkpoints" / str(step) / "params"), params)
    checkpointer.wait_until_finished()
    checkpointer.close()
    return str(run)


def test_every_other_checkpoint_gives_a_row_per_step_and_a_png_per_task(tmp_path):
    run = _pretraining_run(tmp_path)
    assert glue_steps.chosen_steps(run, 2) == [2, 6] and glue_steps.chosen_steps(run, 5) == [2, 6]
    data = str(tmp_path / "glue")
    write_glue_layout(data, train_rows=16, dev_rows=8)
    workdir = str(tmp_path / "steps")
    assert main(["glue", "--model", run, "--data", data, "--workdir", workdir, "--tasks",
                 "stsb", "--every-checkpoint", "2", "--learning-rates", "1e-3", "--seeds",
                 "0", "--epochs", "1", "--batch-size", "8", "--max-seq-len", "16",
                 "--no-progress"]) == 0
    rows = json.load(open(os.path.join(workdir, "glue_steps.json")))
    assert sorted(rows) == ["2", "6"]
    for step, row in rows.items():
        assert row.pop("tokens_seen") == int(step) * 8 * 32
        assert row == json.load(open(os.path.join(workdir, "steps", step, "glue.json")))
        assert json.load(open(os.path.join(workdir, "steps", step, "glue_suite.json")))[
            "model"] == os.path.join(run, "checkpoints", step)
    table = open(os.path.join(workdir, "glue_steps.md")).read().splitlines()
    assert table[2].startswith("| 2 | 512 | ") and table[3].startswith("| 6 | 1,536 | ")
    pixels = image.imread(os.path.join(workdir, "glue_stsb.png"))
    assert pixels.ndim == 3 and pixels.shape[0] > 100


def test_every_checkpoint_needs_a_pretraining_run(tmp_path):
    with pytest.raises(UserError, match="needs a pre-training run directory"):
        glue_steps.chosen_steps(tiny_model_directory(tmp_path), 1)
