"""The training work directory's own files: what is checked before a run writes anything.

A start that fails must leave the directory as it found it, so everything that can refuse
a run (another model's directory, an `init_from` of another size) is checked first, and
only then are the lock taken and model_config.json, run_config.json, the vocabulary and the
task's own files (a fine-tuning run's task.json) written.
"""

import json

from bert_jax.storage import files
from bert_jax.models.families import config_from_dict, config_to_dict, family_of
from bert_jax.errors import UserError
from bert_jax.run_config import to_json

MODEL_CONFIG = "model_config.json"
CHECKPOINTS = "checkpoints"


def check_model_config(workdir: str, model_config) -> None:
    """Refuses a work directory that holds another model, naming the fields that differ."""
    path = files.join(workdir, MODEL_CONFIG)
    if not files.exists(path):
        return
    # Compared as configs: a file from before the precision knobs left the model still matches.
    held = config_from_dict(json.loads(files.read_text(path)), path)
    if held == model_config:
        return
    if type(held) is not type(model_config):
        raise UserError(f"{path}: this work directory holds a {family_of(held).name} model, "
                        f"this run a {family_of(model_config).name} one; use another --workdir")
    differences = [f"{key} {value} there, {getattr(model_config, key)} in this run"
                   for key, value in held.to_dict().items()
                   if getattr(model_config, key) != value]
    raise UserError(f"{path}: this work directory holds a different model ("
                    f"{'; '.join(differences)}); use another --workdir or change model.*")


def has_checkpoint(workdir: str) -> bool:
    """Whether a run will resume here (a finished step directory under checkpoints/)."""
    directory = files.join(workdir, CHECKPOINTS)
    return files.isdir(directory) and any(name.isdigit() for name in files.listdir(directory))


def write_run_files(run_config, workdir: str, model_config,
                    task_files: dict[str, str] | None = None) -> None:
    """model_config.json, run_config.json, the vocabulary's files (vocab.txt, a
    sentencepiece.model or a tokenizer.json, with the tokenizer_config.json beside it) and a
    task's own files (`task_files`: name -> text, e.g. a fine-tuning run's task.json) at the
    work directory's root."""
    files.makedirs(workdir)
    wanted = json.dumps(config_to_dict(model_config), indent=2, sort_keys=True)
    named = {MODEL_CONFIG: wanted, "run_config.json": to_json(run_config), **(task_files or {})}
    for name, text in named.items():
        files.write_text(files.join(workdir, name), text)
    if run_config.data.vocab_path:
        from input_pipeline.vocabulary_files import copy_tokenizer_files
        copy_tokenizer_files(run_config.data.vocab_path, workdir)
