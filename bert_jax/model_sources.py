"""What kind of model a path holds, and where a bert-jax run keeps its pieces.

`source_kind` tells the sources `model_io.load_model` reads apart by the files inside: a
Hugging Face directory (config.json), a bert-jax model directory (model_config.json +
params/), a training work directory (model_config.json + checkpoints/), one step of a run
(checkpoints/<step>/params), an original TF checkpoint (bert_config.json + *.ckpt.index);
a Hugging Face Hub name resolves to its cached directory first (interop/hub.py). Nothing here
reads weights, so commands can ask for a model's vocabulary or kind cheaply.
"""

from bert_jax import files
from bert_jax.errors import UserError

MODEL_CONFIG = "model_config.json"
PARAMS = "params"
CHECKPOINTS = "checkpoints"
VOCAB = "vocab.txt"


def latest_step_directory(work_directory: str) -> str:
    """checkpoints/<step> of the highest finished step (orbax's temporary names are not ints)."""
    root = files.join(work_directory, CHECKPOINTS)
    steps = [int(name) for name in files.listdir(root)
             if name.isdigit() and files.isdir(files.join(root, name, PARAMS))]
    if not steps:
        raise UserError(f"{root}: this training run has no finished checkpoint yet")
    return files.join(root, str(max(steps)))


def _vocab_or_none(directory: str) -> str | None:
    path = files.join(directory, VOCAB)
    return path if files.exists(path) else None


def source_kind(path: str) -> str:
    """'huggingface', 'bert-jax', 'tf-checkpoint', 'training-run' or 'training-step'."""
    from bert_jax.interop import hub, tf_checkpoint

    path = hub.resolve(path)  # a Hugging Face Hub name: its cached (or downloaded) directory
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
    """Where the model at `path` (of source `kind`) keeps its model config, vocab.txt and
    task.json: its training run's directory for one step of a run, else `path` itself."""
    return _step_run_directory(path) if kind == "training-step" else path


def vocab_path(path: str, kind: str | None = None) -> str | None:
    """The vocab.txt that belongs to the model at `path` (any source kind), without loading it.

    `kind`: the path's `source_kind`, where the caller has it (saves listing it again)."""
    from bert_jax.interop import hub

    path = hub.resolve(path)
    return _vocab_or_none(metadata_directory(path, kind or source_kind(path)))
