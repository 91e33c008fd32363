"""Tasks: what a training run optimises and how it is judged, one module per task.

A task supplies its model head, its batch schema, its loss (sums and denominators, so means
stay exact across micro-batches and hosts), its evaluation metrics and a host-side predict
hook; the training system in `bert_jax/training/` runs any of them, and
`bert_jax/training/task.py` states the interface it runs them through.
"""

import ast
import importlib
import importlib.util
import re
from types import ModuleType

from bert_jax.errors import UserError

# name (as `bert-jax finetune NAME` spells it) -> module, in the order `--help` lists them.
TASKS = {
    "classify": "bert_jax.tasks.classification",
    "regress": "bert_jax.tasks.regression",
    "ner": "bert_jax.tasks.token_classification",
    "qa": "bert_jax.tasks.question_answering",
    "mlm": "bert_jax.tasks.masked_lm",
    "sentence-embedding": "bert_jax.tasks.sentence_embedding",
    "pretraining": "bert_jax.tasks.pretraining",
}


def available() -> dict[str, ModuleType]:
    """The task modules that exist, by name (a task still being built is simply not offered)."""
    modules = {}
    for name, module_name in TASKS.items():
        try:
            modules[name] = importlib.import_module(module_name)
        except ModuleNotFoundError as error:
            if error.name != module_name:
                raise
    return modules


def finetuning_task_names() -> list[str]:
    """The names `bert-jax finetune` offers, found without importing the task modules (they
    import JAX; `--help` must not)."""
    return [name for name, module_name in TASKS.items()
            if name != "pretraining" and importlib.util.find_spec(module_name) is not None]


def docstring(name: str) -> str:
    """Task `name`'s module docstring, read from its source, not imported (JAX)."""
    with open(importlib.util.find_spec(TASKS[name]).origin, encoding="utf-8") as file:
        return ast.get_docstring(ast.parse(file.read())) or name


def summary(name: str) -> str:
    """The first line of task `name`'s module docstring, without the name it starts with."""
    return re.sub(r"^`[^`]*`: ", "", docstring(name).strip().splitlines()[0])


def task_module(name: str) -> ModuleType:
    modules = available()
    if name not in modules:
        raise UserError(f"unknown task {name!r}; expected one of {sorted(modules)}")
    return modules[name]


def task_from_info(info: dict):
    """The task a fine-tuned model was trained for, from its task info (task.json, or a Hugging
    Face head's): what `training.finetune.load_finetuned` is given to rebuild it."""
    return task_module(info["task"]).TASK.from_settings(info["settings"])
