"""mmBERT's and Ettin's published phases as configs (run_config/mmbert_recipe.py,
ettin_recipe.py): each phase's settings as the released training files give them, the
steps from the token budgets, and the learning rate over the phases as Composer's
warmup_stable_decay and one_minus_sqrt schedulers give it, phase by phase."""

import math

import pytest

from bert_jax.tasks import phases
from bert_jax.training import schedules

STEP_TOKENS = 4608 * 1024  # every phase: the files' 4,608 rows of 1,024 tokens
# (config, phase) -> (tokens, row length, masking, peak, RoPE base, tau, sources): the
# files' values (mmBERT's masking and budgets: the paper and its data cards).
PUBLISHED = {
    ("mmbert_base", "pretrain"): (2.3e12, 1024, 0.30, 8e-4, 1e4, 0.7, ["high_resource"]),
    ("mmbert_base", "extension"): (600e9, 8192, 0.15, 8e-4, 1.6e5, 0.5,
                                   ["high_resource", "mid_resource"]),
    ("mmbert_base", "decay"): (100e9, 8192, 0.05, 8e-4, 1.6e5, 0.3,
                               ["high_resource", "low_resource", "mid_resource"]),
    ("ettin_150m", "pretrain"): (1.7e12, 1024, 0.30, 8e-4, 1e4, 0.0, ["pretraining"]),
    ("ettin_150m", "extension"): (250e9, 8192, 0.30, 8e-4, 1.6e5, 0.0, ["extension"]),
    ("ettin_150m", "decay"): (50e9, 8192, 0.15, 4e-4, 1.6e5, 0.0, ["prolong"]),
}
OPTIMIZER = {"mmbert_base": (0.9, 0.95, 1e-8, 8e-5), "ettin_150m": (0.9, 0.98, 1e-6, 1e-5)}
# (config, phase) -> (final ratio, decays): Composer's alpha_f where the phase decays.
DECAY = {("mmbert_base", "pretrain"): (0.0, False), ("mmbert_base", "extension"): (0.0, False),
         ("mmbert_base", "decay"): (0.02, True), ("ettin_150m", "pretrain"): (0.0, False),
         ("ettin_150m", "extension"): (0.5, True), ("ettin_150m", "decay"): (0.04, True)}


def _phases(name):
    return dict(phases.load_phases(name, ["--config.model.vocab_size=1024"]))


@pytest.mark.parametrize("name", ["mmbert_base", "ettin_150m"])
def test_each_phase_holds_the_published_settings(name):
    loaded = _phases(name)
    assert list(loaded) == ["pretrain", "extension", "decay"]
    start = 0
    for phase, config in loaded.items():
        tokens, length, masking, peak, rope, tau, sources = PUBLISHED[name, phase]
        assert config.data.seq_len == length and config.batch_size * length == STEP_TOKENS
        assert (config.data.masking_rate, config.data.mixture_tau) == (masking, tau)
        assert sorted(config.data.sources) == sources
        assert config.data.sources[sources[0]].files == f"{sources[0]}_{length}"
        assert config.model.global_rope_theta == config.model.local_rope_theta == rope
        optimizer = config.optimizer
        assert optimizer.name == "stable_adamw" and optimizer.decouple_learning_rate
        assert (optimizer.beta1, optimizer.beta2, optimizer.epsilon,
                optimizer.weight_decay) == OPTIMIZER[name]
        assert optimizer.learning_rate == peak and optimizer.schedule_start_step == start
        ratio, decays = DECAY[name, phase]
        steps = config.num_train_steps - start
        assert optimizer.final_learning_rate_ratio == ratio
        assert optimizer.decay_steps == (steps if decays else 0)
        if phase == "pretrain":  # the batch warms up from 768 rows: more, shorter steps
            assert config.batch_warmup.start_batch_size == 768
            assert tokens / STEP_TOKENS < steps < tokens / STEP_TOKENS + config.batch_warmup.steps
        else:  # the phase's budget in whole steps
            assert steps == math.ceil(tokens / STEP_TOKENS)
        start = config.num_train_steps


def _composer(peak, ratio, length, step, warmup=0):
    """Composer's warmup_stable_decay / one_minus_sqrt over a phase of `length` steps
    (t_decay the whole phase; ratio None: the peak held), `step` counted in the phase."""
    if step < warmup:
        return peak * step / warmup
    if ratio is None:
        return peak
    return peak * (ratio + (1 - ratio) * (1 - math.sqrt(min(step, length) / length)))


@pytest.mark.parametrize("name", ["mmbert_base", "ettin_150m", "mmbert_demo", "ettin_demo"])
def test_the_learning_rate_follows_each_phase_as_composer_runs_it(name):
    start = 0
    previous_end_rate = None
    for phase, config in _phases(name).items():
        optimizer = config.optimizer
        schedule = schedules.make_schedule(optimizer, config.num_train_steps)
        length = config.num_train_steps - start
        ratio = optimizer.final_learning_rate_ratio if optimizer.decay_steps else None
        for inside in sorted({0, 1, optimizer.warmup_steps, length // 3, length // 2,
                              length - 1, length}):
            expected = _composer(optimizer.learning_rate, ratio, length, inside,
                                 optimizer.warmup_steps)
            # float32: the step count is exact below 2^24; a quotient, a root and two
            # products of values of at most 8e-4 round to within 1e-9.
            assert float(schedule(start + inside)) == pytest.approx(expected, abs=1e-9), (
                phase, inside)
        if previous_end_rate is not None and name.startswith("ettin"):
            # Ettin's extension ends at 0.5 x 8e-4, where its decay phase's 4e-4 starts
            assert float(schedule(start)) == pytest.approx(previous_end_rate, rel=1e-6)
        previous_end_rate = float(schedule(config.num_train_steps))
        start = config.num_train_steps
    if name.startswith("mmbert"):
        assert previous_end_rate == pytest.approx(0.02 * 8e-4, rel=1e-6)
    else:
        assert previous_end_rate == pytest.approx(0.04 * 4e-4, rel=1e-6)
