"""The task seam: run-time precision outside the saved model, pre-training as a task, and a
training system that imports no task (the caller gives it the task and the weights)."""

import ast
import json
import os

import jax
import numpy as np
import pytest

from bert_jax import sharding
from bert_jax.interop import model_source, source_kinds
from bert_jax.models.config import BertConfig, Precision
from bert_jax.tasks.pretraining import PretrainingTask, task_from_run_config
from bert_jax.training import train_step
from input_pipeline import schema
from test_training_support import synthetic_batch, synthetic_factory, tiny_run_config

TRAINING = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "bert_jax", "training")


def test_old_model_configs_with_precision_keys_still_load(tmp_path):
    values = dict(BertConfig(num_layers=1).to_dict(), dtype="bfloat16", param_dtype="float32",
                  remat=True)
    path = tmp_path / source_kinds.MODEL_CONFIG
    path.write_text(json.dumps(values))
    directory = str(tmp_path)
    config = model_source.ModelSource(directory, directory, "bert-jax", directory, str(path),
                                      None).config()
    assert config == BertConfig(num_layers=1)
    assert "dtype" not in config.to_dict()


def test_pretraining_batch_schema_is_the_shard_schema():
    task = PretrainingTask(max_predictions=5)
    shapes = {name: shape_of(4, 16) for name, (_, shape_of) in task.batch_schema().items()}
    assert list(shapes) == list(schema.FEATURES)
    assert shapes["masked_lm_ids"] == (4, 5) and shapes["input_ids"] == (4, 16)
    assert shapes["next_sentence_labels"] == (4,)


def _first_step(config):
    mesh = sharding.make_mesh(1, 1, 1, devices=jax.devices()[:1])
    bundle = train_step.build_train_step(config, mesh, task_from_run_config(config))
    state = bundle.init_state(jax.random.PRNGKey(0))
    batch = synthetic_batch(0, config.batch_size, config.data.seq_len,
                            config.data.max_predictions)
    return bundle, bundle.train_step(state, jax.device_put(batch, bundle.batch_shardings),
                                     jax.random.PRNGKey(1))


def test_bfloat16_compute_keeps_float32_parameters_and_a_close_loss():
    config = tiny_run_config()
    config.model.update(dropout_rate=0.0, attention_dropout_rate=0.0)
    _, (_, float32_metrics) = _first_step(config)
    config.precision.dtype = "bfloat16"
    bundle, (state, metrics) = _first_step(config)
    assert {leaf.dtype for leaf in jax.tree.leaves(state.params)} == {np.dtype("float32")}
    assert bundle.model.precision == Precision(dtype="bfloat16")
    # bfloat16 keeps 8 significant bits (a step is 2**-7, 0.8% relative); the loss, a mean
    # of many bf16-rounded terms, lands within a step or so: 2e-2 is 2.5 steps.
    np.testing.assert_allclose(metrics["loss"], float32_metrics["loss"], rtol=2e-2)
    assert float(metrics["loss"]) != float(float32_metrics["loss"])  # bf16 did compute


class _FrozenEncoder(PretrainingTask):
    def trainable(self):
        return lambda names: names[0] != "bert"


def test_a_frozen_encoder_stays_put_while_the_heads_train():
    config = tiny_run_config()
    mesh = sharding.make_mesh(1, 1, 1, devices=jax.devices()[:1])
    bundle = train_step.build_train_step(config, mesh, task=_FrozenEncoder(4))
    state = bundle.init_state(jax.random.PRNGKey(0))
    before = jax.device_get(state.params)
    batch = synthetic_batch(0, config.batch_size, config.data.seq_len, 4)
    for _ in range(4):  # past the zero learning rate of warm-up step 0
        state, metrics = bundle.train_step(state, jax.device_put(batch, bundle.batch_shardings),
                                           jax.random.PRNGKey(1))
    after = jax.device_get(state.params)
    jax.tree.map(np.testing.assert_array_equal, after["bert"], before["bert"])
    assert not np.array_equal(after["nsp_head"]["kernel"], before["nsp_head"]["kernel"])
    assert float(metrics["grad_norm"]) > 0


def _task_imports(source: str, package: str = "bert_jax.training") -> list[str]:
    """Every import of bert_jax.tasks in `source`: top-level or inside a function, absolute,
    relative or by importlib with a constant name."""
    found = []
    for node in ast.walk(ast.parse(source)):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package's parent `level - 1` times up
                parent = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(parent + ([base] if base else []))
            names = [base] + [f"{base}.{alias.name}" for alias in node.names]
        elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)
              and getattr(node.func, "attr", getattr(node.func, "id", "")) in (
                  "import_module", "__import__")):
            names = [node.args[0].value]
        tasks = [name for name in names
                 if name == "bert_jax.tasks" or name.startswith("bert_jax.tasks.")]
        if tasks:
            found.append(f"line {node.lineno}: {tasks[0]}")
    return found


def test_the_import_check_finds_every_form_of_import():
    source = ("import bert_jax.tasks.pretraining\n"
              "from bert_jax import tasks\n"
              "def lazy():\n"
              "    from ..tasks.pretraining import PretrainingTask\n"
              "    importlib.import_module('bert_jax.tasks.classification')\n"
              "from bert_jax.training import task\n")
    assert [line.split(":")[0] for line in _task_imports(source)] == [
        "line 1", "line 2", "line 4", "line 5"]


def test_the_training_system_imports_no_task():
    offenders = {}
    for name in sorted(os.listdir(TRAINING)):
        if name.endswith(".py"):
            with open(os.path.join(TRAINING, name), encoding="utf-8") as file:
                found = _task_imports(file.read())
            if found:
                offenders[name] = found
    assert offenders == {}


def test_init_from_without_init_weights_is_a_programming_error(tmp_path):
    from bert_jax.training import trainer

    config = tiny_run_config(init_from="SOURCE")
    with pytest.raises(ValueError, match="init_from is 'SOURCE' but no init_weights"):
        trainer.train(config, str(tmp_path / "run"), task=task_from_run_config(config),
                      dataset_factory=synthetic_factory(config), show_progress=False)
    assert not (tmp_path / "run").exists()  # refused before anything was written
