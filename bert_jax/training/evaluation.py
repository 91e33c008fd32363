"""Evaluation during training: the task's exact term means on held-out batches.

`TermEvaluator` is the default evaluator (any task, data.eval_files through the run's
dataset_factory); a fine-tuning run brings its own (`finetune.BestModelEvaluator`). Every
evaluator has: `every_steps` (and at the last step), `baseline` (also at step 0),
`__call__(bundle, state, step) -> metrics`, `stop` (end the run now, e.g. early stopping),
`state()` / `restore(state)` for checkpoints, and `show_progress` (set by the loop:
whether an evaluation shows its own bar).
"""

import jax
import numpy as np

from bert_jax.errors import UserError
from bert_jax.training import distributed
from bert_jax.training.data_position import seek_step


def close_reader(dataset) -> None:
    """Closes a reader that holds threads or files (the shard readers' `close`); a reader
    of arrays in memory has nothing to close. A shard reader left to the garbage collector
    stops its threads at whatever later moment the collector runs, stalling that moment."""
    close = getattr(dataset, "close", None)
    if close is not None:
        close()


def evaluate(bundle, params, dataset, num_batches: int | None = None,
             progress: bool = False) -> dict:
    """Each term's exact mean over `num_batches` batches (None: all), and the loss.

    Sums and counts are added over batches before dividing, so a mean does not depend on
    how the data falls into batches.
    """
    from tqdm import tqdm

    task, sums, counts, batches = bundle.task, None, None, 0
    with tqdm(total=num_batches, unit="batch", desc="evaluate", disable=not progress,
              leave=False) as bar:
        for local in (dataset if num_batches is None else
                      (batch for _, batch in zip(range(num_batches), dataset))):
            values = jax.device_get(bundle.eval_step(  # device_get: the bar counts done work
                params, distributed.global_batch(local, bundle.batch_shardings)))
            sums = values["sums"] if sums is None else jax.tree.map(np.add, sums,
                                                                     values["sums"])
            counts = (values["counts"] if counts is None
                      else jax.tree.map(np.add, counts, values["counts"]))
            batches += 1
            bar.update(1)
    if not batches:
        raise UserError("evaluation data gave no batches; check data.eval_files")
    means = task.means({name: np.float64(value) for name, value in sums.items()},
                       {name: np.float64(value) for name, value in counts.items()}, xp=np)
    return {name: float(means[name]) for name in task.evaluated}


class TermEvaluator:
    """The default evaluation: the task's term means on the dataset_factory's "eval" split
    (data.eval_files), every eval.every_steps (see the module docstring for the interface)."""
    baseline = True
    stop = False
    show_progress = False  # set by the training loop: its own bar, if the run shows one

    def __init__(self, eval_settings, dataset_factory):
        """`eval_settings`: the run config's `eval` section (every_steps, batch_size,
        num_batches)."""
        self.settings, self.dataset_factory = eval_settings, dataset_factory
        self.every_steps = eval_settings.every_steps
        # [{"step", **metrics}] of every evaluation, in the checkpoints too, so a resumed
        # run still reports them all (pretrain's eval_results.json).
        self.history = []
        self._dataset, self._start = None, None

    def _rewound_dataset(self):
        """The eval split's reader at its start: opened at the first evaluation, and at the
        next ones rewound (its position restored, its step 0) rather than opened again, so
        a shard reader's tf.data pipeline is built once a run (data_position's interface;
        a dataset without `restore` is opened each time)."""
        if self._dataset is not None:
            self._dataset.restore(self._start)
            seek_step(self._dataset, 0)
            return self._dataset
        processes, index = jax.process_count(), jax.process_index()
        dataset = self.dataset_factory("eval", self.settings.batch_size // processes,
                                       index, processes)
        if hasattr(dataset, "restore") and hasattr(dataset, "state"):
            self._dataset, self._start = dataset, dataset.state()
        return dataset

    def __call__(self, bundle, state, step) -> dict:
        dataset = self._rewound_dataset()
        try:
            metrics = evaluate(bundle, state.params, dataset, self.settings.num_batches,
                               self.show_progress)
        finally:
            close_reader(dataset)  # its read-ahead of the batches past num_batches
        self.history.append(dict(step=int(step), **metrics))
        return metrics

    def state(self):
        return dict(history=self.history)

    def restore(self, state) -> None:
        # None: a checkpoint from before the history was kept.
        self.history = list(state["history"]) if state else []
