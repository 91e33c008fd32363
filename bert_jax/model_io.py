"""Loads a model from any source bert-jax understands; saves it as bert-jax, HF or TF directories.

Sources: Hugging Face BERT directories and Hub names, bert-jax model directories, training
runs (their latest step) and single steps, original google-research/bert checkpoints, told
apart by `model_sources.source_kind`.
Writers: bert-jax model directories, Hugging Face directories, original TF checkpoint
directories and TensorFlow SavedModels. Every path may be local or `gs://` (through
`bert_jax/files.py`). Every writer builds its output in a temporary directory and publishes
it when complete, refuses to write into a training run's directory or over its own source,
and leaves the user's umask in force.
"""

import json
import os
import tempfile
from collections.abc import Callable

import numpy as np

from bert_jax import files
from bert_jax.model_config import BertConfig
from bert_jax.errors import UserError
from bert_jax.model_sources import (CHECKPOINTS, MODEL_CONFIG, PARAMS, VOCAB,
                                    latest_step_directory, metadata_directory, source_kind,
                                    vocab_path)

TOKENIZER_CONFIG = "tokenizer_config.json"
# What a fine-tuned model was trained for: {"task", "settings", "head", "max_seq_len"}.
TASK_INFO = "task.json"


def _read_model_config(path: str) -> BertConfig:
    try:
        with files.open_file(path) as file:
            values = json.load(file)
    except FileNotFoundError:
        raise UserError(f"{path}: model config not found") from None
    except json.JSONDecodeError as error:
        raise UserError(f"{path}: not valid JSON ({error})") from None
    return BertConfig.from_dict(values, source=path)


def _restore_params(directory: str) -> dict:
    """An orbax params tree as host numpy arrays, whatever devices or sharding it was saved from."""
    import jax
    import orbax.checkpoint as ocp

    if not files.isdir(directory):
        raise UserError(f"{directory}: parameter checkpoint not found")
    # orbax reads an empty metadata tree from a relative path; an absolute one is safe.
    directory = files.absolute(directory)
    try:
        with ocp.PyTreeCheckpointer() as checkpointer:
            structure = checkpointer.metadata(directory).item_metadata.tree
            restore_args = jax.tree.map(
                lambda _: ocp.RestoreArgs(restore_type=np.ndarray), structure)
            params = checkpointer.restore(directory, args=ocp.args.PyTreeRestore(
                restore_args=restore_args))
    except (FileNotFoundError, ValueError) as error:
        raise UserError(f"{directory}: cannot restore parameters ({error})") from None
    return jax.tree.map(np.asarray, params)


def _check_params(config: BertConfig, params: dict, source: str) -> None:
    """Every array where and as the config expects it, and the whole encoder present."""
    import flax

    from bert_jax.interop.tensor_map import parameter_shapes

    expected = parameter_shapes(config)
    if "classifier" in params:  # a task head (heads.py): its width is the task's, not the config's
        labels = tuple(np.shape(params["classifier"].get("bias", ()))[:1])
        expected |= {("classifier", "kernel"): (config.hidden_dim, *labels),
                     ("classifier", "bias"): labels}
    found = {path: value.shape for path, value in flax.traverse_util.flatten_dict(params).items()}
    # Other top-level parts are a task's head (task.json), checked when its model is built.
    ours = {path[0] for path in expected}
    wrong = sorted("/".join(path) + (f" {shape}" if path in expected else " (unknown)")
                   for path, shape in found.items()
                   if path[0] in ours and expected.get(path) != tuple(shape))
    missing = sorted("/".join(path) for path in expected if path not in found
                     and path[0] == "bert" and path[1] != "pooler")
    if wrong or missing:
        raise UserError(f"{source}: parameters do not fit its model config: unexpected "
                        f"{wrong[:5] or 'none'}, missing {missing[:5] or 'none'}")


def load_model(path: str) -> tuple[BertConfig, dict, str | None]:
    """(config, params as nested numpy dicts, path of vocab.txt or None) from any source.

    The params tree holds what the source holds: always `bert` (an encoder-only source such
    as a BertForMaskedLM file may lack `bert/pooler`), and `mlm_head` / `nsp_head` if present.
    """
    from bert_jax.interop import hub, huggingface, tf_checkpoint

    path = hub.resolve(path)
    kind = source_kind(path)
    if kind in ("huggingface", "tf-checkpoint"):
        reader = huggingface if kind == "huggingface" else tf_checkpoint
        # safetensors and TensorFlow's checkpoint reader open local files only.
        with files.local_copy(path) as local_path:
            config, params = reader.read_directory(local_path)
            weights = files.join(path, _weight_file_names(local_path, kind))
        _check_finite(params, weights)
        return config, params, vocab_path(path, kind)
    params_directory = files.join(latest_step_directory(path) if kind == "training-run"
                                  else path, PARAMS)
    config = _read_model_config(files.join(metadata_directory(path, kind), MODEL_CONFIG))
    params = _restore_params(params_directory)
    _check_params(config, params, params_directory)
    _check_finite(params, params_directory)
    return config, params, vocab_path(path, kind)


