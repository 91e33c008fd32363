"""Fine-tuning any `FineTuningTask` on the shared training system, and running the result.

`finetune(...)` trains from a model directory, evaluates on the eval file after every epoch
(or every N steps), keeps the best model by the task's metric in WORKDIR/best/ (a model
directory every command accepts, with task.json), stops early after `patience`
evaluations without improvement, and writes WORKDIR/eval_results.json (final and best
metrics, the run's settings) and WORKDIR/eval_predictions.jsonl. A rerun of the same
command resumes bit-identically from the last checkpoint (checkpoints are taken at each
evaluation). `load_finetuned(...)` gives `predict` and `evaluate` a task, params and bundle.
Both take a `ModelSource` (interop/model_source.py): the model's config, vocabulary and
weights are each read once, and the trainer is handed the weights, not a path to read again.
"""

import dataclasses
import json
import os

import jax
import ml_collections
import numpy as np

from bert_jax.models.families import config_to_dict
from bert_jax.models.layers.layer_scan import per_layer, store_stacked
from bert_jax.storage import files, json_values
from bert_jax import sharding
from bert_jax.errors import UserError
from bert_jax.interop import model_source, model_writers
from bert_jax.interop.source_kinds import TASK_INFO
from bert_jax.run_config import apply_overrides, base_config, flatten, parse_overrides
from bert_jax.run_config.ranges import check_ranges, check_sections
from bert_jax.training import batching, prediction, trainer, workdir as workdir_lib
from bert_jax.training.finetune_settings import Settings  # with the flags `finetune` shares

EVAL_RESULTS = "eval_results.json"
EVAL_PREDICTIONS = "eval_predictions.jsonl"
BEST = "best"


# The run-config key each Settings field sets, and the flag that sets it on the command line.
_SETTING_FLAGS = {"finetune.epochs": "--epochs", "optimizer.learning_rate": "--learning-rate",
                  "batch_size": "--batch-size", "data.seq_len": "--max-seq-len"}


def run_config_for(model_config, settings: Settings, overrides=()) -> ml_collections.ConfigDict:
    """A locked run config for fine-tuning `model_config`; `--config.KEY=VALUE` applied last.

    Its values go through the same range check as a pre-training config's; an error names
    the flag (or `--config.KEY`) that set the value."""
    config = base_config()
    del config.checkpoint_suite  # pre-training's: a fine-tuning run has no suite of its own
    config.model = ml_collections.ConfigDict(config_to_dict(model_config))
    config.seed = settings.seed
    config.batch_size = settings.batch_size
    config.data.seq_len = settings.max_seq_len
    config.data.max_predictions = 0
    config.optimizer.learning_rate = settings.learning_rate
    config.optimizer.weight_decay = 0.01  # not on LayerNorm parameters or biases
    config.checkpoint.keep = 2
    config.eval.batch_size = 0  # 0 = 2 x batch_size (no gradients: twice the rows fit)
    config.finetune = ml_collections.ConfigDict()
    config.finetune.epochs = settings.epochs  # passes over the training file
    config.finetune.warmup_fraction = 0.1  # linear warm-up over this share of the steps
    config.finetune.eval_every_steps = 0  # evaluate every N steps too; 0 = once per epoch
    config.finetune.patience = 0  # stop after N evaluations without a better metric; 0 = never
    config.finetune.best_metric = ""  # '' = the task's (accuracy, pearson, f1, ...)
    config.finetune.length_window = 50  # batches per length-sorted shuffling window
    config.log_every_steps = 50
    config.lock()
    pairs = parse_overrides(list(overrides))
    apply_overrides(config, pairs, source="finetune")
    names = dict(_SETTING_FLAGS, **{key: f"--config.{key}" for key, _ in pairs})
    values = flatten(config)
    del values["data.max_predictions"]  # 0: fine-tuning tasks draw no masks from shards
    if not values["eval.batch_size"]:  # resolved by schedule_steps; checked as what it becomes
        values["eval.batch_size"] = 2 * values["batch_size"]
    check_ranges(values, source="finetune", names=names)
    check_sections(config, source="finetune")
    model_config.check_seq_len(config.data.seq_len, names["data.seq_len"])
    return config


