"""Saves a model as a bert-jax, Hugging Face or original TF checkpoint directory, or a SavedModel.

(Reading any of them, and Hub names, is `model_source.py`'s.) Every path may be local or
`gs://` (through `bert_jax/storage/files.py`). Every writer builds its output in a temporary
directory and publishes it when complete, refuses to write into a training run's directory
or over its own source, and leaves the user's umask in force.
"""

import json
import os
import tempfile
from collections.abc import Callable

import numpy as np

from bert_jax.storage import files, temporaries
from bert_jax.storage.outputs import PUBLISHED, Output, check_output
from bert_jax.storage.storage_errors import reported
from bert_jax.errors import UserError
from bert_jax.interop.source_kinds import CHECKPOINTS, MODEL_CONFIG, PARAMS, TASK_INFO
from bert_jax.models.config import BertConfig
from bert_jax.models.families import config_to_dict


# Names one of bert-jax's published directories holds (a model in any format, a SavedModel, a
# sentence-transformers export, `attention`'s and `probe`'s outputs): `--overwrite` replaces
# only such a directory, never one of the user's files that happens to be named as the output.
_WRITTEN_BY_US = frozenset({"config.json", MODEL_CONFIG, "bert_config.json", "saved_model.pb",
                            "modules.json", "attention.npz", "report.json"})


def _inside_training_run(path: str) -> str | None:
    """The training work directory that contains `path`, if any."""
    for directory in files.ancestors(path):
        if (files.exists(files.join(directory, MODEL_CONFIG))
                and files.isdir(files.join(directory, CHECKPOINTS))):
            return directory
    return None


def _check_destination(destination: str, overwrite: bool, sources: tuple[str, ...],
                       inside_run: bool) -> None:
    for source in sources:
        if files.contains(destination, source):
            raise UserError(f"{destination}: refusing to write over the source {source}, "
                            "which it contains or is; choose another output directory")
    run = None if inside_run else _inside_training_run(destination)
    if run:
        raise UserError(f"{destination}: refusing to write inside the training run {run}; "
                        "choose an output directory outside it")
    check_output(Output("output directory", destination, PUBLISHED))
    entries = set(files.listdir(destination)) if files.isdir(destination) else set()
    if entries and not overwrite:
        raise UserError(f"{destination}: exists and is not empty (pass --overwrite to replace it)")
    if entries and not entries & _WRITTEN_BY_US:
        raise UserError(f"{destination}: exists and holds none of the files bert-jax writes "
                        f"there ({', '.join(sorted(_WRITTEN_BY_US))}), so --overwrite does not "
                        "replace it; choose another output directory")


def check_destination(destination: str, overwrite: bool = False,
                      sources: tuple[str, ...] = ()) -> None:
    """What `write_directory_atomically` refuses, checked alone: before long work whose
    output it would refuse only at the end."""
    _check_destination(files.absolute(destination), overwrite, sources, inside_run=False)


def write_directory_atomically(destination: str, fill: Callable[[str], None],
                               overwrite: bool = False, sources: tuple[str, ...] = (),
                               inside_run: bool = False) -> None:
    """Calls `fill(temporary_directory)`, then publishes the result at `destination`.

    `destination` must not exist or be empty, unless `overwrite`, and must not contain (or
    be) any of `sources`, which `overwrite` would delete; a failure leaves no trace.
    Only a training run itself writes inside a run (`inside_run`: its best model).
    Modes follow the user's umask (a plain `mkdtemp` would leave the export 0700).
    """
    destination = files.absolute(destination)
    _check_destination(destination, overwrite, sources, inside_run)
    # Locally a sibling, so the publishing rename stays on one file system.
    parent = tempfile.gettempdir() if files.is_remote(destination) else files.dirname(destination)
    created = _missing_directories(parent)
    with reported(destination, "writing", "nothing was left behind"):
        files.makedirs(parent)
        local_destination = os.path.join(parent, files.basename(destination))
        temporaries.remove_stale_temporaries(local_destination)  # a killed run's (kill -9)
        temporary = tempfile.mkdtemp(prefix=temporaries.temporary_prefix(local_destination),
                                     dir=parent)
        published = False
        try:
            fill(temporary)
            files.apply_umask(temporary)
            files.publish_directory(temporary, destination)
            published = True
        finally:
            files.rmtree(temporary)
            if not published:  # the parents made for it go too (serving/bert/ of serving/bert/1)
                _remove_empty(created)


def _missing_directories(path: str) -> list[str]:
    """`path` and those of its ancestors that do not exist yet, deepest first."""
    missing = []
    while not os.path.exists(path):
        missing.append(path)
        path = os.path.dirname(path)
    return missing


