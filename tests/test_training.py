"""The training loop: resume after kill -9, SIGTERM, NaN, metrics, multi-process = one process.

One uninterrupted 12-step run (module fixture) is the reference every other run is held to.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time

import jax
import numpy as np
import pytest
from tolerances import ENCODER_STEPS, assert_close

from bert_jax.training import checkpointing, trainer
from bert_jax.errors import UserError
from bert_jax.tasks.pretraining_data import apply_settings, prepare_data
from bert_jax.training.metrics_writer import read_scalars
from launch import local
from test_training_support import pretraining, synthetic_factory, tiny_run_config

TESTS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(TESTS)
# A subprocess that trains the tiny config through the library, slowed to 0.3 s a batch.
_CHILD = """
import sys
sys.path.insert(0, {tests!r})
from bert_jax.training import distributed
distributed.initialize(*{init!r})
from bert_jax.training import trainer
from test_training_support import pretraining, synthetic_factory, tiny_run_config
config = tiny_run_config(**{overrides!r})
trainer.train(config, {workdir!r}, **pretraining(config, synthetic_factory(config, delay={delay})),
              show_progress=False)
"""


def _child(workdir, devices, delay=0.0, overrides=None, init=(None, None, None)):
    code = _CHILD.format(tests=TESTS, init=init, overrides=overrides or {}, workdir=workdir,
                         delay=delay)
    # A simulated host as `launch local` starts one: conftest.py's XLA flags (LLVM at -O0
    # among them) with this process's own device count.
    env = local.process_environment(devices)
    return subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _params_at(workdir, step):
    return jax.tree.map(np.asarray, checkpointing.restore_params(
        os.path.join(workdir, "checkpoints", str(step), "params")))


def _assert_identical(actual, expected):
    jax.tree.map(lambda a, b: np.testing.assert_array_equal(a, b), actual, expected)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """12 uninterrupted steps with evaluation every 6 steps."""
    workdir = str(tmp_path_factory.mktemp("reference"))
    config = tiny_run_config(**{"data.eval_files": "synthetic", "eval.every_steps": 6,
                                "eval.num_batches": 2, "eval.batch_size": 8})
    result = trainer.train(config, workdir, **pretraining(config, synthetic_factory(config)),
                           show_progress=False, log=lambda *_: None)
    return dict(workdir=workdir, result=result, params=_params_at(workdir, 12))


def test_reference_run_writes_the_work_directory_and_metrics(reference):
    workdir, result = reference["workdir"], reference["result"]
    assert sorted(checkpointing.Checkpoints(os.path.join(workdir, "checkpoints")).all_steps()) \
        == [3, 6, 9, 12]
    for name in ("model_config.json", "run_config.json"):
        assert os.path.exists(os.path.join(workdir, name))
    assert [step for step, _ in result["evaluations"]] == [0, 6, 12]
    (events,) = os.listdir(os.path.join(workdir, "tensorboard"))
    scalars = read_scalars(os.path.join(workdir, "tensorboard", events))
    logged = [value for _, value in scalars["train/loss"]]
    # TensorBoard keeps the float32 loss itself (simple_value is a float): equal, and 1e-6
    # relative (8 float32 steps) only covers how the float is carried.
    np.testing.assert_allclose(logged, [loss for _, loss in result["losses"]], rtol=1e-6)
    assert [step for step, _ in scalars["train/learning_rate"]] == list(range(1, 13))
    # Warm-up of 3 steps to 1e-3, then 1e-3 * (1 - step / 12): logged before each update,
    # computed in float32 (a product and a quotient: 2 roundings; 1e-6 is 8 steps).
    np.testing.assert_allclose(scalars["train/learning_rate"][1][1], 1e-3 / 3, rtol=1e-6)
    np.testing.assert_allclose(scalars["train/learning_rate"][5][1], 1e-3 * (1 - 5 / 12),
                               rtol=1e-6)
    assert [step for step, _ in scalars["eval/mlm_accuracy"]] == [0, 6, 12]
    assert {"train/grad_norm", "train/tokens_per_second"} <= set(scalars)


def test_sigterm_saves_the_current_step_and_resume_is_bit_identical(reference, tmp_path):
    config = tiny_run_config()
    # SIGTERM arrives while the 5th batch is read: step 5 finishes, is saved, the run stops.
    result = trainer.train(config, str(tmp_path), show_progress=False, log=lambda *_: None,
                           **pretraining(config, synthetic_factory(config, sigterm_at=4)))
    assert result["preempted"] and result["step"] == 5
    assert os.path.isdir(tmp_path / "checkpoints" / "5" / "params")
    result = trainer.train(config, str(tmp_path), show_progress=False, log=lambda *_: None,
                           **pretraining(config, synthetic_factory(config)))
    assert result["step"] == 12
    _assert_identical(_params_at(str(tmp_path), 12), reference["params"])


def test_kill_9_then_resume_is_bit_identical(reference, tmp_path):
    child = _child(str(tmp_path), devices=8, delay=0.3)
    try:
        deadline = time.time() + 500
        while not os.path.isdir(tmp_path / "checkpoints" / "6" / "params"):
            assert child.poll() is None, child.stdout.read()
            assert time.time() < deadline, "no checkpoint at step 6 in time"
            time.sleep(0.1)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    config = tiny_run_config()
    trainer.train(config, str(tmp_path), **pretraining(config, synthetic_factory(config)),
                  show_progress=False, log=lambda *_: None)
    _assert_identical(_params_at(str(tmp_path), 12), reference["params"])


def test_nan_loss_stops_with_a_message_and_keeps_the_last_good_checkpoint(reference, tmp_path):
    config = tiny_run_config()
    with pytest.raises(UserError, match=r"step 8: the loss, the gradient norm or the updated "
                                        r"parameters are not finite.*last good checkpoint is "
                                        r"step 6"):
        trainer.train(config, str(tmp_path), show_progress=False, log=lambda *_: None,
                      **pretraining(config, synthetic_factory(config, nan_at=7)))
    steps = checkpointing.Checkpoints(str(tmp_path / "checkpoints")).all_steps()
    assert sorted(steps) == [3, 6]
    _assert_identical(_params_at(str(tmp_path), 6), _params_at(reference["workdir"], 6))


def test_two_processes_give_the_losses_of_one(reference, tmp_path):
    overrides = {"num_train_steps": 4, "schedule_steps": 12}
    port = _free_port()
    children = [_child(str(tmp_path), devices=4, overrides=overrides,
                       init=(f"127.0.0.1:{port}", 2, index)) for index in range(2)]
    try:
        outputs = [child.communicate(timeout=500)[0] for child in children]
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
    assert all(child.returncode == 0 for child in children), outputs
    (events,) = os.listdir(tmp_path / "tensorboard")
    losses = [value for _, value in read_scalars(str(tmp_path / "tensorboard" / events))
              ["train/loss"]]
    expected = [loss for _, loss in reference["result"]["losses"][:4]]
    # Two processes of 4 devices against one of 8: the same float32 sums split between
    # processes and devices otherwise (ENCODER_STEPS of the loss's scale a step), carried
    # on through 4 updates.
    assert_close(losses, expected, 4 * ENCODER_STEPS)


def test_shards_made_with_another_vocabulary_are_refused(tmp_path):
    from input_pipeline import manifest as manifest_lib
    from input_pipeline.vocabulary_files import read_vocabulary, vocabulary_hash

    vocab_path = tmp_path / "vocab.txt"
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat"]
    vocab_path.write_text("\n".join(tokens) + "\n")
    shards = tmp_path / "shards"
    shards.mkdir()

    def write(vocabulary_tokens):
        (shards / manifest_lib.MANIFEST_NAME).write_text(json.dumps(dict(
            format=manifest_lib.FORMAT, version=manifest_lib.VERSION, shards=[],
            num_instances=0, settings=dict(max_seq_len=16, max_predictions=4),
            vocabulary=dict(hash=vocabulary_hash(vocabulary_tokens), size=8, lowercase=True))))

    config = tiny_run_config(**{"data.train_files": str(shards),
                                "data.vocab_path": str(vocab_path), "model.vocab_size": 0})
    write(read_vocabulary(str(vocab_path)))
    prepared = prepare_data(config)  # the same vocabulary passes
    assert prepared.settings["model.vocab_size"] == len(tokens)
    apply_settings(config, prepared.settings)
    write(tokens[:-1] + ["dog"])
    with pytest.raises(UserError, match=f"{shards}: these shards were made with vocabulary"):
        prepare_data(config)


def test_init_from_a_training_run_takes_its_parameters_and_a_fresh_optimizer(reference,
                                                                             tmp_path):
    from bert_jax import sharding
    from bert_jax.training import initial_state

    config = tiny_run_config(init_from=reference["workdir"])
    run = pretraining(config)
    bundle = trainer._bundle_for(config, sharding.mesh_from_config(config.mesh), run["task"])
    weights = initial_state.load_init_weights(run["init_weights"], config.init_from,
                                              bundle.model_config)
    checkpoints = checkpointing.Checkpoints(str(tmp_path / "checkpoints"))
    state, meta = initial_state.initial_state(bundle, checkpoints, config.seed,
                                              lambda *_: None, weights)
    assert meta is None and int(state.step) == 0
    _assert_identical(jax.device_get(state.params), reference["params"])
    assert all(float(abs(moment).max()) == 0.0 for moment in
               jax.tree.leaves(state.opt_state[1][0].mu))
    checkpoints.close()


def test_init_weights_are_read_once_for_a_fresh_start_and_never_on_resume(reference, tmp_path):
    import shutil

    from bert_jax.tasks.pretraining import task_from_run_config
    from bert_jax.training.initial_state import LoadedWeights
    from bert_jax.training.train_step import model_config_of

    # The reference run's schedule (12 steps): its step, compiled already.
    config = tiny_run_config(init_from="SOURCE", num_train_steps=1, schedule_steps=12)
    calls, lines = [], []

    def init_weights():
        calls.append(1)
        return LoadedWeights("SOURCE", model_config_of(config), reference["params"])

    trainer.train(config, str(tmp_path / "fresh"), task=task_from_run_config(config),
                  dataset_factory=synthetic_factory(config), init_weights=init_weights,
                  show_progress=False, log=lines.append)
    assert calls == [1] and "initialised from SOURCE" in lines
    shutil.copytree(reference["workdir"], tmp_path / "resumed")  # a checkpoint at step 12
    # As a run started from SOURCE records it: a work directory holding a run started from
    # other weights is refused before anything is read (issue 42).
    run_config = tmp_path / "resumed" / "run_config.json"
    run_config.write_text(run_config.read_text().replace('"init_from": ""',
                                                         '"init_from": "SOURCE"'))
    config = tiny_run_config(init_from="SOURCE")
    trainer.train(config, str(tmp_path / "resumed"), task=task_from_run_config(config),
                  dataset_factory=synthetic_factory(config), init_weights=init_weights,
                  show_progress=False, log=lines.append)
    assert calls == [1] and any(line.startswith("the run is complete") for line in lines)