def _weight_file_names(directory: str, kind: str) -> str:
    """The weight file(s) of a Hugging Face directory or the prefix of a TF checkpoint."""
    from bert_jax.interop import huggingface, tf_checkpoint

    if kind == "huggingface":
        return ",".join(os.path.basename(name) for name in huggingface.weight_files(directory))
    return os.path.basename(tf_checkpoint.checkpoint_prefix(directory))


def _check_finite(params: dict, source: str) -> None:
    """Refuses weights holding NaN or infinity (a diverged run's, a damaged file's): they
    load and run without a word, and every output is NaN."""
    import flax

    bad = []
    for path, value in flax.traverse_util.flatten_dict(params).items():
        value = np.asarray(value)
        if value.dtype.kind in "biu":  # integers cannot hold NaN
            continue
        count = value.size - int(np.count_nonzero(np.isfinite(value)))
        if count:
            bad.append(f"{'/'.join(path)} ({count} of {value.size} values)")
    if bad:
        shown = ", ".join(bad[:3]) + (f" and {len(bad) - 3} more" if len(bad) > 3 else "")
        raise UserError(f"{source}: the weights hold NaN or infinite values: {shown}; the "
                        "file is damaged or was saved from a run that diverged. Load another "
                        "checkpoint")


def load_config(path: str) -> BertConfig:
    """The model config of `path` (any source `load_model` reads), without its weights."""
    from bert_jax.interop import hub, huggingface, tf_checkpoint

    path = hub.resolve(path)
    kind = source_kind(path)
    if kind in ("huggingface", "tf-checkpoint"):
        config_path = files.join(path, "config.json" if kind == "huggingface"
                                 else tf_checkpoint.CONFIG_NAME)
        try:
            with files.open_file(config_path) as file:
                values = json.load(file)
        except json.JSONDecodeError as error:
            raise UserError(f"{config_path}: not valid JSON ({error})") from None
        # bert_config.json has an HF config.json's keys, without model_type.
        return huggingface.config_from_hf({"model_type": "bert", **values}, config_path)
    return _read_model_config(files.join(metadata_directory(path, kind), MODEL_CONFIG))


def load_model_and_tokenizer(path: str, vocab: str | None = None):
    """(config, params, tokenizer, vocab path) for every command that runs or converts a model.

    `vocab` overrides the vocabulary found beside the weights. A vocabulary with more tokens
    than the model's `vocab_size` is refused: its extra ids would index past the embedding
    table (JAX clamps them silently) and give garbage.
    """
    from input_pipeline.tokenization import load_tokenizer

    config, params, found = load_model(path)
    vocab = vocab or found
    if vocab is None:
        raise UserError(f"{path}: no vocab.txt beside the weights; pass the vocabulary")
    tokenizer = load_tokenizer(vocab)
    if tokenizer.vocab_size > config.vocab_size:
        raise UserError(f"{vocab}: {tokenizer.vocab_size} tokens, but the model at {path} has "
                        f"vocab_size {config.vocab_size}; token ids past it have no embedding. "
                        "Use the vocabulary the model was trained with")
    return config, params, tokenizer, vocab


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
    if files.isfile(destination):
        raise UserError(f"{destination}: exists and is a file; expected a directory path")
    if files.isdir(destination) and files.listdir(destination) and not overwrite:
        raise UserError(f"{destination}: exists and is not empty (pass --overwrite to replace it)")


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
    files.makedirs(parent)
    temporary = tempfile.mkdtemp(prefix=f".{files.basename(destination)}.tmp-", dir=parent)
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


def _write_tokenizer_files(directory: str, tokenizer, settings: dict | None = None) -> None:
    """vocab.txt and tokenizer_config.json, so the casing travels with the vocabulary."""
    with open(os.path.join(directory, VOCAB), "w", encoding="utf-8") as file:
        file.write("".join(f"{token}\n" for token in tokenizer.tokens))
    with open(os.path.join(directory, TOKENIZER_CONFIG), "w", encoding="utf-8") as file:
        json.dump({"do_lower_case": tokenizer.lowercase, **(settings or {})}, file, indent=2)