def _remove_empty(directories: list[str]) -> None:
    """Removes `directories` (deepest first), stopping at the first one that is not empty."""
    for directory in directories:
        try:
            os.rmdir(directory)
        except OSError:
            return


def save_model(config: BertConfig, params: dict, tokenizer, destination: str,
               overwrite: bool = False, task_info: dict | None = None,
               inside_run: bool = False, sources: tuple[str, ...] = (),
               extra_files: Callable[[str], None] | None = None) -> None:
    """A bert-jax model directory: model_config.json, the tokenizer's files (vocab.txt or
    sentencepiece.model or tokenizer.json, with tokenizer_config.json), params/ (and task.json
    for a fine-tuned model); `extra_files(directory)` adds others (a
    sentence embedding's pooling files) before the directory is renamed into place."""
    import jax
    import orbax.checkpoint as ocp

    def fill(directory: str) -> None:
        with open(os.path.join(directory, MODEL_CONFIG), "w", encoding="utf-8") as file:
            json.dump(config_to_dict(config), file, indent=2)
        if task_info is not None:
            write_task_info(directory, task_info)
        tokenizer.save(directory)
        checkpointer = ocp.StandardCheckpointer()
        checkpointer.save(os.path.join(directory, PARAMS), jax.tree.map(np.asarray, params))
        checkpointer.wait_until_finished()
        if extra_files:
            extra_files(directory)

    write_directory_atomically(destination, fill, overwrite, sources, inside_run)


def write_task_info(directory: str, task_info: dict) -> None:
    """task.json, published only when complete (local or gs://)."""
    with files.atomic_write(files.join(directory, TASK_INFO)) as file:
        json.dump(task_info, file, indent=2)


def export_huggingface(config: BertConfig, params: dict, tokenizer, destination: str,
                       architecture: str | None = None, overwrite: bool = False,
                       head: dict | None = None,
                       extra_files: Callable[[str], None] | None = None,
                       sources: tuple[str, ...] = ()) -> str:
    """A Hugging Face directory `transformers` loads; returns the architecture written.

    With a task `head` (task.json's), the task architecture with its labels.
    `extra_files(directory)` adds files of a wrapping format (sentence-transformers) before
    the directory is renamed into place.
    """
    from bert_jax.interop import huggingface

    written = []

    def fill(directory: str) -> None:
        written.append(huggingface.write_directory(
            config, params, directory, tokenizer, architecture, head))
        tokenizer.save(directory, huggingface.tokenizer_settings(config))
        if extra_files:
            extra_files(directory)

    write_directory_atomically(destination, fill, overwrite, sources)
    return written[0]


def refuse_other_families(config, target: str) -> None:
    """A one-line error, before anything is written, for a model `target` cannot hold:
    formats written for BERT alone."""
    if not isinstance(config, BertConfig):
        family = config_to_dict(config)["family"]
        raise UserError(f"{target} holds BERT models only; this is a {family} model: export "
                        "it with --to hf (transformers) or --to bert-jax")


def export_tf_checkpoint(config: BertConfig, params: dict, tokenizer, destination: str,
                         overwrite: bool = False, sources: tuple[str, ...] = ()) -> list[str]:
    """An original google-research/bert checkpoint directory; returns the parts written.

    bert_model.ckpt.{index,data-00000-of-00001}, bert_config.json and vocab.txt, as in the
    released checkpoints' zip files (a tokenizer.json model's tokenizer files instead).
    """
    from bert_jax.interop import tf_checkpoint

    refuse_other_families(config, "an original google-research/bert TF checkpoint")
    written = []

    def fill(directory: str) -> None:
        written.extend(tf_checkpoint.write_directory(config, params, directory))
        tokenizer.save(directory)

    write_directory_atomically(destination, fill, overwrite, sources)
    return written


def export_saved_model(config: BertConfig, params: dict, tokenizer, destination: str,
                       platforms=None, overwrite: bool = False,
                       sources: tuple[str, ...] = ()) -> list[str]:
    """A TensorFlow SavedModel of the model (see interop/saved_model.py); returns its signatures."""
    from bert_jax.interop import saved_model

    refuse_other_families(config, "the SavedModel export (its signatures are BERT's)")
    written = []

    def fill(directory: str) -> None:
        written.extend(saved_model.write_directory(
            config, params, directory, tokenizer, platforms or saved_model.DEFAULT_PLATFORMS))

    write_directory_atomically(destination, fill, overwrite, sources)
    return written
