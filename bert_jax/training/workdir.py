"""The training work directory's own files: what is checked before a run writes anything.

A work directory belongs to one run. What makes the run (the model's architecture, the
model it started from, and for a fine-tuning run its task, labels, columns and other task
settings) is compared with what the directory already holds before anything is written,
and a difference is refused in one line that names it (`check_run`): a rerun with another
training file's labels must not resume the old weights under the new labels. A start that
fails must leave the directory as it found it, so everything that can refuse a run is
checked first, and only then are the lock taken and model_config.json, run_config.json,
the vocabulary's files and the task's own files (a fine-tuning run's task.json) written, and only by a
run that trains (`trainer.train`: a finished run is not rewritten).
"""

import json
import os

from bert_jax.storage import files
from bert_jax.models.families import config_from_dict, config_to_dict, family_of
from bert_jax.errors import UserError
from bert_jax.interop.source_kinds import TASK_INFO
from bert_jax.run_config import to_json

MODEL_CONFIG = "model_config.json"
RUN_CONFIG = "run_config.json"
CHECKPOINTS = "checkpoints"
# Model fields a later phase of one run may change, since no parameter depends on them:
# ModernBERT's context extension raises the global layers' RoPE theta.
PHASE_FIELDS = ("global_rope_theta", "local_rope_theta")
# How the differences `check_run` names read (a setting not listed reads as its key).
_SETTING_WORDS = {"label_names": "labels", "columns": "columns"}


def _new_run_advice(workdir: str) -> str:
    return (f"a work directory belongs to one run: give another --workdir to start a new "
            f"run (or delete {workdir} to replace this one)")


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
                   if getattr(model_config, key) != value and key not in PHASE_FIELDS]
    if not differences:  # a later phase of the same run (the file is rewritten with them)
        return
    raise UserError(f"{path}: this work directory holds a different model ("
                    f"{'; '.join(differences)}); use another --workdir or change model.*")


def check_run(workdir: str, model_config, init_from: str,
              task_files: dict[str, str] | None = None, tuned: tuple[str, ...] = ()) -> None:
    """Refuses a work directory that holds another run: another model (`check_model_config`),
    another starting model (`init_from`, when this run names one), or another task, labels,
    columns or task setting (task.json in `task_files`: a fine-tuning run's; none for
    pre-training). `tuned` names the settings a run chooses on its evaluation file (SQuAD
    v2.0's null threshold), which may differ. One error names every difference."""
    check_model_config(workdir, model_config)
    if not files.exists(files.join(workdir, MODEL_CONFIG)):
        return  # a new run
    held_task = _read_json(files.join(workdir, TASK_INFO))
    task = json.loads(task_files[TASK_INFO]) if task_files and TASK_INFO in task_files else None
    differences = _task_differences(held_task, task, tuned)
    held_init = _read_json(files.join(workdir, RUN_CONFIG)) or {}
    held_from = held_init.get("init_from") or ""
    if init_from and model_name(held_from) != model_name(init_from):
        differences.append(f"it started from {held_from or 'random weights'}, this command "
                           f"from {init_from}")
    if differences:
        raise UserError(f"{workdir}: this work directory holds another run ("
                        f"{'; '.join(differences)}); {_new_run_advice(workdir)}")


def _task_differences(held: dict | None, task: dict | None, tuned: tuple[str, ...]
                      ) -> list[str]:
    if held is None and task is None:
        return []
    if task is None:
        return [f"it fine-tunes {held.get('task')!r}, this command pre-trains"]
    if held is None:
        return [f"it pre-trains, this command fine-tunes {task['task']!r}"]
    if held.get("task") != task["task"]:
        return [f"its task is {held.get('task')!r}, this command's {task['task']!r}"]
    held_settings, settings = held.get("settings", {}), task["settings"]
    return [f"its {_SETTING_WORDS.get(key, key)} are {held_settings.get(key)!r}, this "
            f"command's {settings.get(key)!r}"
            for key in sorted(set(held_settings) | set(settings))
            if key not in tuned and held_settings.get(key) != settings.get(key)]


def _read_json(path: str) -> dict | None:
    if not files.exists(path):
        return None
    try:
        return json.loads(files.read_text(path))
    except json.JSONDecodeError as error:
        raise UserError(f"{path}: not valid JSON ({error}); this work directory's record of "
                        "its run is damaged") from None


def model_name(name: str) -> str:
    """A starting model's name as runs record and compare it: an existing local path made
    absolute (so `../m` and `/data/m` are one model), anything else (a Hub name, a URL) as
    given."""
    if name and not files.is_remote(name) and os.path.exists(name):
        return os.path.realpath(name)
    return files.absolute(name) if files.is_remote(name) else name


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
    named = {MODEL_CONFIG: wanted, RUN_CONFIG: to_json(run_config), **(task_files or {})}
    for name, text in named.items():
        files.write_text(files.join(workdir, name), text)
    if run_config.data.vocab_path:
        from input_pipeline.vocabulary_files import copy_tokenizer_files
        copy_tokenizer_files(run_config.data.vocab_path, workdir)
