"""A training run's last N checkpoints averaged into one model (ModernBERT's recipe ends with the
mean of its decay phase's checkpoints).

Each parameter of the result is the element-wise mean of that parameter in the N checkpoints,
summed in float32 one checkpoint at a time (so memory holds the sum and one checkpoint) and
stored in the checkpoints' own dtype. The result is a bert-jax model directory, as `convert`
writes one: the run's model_config.json, vocabulary and task.json (a fine-tuning run's), and
the mean parameters; every path may be local or gs://.
"""

import numpy as np

from bert_jax.errors import UserError
from bert_jax.interop import model_source, model_writers
from bert_jax.interop.source_kinds import CHECKPOINTS, finished_steps
from bert_jax.storage import files


def _chosen_steps(source, last: int) -> list[int]:
    """The last `last` finished steps of the training run `source`, or a UserError."""
    if last < 1:
        raise UserError(f"--last must be at least 1, got {last}")
    if source.kind != "training-run":
        raise UserError(f"{source.name}: not a training run (a work directory with "
                        f"model_config.json and {CHECKPOINTS}/); it is a {source.kind} "
                        "directory")
    steps = finished_steps(source.directory)
    if len(steps) < last:
        held = f"steps {', '.join(map(str, steps))}" if steps else "none"
        raise UserError(f"{files.join(source.directory, CHECKPOINTS)}: {len(steps)} finished "
                        f"checkpoint(s) ({held}), fewer than --last {last}; the run keeps "
                        "checkpoint.keep of them")
    return steps[-last:]


def mean_parameters(step_directories: list[str], progress: bool = True) -> dict:
    """The element-wise mean of the params of each `checkpoints/<step>` directory, summed in
    float32, in the checkpoints' dtype. Each is read as `convert` reads one (shapes checked
    against the run's model config, NaN refused)."""
    import jax
    from tqdm import tqdm

    total, first = None, None
    for directory in tqdm(step_directories, unit="checkpoint", desc="average",
                          disable=not progress):
        params = model_source.in_directory(directory).load().params
        if total is None:
            first = params
            total = jax.tree.map(lambda value: np.array(value, np.float32), params)
        else:
            if jax.tree.structure(params) != jax.tree.structure(total):
                raise UserError(f"{directory}: its parameters are not those of "
                                f"{step_directories[0]} (another model in the same run?)")
            jax.tree.map(lambda running, value: np.add(running, value, out=running,
                                                       dtype=np.float32), total, params)
    count = np.float32(len(step_directories))
    return jax.tree.map(lambda running, value: (running / count).astype(value.dtype),
                        total, first)


def average_checkpoints(run_directory: str, destination: str, last: int,
                        overwrite: bool = False, progress: bool = True) -> list[int]:
    """Writes the mean of the run's last `last` checkpoints to `destination` as a bert-jax
    model directory; returns the steps averaged. Everything that can refuse is checked before
    a checkpoint is read, and the directory appears only when complete."""
    source = model_source.in_directory(run_directory)
    steps = _chosen_steps(source, last)
    config, tokenizer, task_info = source.config(), source.tokenizer(), source.task_info()
    model_writers.check_destination(destination, overwrite, (source.directory,))
    root = files.join(source.directory, CHECKPOINTS)
    params = mean_parameters([files.join(root, str(step)) for step in steps], progress)
    model_writers.save_model(config, params, tokenizer, destination, overwrite,
                             task_info=task_info, sources=(source.directory,))
    return steps
