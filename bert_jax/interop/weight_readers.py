"""Reads a model source's weights as nested numpy dicts, checked against its config.

`read_params(source)` is what `ModelSource.load` calls, once per process: a Hugging Face
directory's safetensors and an original TF checkpoint go through their name maps
(interop/huggingface.py, interop/tf_checkpoint.py) with the config the source has already
read; a bert-jax model directory, training run or step restores its orbax `params/`. Every
source's weights are refused when they hold NaN or infinity.
"""

import os
import warnings

import numpy as np

from bert_jax.storage import files
from bert_jax.storage.checkpoint_damage import damage, quiet_failed_restore
from bert_jax.errors import UserError
from bert_jax.interop.source_kinds import PARAMS, latest_step_directory
from bert_jax.models.config import BertConfig


def read_params(source) -> dict:
    """The params tree of a `ModelSource`: what the source holds (always `bert`, though an
    encoder-only source such as a BertForMaskedLM file may lack `bert/pooler`, and
    `mlm_head` / `nsp_head` / a task head if present)."""
    from bert_jax.interop import huggingface, tf_checkpoint

    path, kind = source.directory, source.kind
    if kind in ("huggingface", "tf-checkpoint"):
        # safetensors and TensorFlow's checkpoint reader open local files only.
        with files.local_copy(path) as local_path:
            params = (huggingface.read_directory(local_path, source.config(), source.head())
                      if kind == "huggingface"
                      else tf_checkpoint.read_directory(local_path, source.config()))
            weights = files.join(path, _weight_file_names(local_path, kind))
        _check_finite(params, weights)
        return params
    params_directory = files.join(latest_step_directory(path) if kind == "training-run"
                                  else path, PARAMS)
    params = _restore_params(params_directory)
    _check_params(source.config(), params, params_directory)
    _check_finite(params, params_directory)
    return params


def _restore_params(directory: str) -> dict:
    """An orbax params tree as host numpy arrays, whatever devices or sharding it was saved from."""
    import jax
    import orbax.checkpoint as ocp

    if not files.isdir(directory):
        raise UserError(f"{directory}: parameter checkpoint not found")
    # orbax reads an empty metadata tree from a relative path; an absolute one is safe.
    directory = files.absolute(directory)
    try:
        with quiet_failed_restore(), ocp.PyTreeCheckpointer() as checkpointer:
            metadata = checkpointer.metadata(directory).item_metadata
            if metadata is None:  # orbax read no tree: a restore as saved says what is wrong
                with warnings.catch_warnings():  # "sharding info not provided": none is
                    warnings.simplefilter("ignore")
                    params = checkpointer.restore(directory)
            else:
                restore_args = jax.tree.map(
                    lambda _: ocp.RestoreArgs(restore_type=np.ndarray), metadata.tree)
                params = checkpointer.restore(directory, args=ocp.args.PyTreeRestore(
                    restore_args=restore_args))
    except Exception as error:  # orbax wraps tensorstore's errors in plain Exception
        reason = damage(error, directory)
        if reason is None and not isinstance(error, (FileNotFoundError, ValueError)):
            raise
        detail = reason or str(error).splitlines()[0][:300]  # tensorstore's run to pages
        raise UserError(f"{directory}: cannot restore parameters ({detail})") from None
    return jax.tree.map(np.asarray, params)


def _check_params(config: BertConfig, params: dict, source: str) -> None:
    """Every array where and as the config expects it, and the whole encoder present."""
    import flax

    from bert_jax.interop.tensor_map import parameter_shapes
    from bert_jax.models.families import family_of

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
    encoder = family_of(config).encoder_key
    missing = sorted("/".join(path) for path in expected if path not in found
                     and path[0] == encoder and path[1] != "pooler")
    if wrong or missing:
        raise UserError(f"{source}: parameters do not fit its model config: unexpected "
                        f"{wrong[:5] or 'none'}, missing {missing[:5] or 'none'}")


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
