"""Every shipped run config loads and builds a model; overrides are typed and checked."""

import glob
import os

import pytest

from bert_jax.tasks import phases
from bert_jax.training import train_step
from bert_jax.commands.pretrain import default_workdir
from bert_jax.errors import UserError
from bert_jax.run_config import flatten, load_run_config

CONFIGS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs")
SHIPPED = sorted(glob.glob(os.path.join(CONFIGS, "*.py")))
VARIANTS = {"bert_large_two_phase.py": ["1", "2"], "modernbert_base.py": ["1", "2", "3"],
            "modernbert_large.py": ["1", "2", "3"]}


def _all_variants():
    for path in SHIPPED:
        # a phased config (PHASES, tasks/phases.py) loads one phase at a time
        named = phases.phases_of(path) or VARIANTS.get(os.path.basename(path), [""])
        for argument in named:
            yield path + (f":{argument}" if argument else "")


@pytest.mark.parametrize("spec", list(_all_variants()), ids=os.path.basename)
def test_every_shipped_config_loads_and_builds_a_model(spec):
    config = load_run_config(spec, ["--config.model.vocab_size=30522"])
    model_config = train_step.model_config_of(config)
    assert model_config.hidden_dim % model_config.num_heads == 0
    assert config.batch_size % config.grad_accum_steps == 0
    # Unset (None) lengths come from the shards' manifest when the run starts.
    assert config.data.seq_len is None or config.data.seq_len <= model_config.max_positions
    assert config.optimizer.name in ("adamw", "lamb", "stable_adamw")
    assert config.is_locked


def test_two_phase_recipe_shares_one_schedule_and_lengthens_sequences():
    phase_1 = load_run_config(os.path.join(CONFIGS, "bert_large_two_phase.py:1"))
    phase_2 = load_run_config(os.path.join(CONFIGS, "bert_large_two_phase.py:2"))
    assert phase_1.schedule_steps == phase_2.schedule_steps == phase_2.num_train_steps
    assert phase_1.num_train_steps == 0.9 * phase_2.num_train_steps
    assert (phase_1.data.seq_len, phase_2.data.seq_len) == (128, 512)
    assert default_workdir("configs/bert_large_two_phase.py:2") == os.path.join(
        "runs", "bert_large_two_phase_2")


def test_modernbert_recipe_is_three_phases_of_one_schedule():
    """The paper's token budgets (1.7T at 1,024, 250B at 8,192 with the global theta raised,
    50B of decay), one WSD schedule whose 1-sqrt decay is phase 3."""
    from bert_jax.models.config import ModernBertConfig

    phases = [load_run_config(os.path.join(CONFIGS, f"modernbert_base.py:{phase}"))
              for phase in "123"]
    models = [train_step.model_config_of(phase) for phase in phases]
    assert all(isinstance(model, ModernBertConfig) for model in models)
    assert (models[0].num_layers, models[0].hidden_dim, models[0].mlp_dim) == (22, 768, 1152)
    assert [model.global_rope_theta for model in models] == [10_000.0, 160_000.0, 160_000.0]
    assert len({phase.schedule_steps for phase in phases}) == 1
    assert phases[2].num_train_steps == phases[2].schedule_steps
    steps = [phases[0].num_train_steps] + [
        later.num_train_steps - earlier.num_train_steps
        for earlier, later in zip(phases, phases[1:])]
    assert phases[0].optimizer.decay_steps == steps[2]
    tokens = [phases[0].batch_size * 1024, *(phase.batch_size * 8192 for phase in phases[1:])]
    assert tokens[0] == tokens[1] == tokens[2] == 4608 * 1024  # 4.7M tokens a step
    warmup = phases[0].batch_warmup.steps
    warmup_tokens = warmup * 768 * 1024 * 3.5  # 1 to 6 micro-batches of 768 rows
    assert abs(warmup_tokens - 50e9) / 50e9 < 1e-3
    assert abs(warmup_tokens + (steps[0] - warmup) * tokens[0] - 1.7e12) / 1.7e12 < 1e-3
    assert abs(steps[1] * tokens[1] - 250e9) / 250e9 < 1e-3
    assert abs(steps[2] * tokens[2] - 50e9) / 50e9 < 1e-3
    assert all(phase.objective == "mlm" and phase.data.masking_rate == 0.3 for phase in phases)


def test_eurobert_210m_is_pretraining_at_half_then_annealing_at_a_tenth():
    """EuroBERT-210m's run: 4.8T tokens at 50% masking, then 200B at 10% while the
    warmup-stable-decay schedule decays; AdamW 0.9/0.95, eps 1e-5, weight decay 0.1."""
    from bert_jax.models.config import EuroBertConfig

    config = load_run_config(os.path.join(CONFIGS, "eurobert_210m.py"))
    model = train_step.model_config_of(config)
    assert isinstance(model, EuroBertConfig) and model.vocab_size == 0  # the tokenizer's
    assert (model.num_layers, model.hidden_dim, model.mlp_dim, model.rope_theta) == (
        12, 768, 3072, 250_000.0)
    tokens = config.batch_size * config.data.seq_len
    annealing_start = int(config.data.masking_rate_schedule.split(":")[0])
    assert abs(annealing_start * tokens - 4.8e12) / 4.8e12 < 1e-3
    assert config.optimizer.decay_steps == config.num_train_steps - annealing_start
    assert abs(config.optimizer.decay_steps * tokens - 200e9) / 200e9 < 2e-3
    assert (config.data.masking_rate, config.data.masking_rate_schedule.split(":")[1]) == (
        0.5, "0.1")
    optimizer = config.optimizer
    assert (optimizer.name, optimizer.beta1, optimizer.beta2, optimizer.epsilon,
            optimizer.weight_decay, optimizer.schedule) == ("adamw", 0.9, 0.95, 1e-5, 0.1, "wsd")


def test_overrides_are_converted_to_the_type_they_replace():
    config = load_run_config(os.path.join(CONFIGS, "demo.py"), [
        "--config.batch_size=64", "--config.optimizer.learning_rate", "2e-4",
        "--config.precision.dtype=bfloat16", "--config.checkpoint.async_save=false",
        "--config.optimizer.warmup_steps=5"])
    assert (config.batch_size, config.optimizer.learning_rate) == (64, 2e-4)
    assert config.precision.dtype == "bfloat16" and config.checkpoint.async_save is False
    assert isinstance(config.optimizer.learning_rate, float)
    assert "optimizer.learning_rate" in flatten(config)


@pytest.mark.parametrize("override, message", [
    ("--config.optimizer.learning_rat=1", r"unknown config key 'optimizer.learning_rat'.*"
                                          r"did you mean optimizer.learning_rate"),
    ("--config.batch_size=many", r"batch_size: expected a int, got 'many'"),
    ("--config.checkpoint.async_save=maybe", r"expected true or false"),
    ("--batch_size=3", r"unrecognized argument '--batch_size=3'"),
])
def test_bad_overrides_fail_naming_the_key(override, message):
    with pytest.raises(UserError, match=message):
        load_run_config(os.path.join(CONFIGS, "demo.py"), [override])


def test_a_missing_or_broken_config_file_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="not found"):
        load_run_config(str(tmp_path / "absent.py"))
    broken = tmp_path / "broken.py"
    broken.write_text("def get_config(:\n")
    with pytest.raises(UserError, match="broken.py: could not be loaded"):
        load_run_config(str(broken))