def save_model(config: BertConfig, params: dict, tokenizer, destination: str,
               overwrite: bool = False, task_info: dict | None = None,
               inside_run: bool = False, sources: tuple[str, ...] = ()) -> None:
    """A bert-jax model directory: model_config.json, vocab.txt, tokenizer_config.json, params/
    (and task.json for a fine-tuned model)."""
    import jax
    import orbax.checkpoint as ocp

    def fill(directory: str) -> None:
        with open(os.path.join(directory, MODEL_CONFIG), "w", encoding="utf-8") as file:
            json.dump(config.to_dict(), file, indent=2)
        if task_info is not None:
            write_task_info(directory, task_info)
        _write_tokenizer_files(directory, tokenizer)
        checkpointer = ocp.StandardCheckpointer()
        checkpointer.save(os.path.join(directory, PARAMS), jax.tree.map(np.asarray, params))
        checkpointer.wait_until_finished()

    write_directory_atomically(destination, fill, overwrite, sources, inside_run)


def write_task_info(directory: str, task_info: dict) -> None:
    """task.json, published only when complete (local or gs://)."""
    with files.atomic_write(files.join(directory, TASK_INFO)) as file:
        json.dump(task_info, file, indent=2)


# An HF head's architecture (and problem type) -> the task that trains it.
_TASK_OF_HEAD = {("BertForSequenceClassification", "regression"): "regress",
                 ("BertForSequenceClassification", None): "classify",
                 ("BertForTokenClassification", None): "ner",
                 ("BertForQuestionAnswering", None): "qa"}


def load_task_info(path: str) -> dict | None:
    """What the model at `path` was fine-tuned for, or None for a plain encoder.

    bert-jax directories and runs keep task.json; a Hugging Face directory of a
    BertForSequenceClassification / BertForTokenClassification describes its head in
    config.json, which becomes {"task", "settings": {"label_names"}, "head"} (a
    BertForQuestionAnswering's settings are qa's defaults).
    """
    from bert_jax.interop import hf_heads

    kind = source_kind(path)
    if kind == "tf-checkpoint":
        return None
    if kind == "huggingface":
        head = hf_heads.read_head(path)
        if head is None:
            return None
        problem = head.get("problem_type") if head.get("problem_type") == "regression" else None
        task = _TASK_OF_HEAD[(head["architecture"], problem)]
        settings = dict(label_names=head["label_names"]) if "label_names" in head else {}
        return dict(task=task, settings=settings, head=head)
    info_path = files.join(metadata_directory(path, kind), TASK_INFO)
    if not files.exists(info_path):
        return None
    try:
        with files.open_file(info_path) as file:
            return json.load(file)
    except json.JSONDecodeError as error:
        raise UserError(f"{info_path}: not valid JSON ({error})") from None


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
            config, params, directory, tokenizer.pad_id, architecture, head))
        _write_tokenizer_files(directory, tokenizer, huggingface.tokenizer_settings(config))
        if extra_files:
            extra_files(directory)

    write_directory_atomically(destination, fill, overwrite, sources)
    return written[0]


def export_tf_checkpoint(config: BertConfig, params: dict, tokenizer, destination: str,
                         overwrite: bool = False, sources: tuple[str, ...] = ()) -> list[str]:
    """An original google-research/bert checkpoint directory; returns the parts written.

    bert_model.ckpt.{index,data-00000-of-00001}, bert_config.json and vocab.txt, as in the
    released checkpoints' zip files.
    """
    from bert_jax.interop import tf_checkpoint

    written = []

    def fill(directory: str) -> None:
        written.extend(tf_checkpoint.write_directory(config, params, directory))
        _write_tokenizer_files(directory, tokenizer)

    write_directory_atomically(destination, fill, overwrite, sources)
    return written


def export_saved_model(config: BertConfig, params: dict, tokenizer, destination: str,
                       platforms=None, overwrite: bool = False,
                       sources: tuple[str, ...] = ()) -> list[str]:
    """A TensorFlow SavedModel of the model (see interop/saved_model.py); returns its signatures."""
    from bert_jax.interop import saved_model

    written = []

    def fill(directory: str) -> None:
        written.extend(saved_model.write_directory(
            config, params, directory, tokenizer, platforms or saved_model.DEFAULT_PLATFORMS))

    write_directory_atomically(destination, fill, overwrite, sources)
    return written
