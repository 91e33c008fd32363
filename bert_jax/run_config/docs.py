"""`--print-config`: every key of a run config with its value and its one-line comment.

The comments are the ones written beside each field where it is defined: `base_config` in
run_config/__init__.py (`config.data.seq_len = 128  # must match ...`), the model dataclass in
config.py (`hidden_dim: int = 768  # width of ...`), and, for keys neither defines, the run
config file itself. Reading them from the source keeps one place to document a key.
"""

import inspect
import re

import ml_collections

from bert_jax import run_config

# `config.data.seq_len = 128  # comment` (assignment and comment on one line).
_ASSIGNMENT = re.compile(r"^\s*config\.([\w.]+)\s*=[^#]*#\s*(.+?)\s*$")
# `    hidden_dim: int = 768  # comment` inside the model dataclass.
_FIELD = re.compile(r"^\s{4}(\w+)\s*:\s*[\w\[\]|, ]+=[^#]*#\s*(.+?)\s*$")


def _assignment_comments(source: str) -> dict:
    return {match[1]: match[2] for line in source.splitlines()
            if (match := _ASSIGNMENT.match(line))}


def key_comments(config_file: str | None = None, defined_in=(), family: str = "bert") -> dict:
    """{'data.seq_len': 'must match ...', 'model.hidden_dim': ..., ...}; `defined_in`:
    functions that build a config on top of base_config (finetune's), whose comments win;
    `family`: whose model config class documents model.*."""
    from bert_jax.models.families import FAMILIES

    comments = {}
    if config_file:
        with open(config_file, encoding="utf-8") as file:
            comments.update(_assignment_comments(file.read()))
    for line in inspect.getsource(FAMILIES[family].config_class).splitlines():
        if match := _FIELD.match(line):
            comments[f"model.{match[1]}"] = match[2]
    # The definitions come last, so they win over a file's note about its own value.
    comments.update(_assignment_comments(inspect.getsource(run_config.base_config)))
    for function in defined_in:
        comments.update(_assignment_comments(inspect.getsource(function)))
    return comments


def format_config(config: ml_collections.ConfigDict, config_file: str | None = None,
                  defined_in=()) -> str:
    """One line per key, sorted: `key = value  # comment`, values as Python literals."""
    family = config.model.get("family", "bert") if config.get("model") else "bert"
    comments = key_comments(config_file, defined_in, family)
    items = sorted(run_config.flatten(config).items())
    width = max(len(f"{key} = {value!r}") for key, value in items)
    lines = []
    for key, value in items:
        text = f"{key} = {value!r}"
        comment = comments.get(key)
        lines.append(f"{text:<{width}}  # {comment}" if comment else text)
    return "\n".join(lines)
