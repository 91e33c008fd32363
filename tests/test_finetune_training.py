"""A fine-tuning run resumes bit-identically; a fine-tuning step does not depend on the mesh."""

import os
import signal

import jax
import numpy as np
from finetune_helpers import made_up_sentences, tiny_model_directory, write_tsv
from tolerances import ENCODER_STEPS, assert_close

from bert_jax import sharding
from bert_jax.tasks.classification import ClassificationTask
from bert_jax.training import batching, checkpointing, finetune, train_step
from input_pipeline.tasks.columns import ColumnSpec

SETTINGS = finetune.Settings(epochs=2, learning_rate=2e-3, batch_size=8, max_seq_len=32)


def _run(model, train, dev, workdir):
    task = ClassificationTask(["neg", "pos"], ColumnSpec())
    return finetune.finetune(task, model, train, dev, str(workdir), SETTINGS,
                             show_progress=False, log=lambda *_: None)


def _final_params(workdir, step):
    return jax.tree.map(np.asarray, checkpointing.restore_params(
        os.path.join(workdir, "checkpoints", str(step), "params")))


def test_an_interrupted_fine_tuning_run_resumes_bit_identically(tmp_path, monkeypatch):
    model = tiny_model_directory(tmp_path)
    train = write_tsv(tmp_path / "train.tsv", made_up_sentences(40, seed=0))  # 5 steps an epoch
    dev = write_tsv(tmp_path / "dev.tsv", made_up_sentences(12, seed=1))
    reference = _run(model, train, dev, tmp_path / "reference")
    assert reference["step"] == 10

    original = batching.BucketedBatches.__next__
    calls = []

    def interrupted(self):  # SIGTERM while batch 7 (epoch 2) is read: step 7 is saved
        calls.append(1)
        if len(calls) == 7:
            os.kill(os.getpid(), signal.SIGTERM)
        return original(self)

    monkeypatch.setattr(batching.BucketedBatches, "__next__", interrupted)
    resumed_dir = tmp_path / "resumed"
    assert _run(model, train, dev, resumed_dir)["exit_status"] == 143  # 128 + SIGTERM
    assert sorted(checkpointing.Checkpoints(str(resumed_dir / "checkpoints")).all_steps())[-1] == 7
    monkeypatch.setattr(batching.BucketedBatches, "__next__", original)
    resumed = _run(model, train, dev, resumed_dir)
    jax.tree.map(np.testing.assert_array_equal, _final_params(str(resumed_dir), 10),
                 _final_params(str(tmp_path / "reference"), 10))
    assert resumed["best"] == reference["best"] and resumed["final"] == reference["final"]


def _losses(mesh, batches, config):
    task = ClassificationTask(["neg", "pos", "other"], ColumnSpec())
    bundle = train_step.build_train_step(config, mesh, task=task)
    state = bundle.init_state(jax.random.PRNGKey(0))
    losses = []
    for batch in batches:
        state, metrics = bundle.train_step(state, jax.device_put(batch, bundle.batch_shardings),
                                           jax.random.PRNGKey(1))
        losses.append(float(metrics["loss"]))
    return np.array(losses)


def test_fine_tuning_steps_do_not_depend_on_the_mesh():
    from test_training_support import tiny_run_config

    config = tiny_run_config()
    config.optimizer.warmup_steps = 0
    rng = np.random.default_rng(0)
    features = dict(input_ids=rng.integers(5, 64, (38, 16)).astype(np.int32),
                    segment_ids=np.zeros((38, 16), np.int32),
                    # 13 to 16 real tokens: every batch is in the 16-token bucket, so each
                    # mesh compiles one step (the buckets' recompiles are not the question)
                    input_mask=(np.arange(16)[None] < rng.integers(13, 17, (38, 1))
                                ).astype(np.int32),
                    labels=rng.integers(0, 3, 38).astype(np.int32),
                    weights=np.ones(38, np.float32))
    features["input_ids"] *= features["input_mask"]
    batches = batching.BucketedBatches(features, {"input_ids", "segment_ids", "input_mask"}, 8,
                                       16, seed=3)
    batches = [next(batches) for _ in range(5)]  # the last one holds filler rows
    assert min(batch["weights"].sum() for batch in batches) < 8
    reference = _losses(sharding.make_mesh(1, 1, 1, devices=jax.devices()[:1]), batches, config)
    assert reference[-1] != reference[0]
    for sizes in [(8, 1, 1), (2, 2, 2)]:
        # Another layout splits the same float32 sums between devices (ENCODER_STEPS of the
        # loss's scale a step), and five updates carry that on: 5 x ENCODER_STEPS.
        assert_close(_losses(sharding.make_mesh(*sizes), batches, config), reference,
                     5 * ENCODER_STEPS, err_msg=str(sizes))
