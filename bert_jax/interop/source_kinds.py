"""What kind of model a directory holds, and where a bert-jax run keeps its pieces.

`source_kind` tells the sources `model_source.ModelSource` reads apart by the files inside: a
Hugging Face directory (config.json), a bert-jax model directory (model_config.json +
params/), a training work directory (model_config.json + checkpoints/), one step of a run
(checkpoints/<step>/params), an original TF checkpoint (bert_config.json + *.ckpt.index).
A Hugging Face Hub name is resolved to its cached directory before (`model_source.resolve`).
Nothing here reads a file's content.
"""

from bert_jax.storage import files
from bert_jax.errors import UserError

MODEL_CONFIG = "model_config.json"
PARAMS = "params"
CHECKPOINTS = "checkpoints"
# What a fine-tuned model was trained for: {"task", "settings", "head", "max_seq_len"}.
TASK_INFO = "task.json"


def finished_steps(work_directory: str) -> list[int]:
    """The steps of a training run's finished checkpoints, in order (orbax's temporary names,
    of checkpoints still being written, are not integers)."""
    root = files.join(work_directory, CHECKPOINTS)
    return sorted(int(name) for name in files.listdir(root)
                  if name.isdigit() and files.isdir(files.join(root, name, PARAMS)))


def latest_step_directory(work_directory: str) -> str:
    """checkpoints/<step> of the highest finished step."""
    steps = finished_steps(work_directory)
    root = files.join(work_directory, CHECKPOINTS)
    if not steps:
        raise UserError(f"{root}: this training run has no finished checkpoint yet")
    return files.join(root, str(steps[-1]))


def source_kind(path: str) -> str:
    """'huggingface', 'bert-jax', 'tf-checkpoint', 'training-run' or 'training-step' for a
    directory (a Hub name already resolved to one)."""
    from bert_jax.interop import tf_checkpoint

    if not files.isdir(path):
        raise UserError(f"{path}: expected a model directory, not a file" if files.exists(path)
                        else f"{path}: no such file or directory")
    names = set(files.listdir(path))
    has = names.__contains__
    parent = files.dirname(files.absolute(path))
    if has("config.json"):
        return "huggingface"
    if has(MODEL_CONFIG) and has(PARAMS):
        return "bert-jax"
    if has(MODEL_CONFIG) and has(CHECKPOINTS):
        return "training-run"
    if has(PARAMS) and files.basename(parent) == CHECKPOINTS:
        return "training-step"
    if tf_checkpoint.is_checkpoint_directory(path):
        return "tf-checkpoint"
    raise UserError(
        f"{path}: not a model directory; expected a Hugging Face BERT directory (config.json + "
        f"model.safetensors), a bert-jax model directory ({MODEL_CONFIG} + {PARAMS}/), a "
        f"training work directory ({MODEL_CONFIG} + {CHECKPOINTS}/), one of its step "
        "directories, or an original BERT checkpoint (bert_config.json + *.ckpt.index)")


def _step_run_directory(step_directory: str) -> str:
    """The training work directory of checkpoints/<step>/."""
    return files.dirname(files.dirname(files.absolute(step_directory)))


def metadata_directory(path: str, kind: str) -> str:
    """Where the model at `path` (of source `kind`) keeps its model config, tokenizer and
    task.json: its training run's directory for one step of a run, else `path` itself."""
    return _step_run_directory(path) if kind == "training-step" else path
