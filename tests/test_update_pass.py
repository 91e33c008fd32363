"""The train step's update in one pass over the state (issue 33) gives the old step's numbers.

The old step chose between the new and the old state after a reduction over the new
parameters, which made XLA read the parameters and both moments twice; the new one decides
on the loss and the gradient norm before the update and checks the new parameters after.
Here both run side by side on the same states and batches: bit-identical states and
metrics on finite steps, the state kept on a non-finite loss.
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from test_training_support import SyntheticDataset, tiny_run_config

from bert_jax import sharding
from bert_jax.tasks.pretraining import task_from_run_config
from bert_jax.training import global_reductions
from bert_jax.training import train_step as train_step_module
from bert_jax.training.train_step import TrainState


def old_train_step(state, batch, rng, *, task, model, tx, schedule, mesh):
    """The step before issue 33 (grad_accum_steps 1): the finite check after the update,
    then a select over the whole state."""
    key = jax.random.fold_in(rng, state.step)
    grads, sums, counts = train_step_module._accumulated_gradients(
        task, model, state.params, batch, key, 1, mesh)
    # The step's own norm (issue 43: summed in another order than optax.tree.norm, the
    # clip's too), so that the metrics compare bit for bit as well.
    grad_norm = global_reductions.global_norm(grads)
    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    metrics = task.means(sums, counts)
    params_finite = jax.tree.reduce(jnp.logical_and, jax.tree.map(
        lambda leaf: jnp.all(jnp.isfinite(leaf)), params), jnp.bool_(True))
    finite = jnp.isfinite(metrics["loss"]) & jnp.isfinite(grad_norm) & params_finite
    new_state = TrainState(step=state.step + 1, params=params, opt_state=opt_state)
    new_state = jax.tree.map(lambda new, old: jnp.where(finite, new, old), new_state, state)
    metrics.update(counts)
    metrics.update(grad_norm=grad_norm, learning_rate=schedule(state.step),
                   finite=finite.astype(jnp.float32))
    return new_state, metrics


def _config():
    return tiny_run_config(**{"optimizer.clip_norm": 0.05})  # clipping on: scale < 1


def _bundle():
    config = _config()
    mesh = sharding.make_mesh(devices=jax.devices()[:1])
    return train_step_module.build_train_step(config, mesh, task_from_run_config(config))


@pytest.fixture(scope="module")
def steps():
    config = _config()
    mesh = sharding.make_mesh(devices=jax.devices()[:1])
    bundle = _bundle()
    old = jax.jit(lambda state, batch, rng: old_train_step(
        state, batch, rng, task=bundle.task, model=bundle.model,
        tx=train_step_module.optimizer.make_optimizer(config.optimizer, 12)[0],
        schedule=bundle.schedule, mesh=mesh))
    batches = SyntheticDataset(8, config.data.seq_len, config.data.max_predictions)
    return bundle, old, [next(batches) for _ in range(3)]


DEFAULT_EMITTERS = {"xla_cpu_use_fusion_emitters": True}


def _compiled_with_default_emitters(jitted, *example):
    """Compiled with XLA's CPU fusion emitters, which tests/conftest.py turns off to compile
    faster: the two steps are different programs, and "bit-identical" holds for the fusions
    and reduction order users' programs get (LLVM's -O0 does not reorder them). The older
    emitters leave reductions unfused, and the two steps' sums then add in orders that
    differ by a rounding (1.2e-6 of a value, Intel Xeon Ice Lake)."""
    return jitted.lower(*example).compile(compiler_options=DEFAULT_EMITTERS)


def _same(actual, expected):
    for left, right in zip(jax.tree.leaves(actual), jax.tree.leaves(expected)):
        np.testing.assert_array_equal(np.asarray(left), np.asarray(right))


def test_finite_steps_are_bit_identical_to_the_old_step(steps):
    bundle, old, batches = steps
    new_state = bundle.init_state(jax.random.PRNGKey(0))
    old_state = bundle.init_state(jax.random.PRNGKey(0))
    rng = jax.random.PRNGKey(1)
    old = _compiled_with_default_emitters(old, old_state, batches[0], rng)
    new = _compiled_with_default_emitters(bundle.train_step, new_state, batches[0], rng)
    for batch in batches:
        old_state, old_metrics = old(old_state, batch, rng)
        new_state, new_metrics = new(new_state, batch, rng)
        _same(new_state, old_state)
        _same(new_metrics, old_metrics)
    assert int(new_state.step) == 3 and float(new_metrics["finite"]) == 1.0
    assert float(new_metrics["grad_norm"]) > 0.05  # the clipping scaled the update


def test_a_non_finite_loss_keeps_the_state_as_the_old_step_did(steps):
    bundle, old, batches = steps
    poisoned = dict(batches[0], masked_lm_weights=np.full_like(
        batches[0]["masked_lm_weights"], np.nan))
    start = bundle.init_state(jax.random.PRNGKey(0))
    expected = jax.device_get(start)
    rng = jax.random.PRNGKey(1)
    old_state, old_metrics = old(bundle.init_state(jax.random.PRNGKey(0)), poisoned, rng)
    new_state, new_metrics = bundle.train_step(start, poisoned, rng)
    _same(new_state, old_state)
    _same(new_state, expected)
    assert float(new_metrics["finite"]) == float(old_metrics["finite"]) == 0.0


def test_the_cpus_conditional_and_the_selects_of_other_platforms_take_the_same_steps(
        steps, monkeypatch):
    """On a CPU the update runs inside a conditional (`train_step._update_if`); a GPU or TPU
    program chooses by selects after it. Both are traced here on the CPU: bit-identical
    states on finite steps and on a non-finite one."""
    bundle, _, batches = steps
    rng = jax.random.PRNGKey(1)
    example = (bundle.init_state(jax.random.PRNGKey(0)), batches[0], rng)
    assert "stablehlo.case" in bundle.train_step.lower(*example).as_text()
    monkeypatch.setattr(train_step_module, "traced_platform", lambda: "gpu")
    lowered = _bundle().train_step.lower(*example)  # traced anew, under the patch
    assert "stablehlo.case" not in lowered.as_text()
    selecting = lowered.compile(compiler_options=DEFAULT_EMITTERS)
    conditional = _compiled_with_default_emitters(bundle.train_step, *example)
    poisoned = dict(batches[0], masked_lm_weights=np.full_like(
        batches[0]["masked_lm_weights"], np.nan))
    states = [bundle.init_state(jax.random.PRNGKey(0)) for _ in range(2)]
    for batch in [*batches[:2], poisoned]:
        states[0], conditional_metrics = conditional(states[0], batch, rng)
        states[1], selecting_metrics = selecting(states[1], batch, rng)
        _same(states[0], states[1])
        _same(conditional_metrics, selecting_metrics)
    assert int(states[0].step) == 2 and float(conditional_metrics["finite"]) == 0.0
