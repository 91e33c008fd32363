"""`init_from` brings its model's architecture: the run config's model.* sizes become the source's.

Continued pre-training from MiniLM with `--config laptop --config.init_from=MiniLM` should not
fail on the preset's 4 layers, then on its hidden size, then on its heads, one run at a
time. Every architecture field the user did not set is taken from the source model's
config; the fields the user did set must agree with it, and all that do not are named in
one error, each with both values.

Which fields did the user set? A field is explicit when
  - a `--config.model.FIELD=...` override names it (whatever its value), or
  - the config file gave it a value other than that of the preset its model section starts
    from (`model_preset`, which base_config records).
So a config file that restates a preset's own value is not telling the two apart from the
default; such a value is adopted from the source, and the override is the way to insist on
it. Comparing with the recorded preset keeps every config file as it is (no sentinel values
in model.*, whose fields stay plain ints that a BertConfig reads).
"""

from bert_jax.errors import UserError

# Model config fields that fix the parameters' shapes (and ModernBERT's trained length): a
# source's weights fit only these. A family has those of its fields named here.
ARCHITECTURE = ("vocab_size", "hidden_dim", "num_layers", "num_heads", "mlp_dim",
                "max_positions", "num_segments")


def architecture_fields(model) -> tuple[str, ...]:
    """The ARCHITECTURE fields a model config (or a run config's model section) has."""
    has = (lambda field: field in model) if hasattr(model, "keys") else (
        lambda field: hasattr(model, field))
    return tuple(field for field in ARCHITECTURE if has(field))


def explicit_model_fields(config, override_keys) -> set[str]:
    """The architecture fields set by an override or by the config file (see above)."""
    from bert_jax.models.presets import preset

    fields = architecture_fields(config.model)
    explicit = {key[len("model."):] for key in override_keys
                if key.startswith("model.")} & set(fields)
    preset_name = config.get("model_preset")
    if preset_name:
        defaults = preset(preset_name, vocab_size=0).to_dict()  # 0: the vocabulary's size
        explicit |= {field for field in fields if config.model[field] != defaults[field]}
    return explicit


def adopt_architecture(config, override_keys, model, source: str = "run config") -> None:
    """Sets config.model's architecture from `model` (the BertConfig of config.init_from's
    source, `ModelSource.config()`) where not explicit; raises one UserError listing every
    explicit field that disagrees with it."""
    from bert_jax.models.families import family_of

    path = config.init_from
    family = family_of(model).name
    if config.model.get("family", "bert") != family:
        raise UserError(f"{source}: init_from {path} is a {family} model, but this config's "
                        f"model.family is {config.model.get('family', 'bert')!r}; use a "
                        f"{family} config")
    explicit = explicit_model_fields(config, override_keys)
    conflicts = [f"model.{field} is {config.model[field]}, the source's {getattr(model, field)}"
                 for field in architecture_fields(model) if field in explicit
                 and config.model[field] != getattr(model, field)
                 and not (field == "vocab_size" and config.model[field] == 0)]
    if conflicts:
        raise UserError(
            f"{source}: init_from {path} has another architecture than the one this config "
            f"sets: {'; '.join(conflicts)}. Drop these settings to take the source's (it "
            "brings its own sizes), or start from another model")
    for field in architecture_fields(model):
        if field not in explicit or config.model[field] == 0:
            config.model[field] = getattr(model, field)
