"""The optimizer recipe (weight-decay mask, schedule, LAMB) and gradient accumulation."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bert_jax import sharding
from bert_jax.tasks.pretraining import task_from_run_config
from bert_jax.training import optimizer, schedules, train_step
from bert_jax.models.bert import BertForPreTraining
from bert_jax.errors import UserError
from bert_jax.run_config import base_config, load_run_config
from bert_jax.run_config.ranges import CHOICES
from test_training_support import synthetic_batch, tiny_run_config


def test_weight_decay_mask_excludes_layer_norm_and_biases():
    config = train_step.model_config_of(tiny_run_config())
    ids = jnp.zeros((1, 8), jnp.int32)
    params = jax.eval_shape(lambda: BertForPreTraining(config).init(
        jax.random.PRNGKey(0), ids, ids, ids, ids[:, :2]))["params"]
    mask = optimizer.decay_mask(params)
    flat = {"/".join(str(k.key) for k in path if hasattr(k, "key")): value
            for path, value in jax.tree_util.tree_leaves_with_path(mask)}
    decayed = sorted(name for name, value in flat.items() if value)
    assert "bert/embeddings/word_embeddings/embedding" in decayed
    assert "bert/layer_0/attention/query/kernel" in decayed
    assert "nsp_head/kernel" in decayed
    for name, value in flat.items():
        excluded = "layer_norm" in name or name.endswith("bias")
        assert value != excluded, name
    assert not flat["mlm_head/output_bias"]
    assert not flat["bert/layer_0/attention_layer_norm/scale"]


def test_schedule_warms_up_then_decays_as_the_original():
    schedule = schedules.warmup_decay_schedule(1e-3, warmup_steps=10, total_steps=100)
    # By hand: step/10 * peak during warm-up, then peak * (1 - step/100), 0 from step 100.
    expected = {0: 0.0, 5: 5e-4, 9: 9e-4, 10: 9e-4, 50: 5e-4, 99: 1e-5, 100: 0.0, 150: 0.0}
    for step, value in expected.items():
        # float32: a quotient and a product, half a step each; 1e-6 relative is 8 steps
        # (atol for the zeros).
        np.testing.assert_allclose(float(schedule(step)), value, rtol=1e-6, atol=1e-12,
                                   err_msg=f"step {step}")


@pytest.mark.parametrize("shape", ["linear", "cosine", "1-sqrt"])
def test_warmup_stable_decay_schedule_equals_the_formula(shape):
    peak, warmup, decay, total = 8e-4, 10, 40, 100
    schedule = schedules.warmup_stable_decay_schedule(peak, warmup, decay, total, shape)
    left = {"linear": lambda done: 1 - done, "cosine": lambda done: 0.5 * (1 + math.cos(
        math.pi * done)), "1-sqrt": lambda done: 1 - math.sqrt(done)}[shape]

    def formula(step):  # plain Python: warm-up from 0, the peak, then the decay to 0 at 100
        if step < warmup:
            return peak * step / warmup
        if step < total - decay:
            return peak
        return peak * left(min(step - (total - decay), decay) / decay)

    # Each boundary and its neighbours, inside each part, the end and past it.
    for step in (0, 1, 5, 9, 10, 11, 35, 59, 60, 61, 70, 80, 99, 100, 130):
        # float32 arithmetic on values of at most the peak: a few roundings of 8e-4.
        np.testing.assert_allclose(float(schedule(step)), formula(step), rtol=0, atol=1e-9,
                                   err_msg=f"{shape} at step {step}")
    assert float(schedule(60)) == np.float32(peak) and float(schedule(100)) == 0.0


def test_a_phase_schedule_starts_at_its_step_and_ends_at_its_final_ratio():
    """Composer's phases (reset_time, alpha_f) as Ettin's files set them: phase 2 decays
    8e-4 -> 0.5 x 8e-4 by 1-sqrt over its steps, phase 3 starts at 4e-4 and decays to
    0.04 x 4e-4; each counted from the update its phase starts at."""
    config = base_config().optimizer
    config.update(schedule="wsd", decay_shape="1-sqrt", learning_rate=8e-4, warmup_steps=0,
                  decay_steps=40, final_learning_rate_ratio=0.5, schedule_start_step=60)
    phase_2 = schedules.make_schedule(config, total_steps=100)
    config.update(learning_rate=4e-4, decay_steps=20, final_learning_rate_ratio=0.04,
                  schedule_start_step=100)
    phase_3 = schedules.make_schedule(config, total_steps=120)

    def formula(peak, ratio, start, length, step):  # alpha_f + (1 - alpha_f)(1 - sqrt(x))
        done = min(max(step - start, 0), length) / length
        return peak * (ratio + (1 - ratio) * (1 - math.sqrt(done)))

    for step in (60, 61, 70, 90, 99, 100):
        # float32: a quotient, a root and two products of values of at most 8e-4.
        np.testing.assert_allclose(float(phase_2(step)), formula(8e-4, 0.5, 60, 40, step),
                                   rtol=0, atol=1e-9, err_msg=f"phase 2 at {step}")
    for step in (100, 101, 110, 119, 120, 150):
        np.testing.assert_allclose(float(phase_3(step)), formula(4e-4, 0.04, 100, 20, step),
                                   rtol=0, atol=1e-9, err_msg=f"phase 3 at {step}")
    # continuous where the published phases meet, and the end is alpha_f x the peak
    assert float(phase_2(100)) == pytest.approx(float(phase_3(100)), rel=1e-6)
    assert float(phase_3(120)) == pytest.approx(0.04 * 4e-4, rel=1e-6)
    config.update(schedule_start_step=120)
    with pytest.raises(UserError, match=r"schedule_start_step \(120\) must be before"):
        schedules.make_schedule(config, total_steps=120)
    config.update(schedule="linear", schedule_start_step=0)
    with pytest.raises(UserError, match="final_learning_rate_ratio is a wsd option"):
        schedules.make_schedule(config, total_steps=120)


def test_schedule_and_optimizer_choices_are_checked():
    config = base_config().optimizer
    config.update(schedule="wsd", warmup_steps=10, decay_steps=95)
    with pytest.raises(UserError, match=r"warmup_steps \(10\) \+ optimizer.decay_steps \(95\) "
                                        r"exceed the schedule's 100 steps"):
        optimizer.make_optimizer(config, total_steps=100)
    config.update(decay_steps=20, decay_shape="sqrt")
    with pytest.raises(UserError, match=r"optimizer.decay_shape must be one of linear, cosine, "
                                        r"1-sqrt; got 'sqrt'"):
        optimizer.make_optimizer(config, total_steps=100)
    config.update(decay_shape="cosine", decouple_learning_rate=True)
    with pytest.raises(UserError, match="decouple_learning_rate is a StableAdamW option"):
        optimizer.make_optimizer(config, total_steps=100)
    assert sorted(schedules.DECAY_SHAPES) == sorted(CHOICES["optimizer.decay_shape"])
    with pytest.raises(UserError, match=r"optimizer.name must be one of adamw, lamb, "
                                        r"stable_adamw; got 'adam'"):
        load_run_config("demo", ["--config.optimizer.name=adam"])


def test_lamb_first_step_matches_a_numpy_reference():
    config = base_config().optimizer
    config.update(name="lamb", learning_rate=0.01, warmup_steps=0, weight_decay=0.1,
                  clip_norm=1.0)
    tx, _ = optimizer.make_optimizer(config, total_steps=1000)
    rng = np.random.default_rng(0)
    params = {"dense": {"kernel": rng.normal(size=(4, 3)).astype(np.float32),
                        "bias": rng.normal(size=(3,)).astype(np.float32)}}
    grads = jax.tree.map(lambda p: (3 * rng.normal(size=p.shape)).astype(np.float32), params)
    updates, _ = tx.update(grads, tx.init(params), params)
    new_params = jax.tree.map(lambda p, u: p + u, params, updates)

    global_norm = np.sqrt(sum(np.sum(g.astype(np.float64) ** 2) for g in
                              jax.tree.leaves(grads)))
    assert global_norm > 1.0  # so the clip is exercised
    for name, decays in (("kernel", True), ("bias", False)):
        p = params["dense"][name].astype(np.float64)
        g = grads["dense"][name] / global_norm  # clipped to norm 1
        m_hat = (0.1 * g) / (1 - 0.9)  # bias-corrected first moment after one step
        v_hat = (0.001 * g * g) / (1 - 0.999)
        update = m_hat / (np.sqrt(v_hat) + 1e-6) + (0.1 * p if decays else 0.0)
        trust_ratio = np.linalg.norm(p) / np.linalg.norm(update)
        expected = p - 0.01 * trust_ratio * update
        # float32 against float64: the new value rounds once at |p| (half a step) and
        # carries the update's ~20 roundings (norms of 12 terms, a root, quotients) at 1% of
        # |p|; 1e-5 relative is 84 steps.
        np.testing.assert_allclose(new_params["dense"][name], expected, rtol=1e-5, atol=1e-7)


def _one_step(config, mesh, batch):
    bundle = train_step.build_train_step(config, mesh, task_from_run_config(config))
    state = bundle.init_state(jax.random.PRNGKey(0))
    batch = {name: jax.device_put(value, bundle.batch_shardings[name])
             for name, value in batch.items()}
    state, metrics = bundle.train_step(state, batch, jax.random.PRNGKey(1))
    return jax.device_get(state.params), jax.device_get(metrics)


def test_gradient_accumulation_equals_one_big_batch():
    config = tiny_run_config(batch_size=16)
    # Dropout draws other masks per micro-batch; without it the two must agree.
    config.model.update(dropout_rate=0.0, attention_dropout_rate=0.0)
    config.optimizer.warmup_steps = 0
    batch = synthetic_batch(0, 16, config.data.seq_len, config.data.max_predictions)
    mesh = sharding.make_mesh(4, 1, 1, devices=jax.devices()[:4])
    params_one, metrics_one = _one_step(config, mesh, batch)
    config.grad_accum_steps = 4
    params_four, metrics_four = _one_step(config, mesh, batch)
    # Four micro-batches split the same float32 sums otherwise: tolerances.ENCODER_STEPS (64)
    # of each value, inside 1e-5 relative (84 steps). One update then moves the parameters
    # by the learning rate's size, the two runs' by float32 steps of it apart, and each
    # rounds once at the parameter: 1e-6 is 8 steps of a parameter near 1, rtol 1e-4 the
    # room for those near 0.
    for name in ("loss", "mlm_loss", "nsp_loss", "mlm_accuracy", "grad_norm"):
        np.testing.assert_allclose(metrics_four[name], metrics_one[name], rtol=1e-5,
                                   err_msg=name)
    assert metrics_four["num_predictions"] == metrics_one["num_predictions"]
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6),
                 params_four, params_one)
