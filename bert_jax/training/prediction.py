"""Predictions of a fine-tuned model over a whole file, in input order, with the loss.

Batches come from `batching.BucketedBatches` in length order (little padding); the
task's predict hook turns each batch's outputs into per-example predictions, which are
put back in input order. Term sums and counts are added over batches, so the loss is
the exact mean over the file.
"""

import jax
import numpy as np

from bert_jax.training import batching, distributed


def predict_inputs(finetuned: tuple, read_examples, batch_size: int,
                   max_seq_len: int | None = None, progress: bool = False):
    """(task, examples, predictions) of a model from `finetune.load_finetuned`.

    `read_examples(task, tokenizer, max_seq_len)` gives the Examples: from a file for
    `bert-jax predict`, from Python values for the API's `Model.predict`; everything after
    is this one path, so the two give the same predictions. `max_seq_len` defaults to the
    training run's.
    """
    task, bundle, params, tokenizer, info = finetuned
    max_seq_len = max_seq_len or info.get("max_seq_len", 128)
    examples = read_examples(task, tokenizer, max_seq_len)
    predictions, _ = predict(bundle, params, examples, batch_size, max_seq_len, progress)
    return task, examples, predictions


def predict(bundle, params, examples, batch_size: int, max_seq_len: int,
            progress: bool = False) -> tuple[dict, dict]:
    """({name: per-example predictions, in input order}, {term means and 'loss'}).

    'loss' is left out when no example carries the training objective (its count is 0).

    A prediction array is stacked when every example's has the same shape (labels,
    probabilities); otherwise it is a list (e.g. per-token tags of different lengths).
    """
    from tqdm import tqdm

    from bert_jax.progress import CompileWatch

    task, compiles = bundle.task, CompileWatch("the prediction step", enabled=progress)
    processes, index = jax.process_count(), jax.process_index()
    batches = batching.BucketedBatches(
        examples.features, batching.sequence_features(task.batch_schema()), batch_size,
        max_seq_len, shuffle=False, process_index=index, process_count=processes)
    count = batches.num_examples
    rows_out: dict[str, list] = {}
    sums = counts = None
    with tqdm(total=count, unit="example", desc="predict", disable=not progress) as bar:
        for rows in batches.plan(0):
            local = batches.batch(rows)
            # Every process asks for the same global batch; outputs come back replicated.
            result = jax.device_get(compiles(local, bar, lambda: bundle.predict_step(
                params, distributed.global_batch(local, bundle.batch_shardings))))
            global_batch = {name: _gathered(value, local, processes)
                            for name, value in local.items()}
            predictions = task.predictions(result["outputs"], global_batch)
            for name, values in predictions.items():
                column = rows_out.setdefault(name, [None] * count)
                for position, row in enumerate(rows):
                    column[row] = values[position]
            sums = _add(sums, result["sums"])
            counts = _add(counts, result["counts"])
            bar.update(len(rows))
    means = task.means({name: np.float64(value) for name, value in sums.items()},
                       {name: np.float64(value) for name, value in counts.items()}, xp=np)
    if not any(counts[task.terms[term]] for term in task.objective):
        # Nothing in the file carries the training loss (an STS file scoring an mnrl or
        # softmax model): no loss, rather than a 0 that reads as a perfect one.
        del means["loss"]
    return {name: _stacked(column) for name, column in rows_out.items()}, {
        name: float(value) for name, value in means.items()}


def file_metrics(task, predictions: dict, means: dict, gold) -> dict:
    """The loss (where the file carries the training objective) and the task's metrics."""
    loss = {"loss": means["loss"]} if "loss" in means else {}
    return {**loss, **task.evaluate(predictions, gold)}


def _gathered(value, local, processes):
    """This process's rows of a batch feature -> the global batch's (a collective if several)."""
    if processes == 1:
        return value
    from jax.experimental import multihost_utils

    return np.asarray(multihost_utils.process_allgather(value, tiled=True))


def _add(total, values):
    values = {name: float(value) for name, value in values.items()}
    if total is None:
        return values
    return {name: total[name] + value for name, value in values.items()}


def _stacked(column: list):
    shapes = {np.shape(value) for value in column}
    return np.stack(column) if len(shapes) == 1 else column
