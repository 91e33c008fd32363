"""Batch-size warm-up by gradient-accumulation counts (bert_jax/training/batch_warmup.py):
one compiled step for every count, each update the mean over its micro-batches, and a
resume across a count change bit-identical to the uninterrupted run."""

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bert_jax import sharding
from bert_jax.errors import UserError
from bert_jax.run_config import load_run_config
from bert_jax.tasks.pretraining import task_from_run_config
from bert_jax.training import batch_warmup, checkpointing, train_step, trainer
from bert_jax.training.metrics_writer import read_scalars
from test_training_support import pretraining, synthetic_batch, synthetic_factory, tiny_run_config

# 32 sequences a step on the 8 test devices: 4 micro-batches of 8 (one row a device each);
# the step takes 1 micro-batch at steps 0-1, 2 at 2-3, 3 at 4-5 and all 4 from step 6.
WARMUP = {"batch_size": 32, "grad_accum_steps": 4, "batch_warmup.steps": 6,
          "batch_warmup.start_batch_size": 8}
SIZES = [8, 8, 16, 16, 24, 24, 32, 32, 32, 32, 32, 32]


def test_the_count_grows_linearly_in_whole_micro_batches():
    warmup = batch_warmup.from_run_config(tiny_run_config(**WARMUP))
    assert [warmup.batch_size(step) for step in range(12)] == SIZES
    # ModernBERT's 768 -> 4,608 sequences in micro-batches of 768 over 600 steps.
    config = tiny_run_config(**{"batch_size": 4608, "grad_accum_steps": 6,
                                "batch_warmup.steps": 600,
                                "batch_warmup.start_batch_size": 768})
    warmup = batch_warmup.from_run_config(config)
    assert [warmup.batch_size(step) for step in (0, 119, 120, 479, 480, 599, 600, 10**6)] == [
        768, 768, 1536, 3072, 3840, 3840, 4608, 4608]
    # The compiled step evaluates the same table on a traced step.
    assert [int(warmup.micro_batches(jnp.int32(step), jnp)) for step in (0, 120, 599, 600)] \
        == [1, 2, 5, 6]


@pytest.mark.parametrize("overrides, message", [
    ({"batch_warmup.start_batch_size": 12}, r"start_batch_size 12 must be a multiple of the "
                                            r"micro-batch \(batch_size / grad_accum_steps = 8\)"),
    ({"batch_warmup.start_batch_size": 40}, "at most batch_size 32"),
    ({"grad_accum_steps": 1}, "batch_warmup.steps is set but grad_accum_steps is 1"),
])
def test_a_warmup_that_cannot_be_run_is_refused_when_the_config_loads(overrides, message):
    arguments = [f"--config.{key}={value}" for key, value in {**WARMUP, **overrides}.items()]
    with pytest.raises(UserError, match=message):
        load_run_config("demo", arguments)


def _bundle(config, mesh):
    return train_step.build_train_step(config, mesh, task_from_run_config(config))


def test_a_warmup_update_is_the_mean_over_its_micro_batches_and_compiles_once():
    no_dropout = {"model.dropout_rate": 0.0, "model.attention_dropout_rate": 0.0}
    # Dropout draws other masks per micro-batch; without it the two must agree.
    config = tiny_run_config(**WARMUP, **no_dropout)
    mesh = sharding.make_mesh(devices=jax.devices()[:4])  # 4 devices: compiles in half the time
    bundle = _bundle(config, mesh)
    seq_len, predictions = config.data.seq_len, config.data.max_predictions
    micro_batches = [synthetic_batch(index, 8, seq_len, predictions) for index in range(4)]
    start = jax.device_get(bundle.init_state(jax.random.PRNGKey(0)))

    def state_at(step):  # a new copy each time: the train step donates (deletes) its input
        return jax.device_put(start.replace(step=np.int32(step)), bundle.state_shardings)

    outputs = {}
    for step in range(8):  # every count, from a state at that step (the schedule's rate)
        count = bundle.batch_warmup.micro_batches(step)
        warm = jax.device_put(batch_warmup.step_batch(micro_batches[:count], 4),
                              bundle.batch_shardings)
        outputs[step] = jax.device_get(bundle.train_step(state_at(step), warm,
                                                         jax.random.PRNGKey(1)))
        assert outputs[step][1]["batch_size"] == 8 * count
    # Counts 1 to 4 ran in one program: no compilation per count.
    assert bundle.train_step._cache_size() == 1

    # Step 4 takes 3 of the 4 slots: the same as one plain batch of those 24 rows.
    plain = _bundle(tiny_run_config(batch_size=24, grad_accum_steps=1, **no_dropout), mesh)
    rows = {name: np.concatenate([batch[name] for batch in micro_batches[:3]])
            for name in micro_batches[0]}
    plain_state, plain_metrics = jax.device_get(plain.train_step(
        state_at(4), jax.device_put(rows, plain.batch_shardings), jax.random.PRNGKey(1)))
    warm_state, warm_metrics = outputs[4]
    # The counts are exact sums of 0/1 weights: equal, not close.
    for name in ("num_predictions", "num_sequences", "num_real_tokens"):
        assert warm_metrics[name] == plain_metrics[name], name
    # The same sums over the same counts in another order (micro-batch by micro-batch):
    # float32 roundings of values of order 1, relative 1e-5 of them.
    for name in ("loss", "mlm_loss", "nsp_loss", "grad_norm"):
        np.testing.assert_allclose(warm_metrics[name], plain_metrics[name], rtol=1e-5,
                                   err_msg=name)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6),
                 warm_state.params, plain_state.params)


def _params_at(workdir, step):
    return jax.tree.map(np.asarray, checkpointing.restore_params(
        os.path.join(workdir, "checkpoints", str(step), "params")))


def _quiet(**kwargs):
    return dict(show_progress=False, log=lambda *_: None, **kwargs)


def test_resume_across_a_count_change_is_bit_identical(tmp_path):
    config = tiny_run_config(**WARMUP, num_train_steps=8)
    reference = str(tmp_path / "reference")
    trainer.train(config, reference, **pretraining(config, synthetic_factory(config)), **_quiet())
    (events,) = os.listdir(os.path.join(reference, "tensorboard"))
    logged = read_scalars(os.path.join(reference, "tensorboard", events))["train/batch_size"]
    assert [size for _, size in logged] == SIZES[:8]  # each update's batch, logged at its step
    # The run, counts 1 to 4, compiled one train step.
    bundle = trainer._bundle_for(config, sharding.mesh_from_config(config.mesh),
                                 task_from_run_config(config))
    assert bundle.train_step._cache_size() == 1

    # SIGTERM while reading micro-batch 5 (the second of step 3's two): step 3 finishes, is
    # saved as step 4, and the run stops; the resumed run starts at step 4, with 3
    # micro-batches where the stopped one took 2.
    resumed = str(tmp_path / "resumed")
    result = trainer.train(config, resumed, **pretraining(
        config, synthetic_factory(config, sigterm_at=5)), **_quiet())
    assert result["preempted"] and result["step"] == 4
    meta = checkpointing.Checkpoints(os.path.join(resumed, "checkpoints")).restore(
        4, None, None)[2]
    assert meta["data"] == [{"position": 1 + 1 + 2 + 2}]  # micro-batches read by steps 0-3
    trainer.train(config, resumed, **pretraining(config, synthetic_factory(config)), **_quiet())
    jax.tree.map(np.testing.assert_array_equal, _params_at(resumed, 8),
                 _params_at(reference, 8))
