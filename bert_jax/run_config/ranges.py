"""The allowed range of every numeric run-config field, checked when a config is built.

A value out of range would otherwise surface late and far away: `batch_size=-4` as a raw
TypeError inside tf.data, `checkpoint.every_steps=0` as a ZeroDivisionError after the
first step. Every command that builds a run config checks it here: pre-training when it
loads a config file, fine-tuning (and predict/evaluate, which build one to run a model)
from its flags. Only keys the config has are checked, so a task's config with fewer
sections passes through the same check; `names` lets an error name the flag the user
typed (`--learning-rate`) instead of the key it set.
"""

from bert_jax.errors import UserError
from input_pipeline.schema import OBJECTIVES

# key -> (lowest allowed, highest allowed or None, what the key means when out of range).
_AT_LEAST_ONE = (1, None)
RANGES = {
    "batch_size": _AT_LEAST_ONE,
    "grad_accum_steps": _AT_LEAST_ONE,
    "num_train_steps": _AT_LEAST_ONE,
    "schedule_steps": (0, None),
    "data.seq_len": (3, None),  # [CLS], one token of text and [SEP] at least
    "data.max_predictions": _AT_LEAST_ONE,
    "data.max_sequences_per_row": _AT_LEAST_ONE,
    "data.shuffle_buffer": _AT_LEAST_ONE,
    "data.demo_vocab_size": _AT_LEAST_ONE,
    "data.masking_rate": (0, 1),  # run_config/objective.py refuses 0 too
    "model.vocab_size": (0, None),  # 0 = the vocabulary file's size
    "model.hidden_dim": _AT_LEAST_ONE,
    "model.num_layers": _AT_LEAST_ONE,
    "model.num_heads": _AT_LEAST_ONE,
    "model.mlp_dim": _AT_LEAST_ONE,
    "model.max_positions": _AT_LEAST_ONE,
    "model.num_segments": _AT_LEAST_ONE,
    "model.layer_norm_eps": (0, None),
    "model.dropout_rate": (0, 1),
    "model.attention_dropout_rate": (0, 1),
    "model.initializer_std": (0, None),
    "optimizer.learning_rate": (0, None),
    "optimizer.warmup_steps": (0, None),
    "optimizer.beta1": (0, 1),
    "optimizer.beta2": (0, 1),
    "optimizer.epsilon": (0, None),
    "optimizer.weight_decay": (0, None),
    "optimizer.clip_norm": (0, None),  # 0 = no clip
    "optimizer.decay_steps": (0, None),
    "optimizer.final_learning_rate_ratio": (0, 1),
    "optimizer.schedule_start_step": (0, None),
    "batch_warmup.steps": (0, None),  # 0 = the full batch from the first step
    "batch_warmup.start_batch_size": (0, None),  # 0 = one micro-batch
    "checkpoint.every_steps": _AT_LEAST_ONE,
    "checkpoint.keep": _AT_LEAST_ONE,
    "eval.every_steps": _AT_LEAST_ONE,
    "eval.num_batches": _AT_LEAST_ONE,
    "eval.batch_size": _AT_LEAST_ONE,
    "log_every_steps": _AT_LEAST_ONE,
    "peak_flops_per_device": (0, None),
    "checkpoint_suite.epochs": (0, None),  # 0 = the recipe's
    "checkpoint_suite.batch_size": (0, None),
    "checkpoint_suite.max_seq_len": (0, None),
    "checkpoint_suite.every": _AT_LEAST_ONE,
    # Fine-tuning's own section (bert_jax/training/finetune.py).
    "finetune.epochs": _AT_LEAST_ONE,
    "finetune.warmup_fraction": (0, 1),
    "finetune.eval_every_steps": (0, None),  # 0 = once per epoch
    "finetune.patience": (0, None),  # 0 = never stop early
    "finetune.length_window": _AT_LEAST_ONE,
}

# key -> its allowed values (the optimizer's, schedule's and decay's names).
CHOICES = {
    "objective": OBJECTIVES,  # pre-training: run_config/objective.py checks the rest
    "optimizer.name": ("adamw", "lamb", "stable_adamw"),
    "optimizer.schedule": ("linear", "wsd"),
    "optimizer.decay_shape": ("linear", "cosine", "1-sqrt"),
    "data.demo_vocab_type": ("wordpiece", "bpe"),
}


def check_ranges(values: dict, source: str, names: dict | None = None) -> None:
    """Raises `UserError` naming the first key of `values` (flattened, dotted keys) that is
    out of its range or not one of its CHOICES; keys without either, or absent, pass.
    `names` maps a key to what the user typed to set it
    (`{"optimizer.learning_rate": "--learning-rate"}`)."""
    names = names or {}
    for key, (lowest, highest) in RANGES.items():
        if values.get(key) is None:  # absent, or unset until the data fills it in
            continue
        value = values[key]
        if value < lowest or (highest is not None and value > highest):
            wanted = (f"between {lowest} and {highest}" if highest is not None
                      else f"at least {lowest}")
            raise UserError(f"{source}: {names.get(key, key)} must be {wanted}, got {value!r}")
    for key, allowed in CHOICES.items():
        if key in values and values[key] not in allowed:
            raise UserError(f"{source}: {names.get(key, key)} must be one of "
                            f"{', '.join(allowed)}; got {values[key]!r}")
    if None not in (values.get("data.max_predictions"), values.get("data.seq_len")) and (
            values["data.max_predictions"] > values["data.seq_len"]):
        raise UserError(f"{source}: data.max_predictions ({values['data.max_predictions']}) "
                        f"cannot exceed data.seq_len ({values['data.seq_len']})")


def check_sections(config, source: str) -> None:
    """Builds the `model`, `precision` and `batch_warmup` sections as the trainer will, so
    what their own checks refuse (precision.dtype float16, a hidden_dim that is not a
    multiple of num_heads, a warm-up batch that is not whole micro-batches) is refused when
    the config is built: before a command writes demo data or run files."""
    from bert_jax.models.config import Precision
    from bert_jax.models.families import config_from_dict
    from bert_jax.training import batch_warmup

    if config.get("precision") is not None:
        Precision.from_run_config(config)
    if config.get("model") is not None:
        config_from_dict(dict(config.model), source=f"{source}: model")
    try:
        batch_warmup.from_run_config(config)
    except UserError as error:
        raise UserError(f"{source}: {error}") from None