def schedule_steps(run_config, num_examples: int) -> None:
    """Fills in the step counts that depend on the training set's size."""
    per_epoch = -(-num_examples // run_config.batch_size)
    total = per_epoch * run_config.finetune.epochs
    run_config.num_train_steps = total
    run_config.optimizer.warmup_steps = int(round(run_config.finetune.warmup_fraction * total))
    run_config.eval.every_steps = run_config.finetune.eval_every_steps or per_epoch
    run_config.checkpoint.every_steps = run_config.eval.every_steps
    run_config.log_every_steps = max(1, min(run_config.log_every_steps, per_epoch))
    if not run_config.eval.batch_size:
        run_config.eval.batch_size = 2 * run_config.batch_size


def _host_params(params):
    """Every parameter as a host numpy array (gathered from other processes if sharded there)."""
    if jax.process_count() == 1:
        return jax.device_get(params)
    from jax.experimental import multihost_utils

    return multihost_utils.process_allgather(params, tiled=True)


class BestModelEvaluator:
    """Evaluates on the eval file, keeps WORKDIR/best/, stops after `patience` (trainer protocol)."""
    baseline = False  # a task may ask for an evaluation before the first step
    show_progress = False  # set by the training loop when the run shows a bar

    def __init__(self, task, examples, run_config, workdir, tokenizer, task_info, log):
        self.task, self.examples, self.run_config = task, examples, run_config
        self.workdir, self.tokenizer, self.task_info, self.log = workdir, tokenizer, task_info, log
        self.every_steps = run_config.eval.every_steps
        self.baseline = getattr(task, "evaluate_before_training", False)
        self.metric = run_config.finetune.best_metric or task.best_metric
        self.greater = task.greater_is_better if self.metric == task.best_metric else (
            self.metric != "loss")
        self.best, self.history, self.waited, self.stop = None, [], 0, False
        self.last_predictions = None

    def __call__(self, bundle, state, step) -> dict:
        predictions, means = prediction.predict(
            bundle, state.params, self.examples, self.run_config.eval.batch_size,
            self.run_config.data.seq_len, progress=self.show_progress)
        metrics = prediction.file_metrics(self.task, predictions, means, self.examples.gold)
        if self.metric not in metrics:
            raise UserError(f"finetune.best_metric {self.metric!r} is not one of this task's "
                            f"metrics {sorted(metrics)}")
        self.last_predictions = predictions
        self.history.append(dict(step=step, metrics=metrics))
        value = metrics[self.metric]
        better = self.best is None or (value > self.best["metrics"][self.metric] if self.greater
                                       else value < self.best["metrics"][self.metric])
        if better:
            self.best, self.waited = dict(step=step, metrics=metrics), 0
            self._save_best(bundle, state, tuned_info(self.task, self.task_info, metrics))
        else:
            self.waited += 1
        patience = self.run_config.finetune.patience
        self.stop = bool(patience) and self.waited >= patience
        self.log(f"\nstep {step}: " + ", ".join(f"{name} {value:.4f}" for name, value in
                                                 metrics.items()))
        return metrics

    def _save_best(self, bundle, state, info: dict) -> None:
        params = per_layer(_host_params(state.params))  # as stored: maybe stacked
        if jax.process_index() == 0:
            model_writers.save_model(bundle.model_config, params, self.tokenizer,
                                     os.path.join(self.workdir, BEST), overwrite=True,
                                     task_info=info, inside_run=True)

    def state(self):
        return dict(best=self.best, history=self.history, waited=self.waited, stop=self.stop)

    def restore(self, state) -> None:
        self.best, self.history = state["best"], state["history"]
        self.waited, self.stop = state["waited"], state["stop"]


def task_info(task, max_seq_len: int) -> dict:
    return dict(task=task.name, settings=task.settings(), head=task.head(),
                max_seq_len=max_seq_len)


def tuned_info(task, info: dict, metrics: dict) -> dict:
    """The task info with the settings the task chose on the evaluation (`tuned_settings`)."""
    return dict(info, settings={**info["settings"], **task.tuned_settings(metrics)})


def finetune(task, model, train_path: str, eval_path: str | None, workdir: str,
             settings: Settings, overrides=(), show_progress: bool = True, log=print) -> dict:
    """Fine-tunes `model` (a `ModelSource`, or a path or Hub name) for `task`; returns
    eval_results.json's content. Its weights are read once, by the trainer, and only when
    the run starts fresh (a resumed run reads none)."""
    source = model_source.resolve(model)
    tokenizer = source.tokenizer()
    run_config = run_config_for(source.config(), settings, overrides)
    # Recorded in run_config.json (the weights come below), as one name wherever the command
    # is run from: a rerun in the same work directory must start from the same model.
    run_config.init_from = workdir_lib.model_name(source.name)
    run_config.data.vocab_path = source.vocab_path
    run_config.data.train_files = os.path.abspath(train_path)
    train = task.read_examples(train_path, tokenizer, run_config.data.seq_len)
    evaluation = task.read_examples(eval_path, tokenizer, run_config.data.seq_len) \
        if eval_path else None
    schedule_steps(run_config, len(train.rows))
    info = task_info(task, run_config.data.seq_len)
    sequence = batching.sequence_features(task.batch_schema())

    # A task may draw its batches anew each epoch (masked LM's dynamic masks).
    batches_class = getattr(task, "training_batches", batching.BucketedBatches)

    def dataset_factory(split, batch_size, process_index, process_count):
        return batches_class(
            train.features, sequence, batch_size * process_count, run_config.data.seq_len,
            seed=run_config.seed, process_index=process_index, process_count=process_count,
            window_batches=run_config.finetune.length_window)

    evaluator = BestModelEvaluator(task, evaluation, run_config, workdir, tokenizer, info,
                                   log) if evaluation else None
    result = trainer.train(run_config, workdir, task=task, dataset_factory=dataset_factory,
                           evaluator=evaluator, show_progress=show_progress, log=log,
                           init_weights=source.load,
                           # Written with the run's files, once its weights have been read.
                           task_files={TASK_INFO: json.dumps(info, indent=2)})
    return _write_results(task, run_config, workdir, settings, evaluator, evaluation, result,
                          dict(model=source.name, train=train_path, eval=eval_path,
                               num_train_examples=len(train.rows)), info)


def _write_results(task, run_config, workdir, settings, evaluator, evaluation, result,
                   inputs, info) -> dict:
    # A preempted run writes its results when it finishes; a finished one has written them
    # (unless it was stopped between its last checkpoint and them).
    writes = jax.process_index() == 0 and not result["preempted"] and not (
        result["already_finished"] and files.exists(files.join(workdir, EVAL_RESULTS)))
    results = dict(task=task.name, step=result["step"], stopped_early=result["stopped"],
                   settings=dict(dataclasses.asdict(settings), **inputs,
                                 run_config=run_config.to_dict()))
    if evaluator is not None and evaluator.history:
        results.update(final=evaluator.history[-1], best=evaluator.best,
                       best_metric=evaluator.metric, history=evaluator.history)
        tuned = {name: task.tuned_settings(entry["metrics"])
                 for name, entry in (("best", evaluator.best), ("final", results["final"]))}
        if any(tuned.values()):  # the run's own task.json: its final weights' choice
            results["tuned_settings"] = tuned
            if writes:
                model_writers.write_task_info(
                    workdir, tuned_info(task, info, evaluator.history[-1]["metrics"]))
        if hasattr(task, "summary"):  # a task's own top-level names (mlm: perplexity_before)
            results.update(task.summary(evaluator.history))
    if result["preempted"]:  # not written: the run goes on when the command is run again
        results["exit_status"] = result["exit_status"]
    if writes:
        with files.atomic_write(files.join(workdir, EVAL_RESULTS)) as file:
            json_values.dump(results, file, indent=2)
        if evaluator is not None and evaluator.last_predictions is not None:
            task.write_predictions(files.join(workdir, EVAL_PREDICTIONS), evaluation,
                                   evaluator.last_predictions)
    return results


def load_finetuned(model, batch_size: int, task_from_info, task_name: str | None = None,
                   max_seq_len: int | None = None):
    """(task, bundle, params placed on the mesh, tokenizer, task info) of a fine-tuned model
    (a `ModelSource`, or a path or Hub name).

    `task_from_info(info)` builds the task its task info names (`tasks.task_from_info`: the
    training system imports no task module). `max_seq_len` (default: the training run's;
    else 128, or the model's positions if fewer) is checked against the model's positions
    and comes back as the info's "max_seq_len"."""
    from bert_jax.training import train_step

    source = model_source.resolve(model)
    info = source.task_info()
    if info is None:
        raise UserError(f"{source.name}: not a fine-tuned model (no task.json, and not a "
                        "Hugging Face BertForSequenceClassification / "
                        "BertForTokenClassification directory); train one with bert-jax finetune")
    if task_name is not None and info["task"] != task_name:
        raise UserError(f"{source.name}: was fine-tuned for {info['task']!r}, not {task_name!r}")
    task = task_from_info(info)
    tokenizer = source.tokenizer()
    loaded = source.load()
    model_config, params = loaded.config, loaded.params
    max_seq_len = (max_seq_len or info.get("max_seq_len")
                   or min(Settings.max_seq_len, model_config.max_positions))
    run_config = run_config_for(model_config, Settings(batch_size=batch_size,
                                                       max_seq_len=max_seq_len))
    mesh = sharding.mesh_from_config(run_config.mesh)
    bundle = train_step.build_train_step(run_config, mesh, task=task)
    storage = bundle.layer_storage
    fitted = _fitted(params, storage.abstract_state.params,  # per layer, as a model is saved
                     f"parameters for task {task.name!r}", source.name)
    if storage.plan is not None:
        fitted = store_stacked(fitted, storage.plan)
    placed = jax.tree.map(lambda value, spec: jax.device_put(
        np.asarray(value, spec.dtype), spec.sharding), fitted, bundle.abstract_state.params)
    return task, bundle, placed, tokenizer, dict(info, max_seq_len=max_seq_len)


def _fitted(params: dict, expected: dict, what: str, name: str, path: tuple = ()) -> dict:
    """`params` with exactly the keys of the model's `expected` tree: a model directory may
    hold parameters the task's model does not read (a pooler beside a token head); one it
    lacks is a UserError naming it."""
    if not isinstance(expected, dict):
        return params
    missing = sorted(set(expected) - set(params))
    if missing:
        raise UserError(f"{name}: has no {['/'.join((*path, key)) for key in missing]} {what}")
    return {key: _fitted(params[key], value, what, name, (*path, key))
            for key, value in expected.items()}
