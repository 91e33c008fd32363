"""The training loop of any task: data in, train steps, evaluation, metrics, checkpoints, preemption.

The task (`bert_jax/tasks/base.py`) decides the model, batches, loss and metrics; without
one the run config is pre-training and its shards are read here.

Where the starting state comes from, in this order:
  1. resume: the work directory has a checkpoint -> parameters, optimizer state, step, RNG
     and data position are restored, so the run continues bit-identically;
  2. `init_from`: a Hugging Face / bert-jax model directory or a training work directory ->
     its parameters, a fresh optimizer at step 0 (continued pre-training);
  3. from scratch: parameters drawn from `seed`.
A phase-2 run (longer sequences, other shards) in a phase-1 work directory resumes its
parameters, optimizer and step, and starts the new data from its beginning.

SIGTERM (spot / preemptible VMs) makes the loop save the current step and return; a
non-finite loss or gradient stops it with an error, leaving the last good checkpoint.
"""

import json
import os
import signal
import time

import jax
import numpy as np
from etils import epath

from bert_jax import sharding
from bert_jax.training import checkpointing, distributed, train_step as train_step_lib
from bert_jax.training import training_data
from bert_jax.config import BertConfig
from bert_jax.errors import UserError
from bert_jax.training.metrics_writer import MetricsWriter
from bert_jax.run_config import to_json



class _Preemption:
    """Turns SIGTERM into a flag the loop polls, so the current step can be saved first."""

    def __init__(self):
        self.requested = False
        self._previous = None

    def __enter__(self):
        try:
            self._previous = signal.signal(signal.SIGTERM, self._handle)
        except ValueError:  # not the main thread: leave signals alone
            self._previous = None
        return self

    def _handle(self, signum, frame):
        self.requested = True

    def __exit__(self, *exc):
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)


_BUNDLES = {}


def _bundle_for(run_config, mesh, task=None):
    """build_train_step, reused (with its compiled programs) when a process trains again.

    A resume in the same process, as in tests or notebooks, then skips recompiling.
    """
    task = task or train_step_lib.default_task(run_config)
    precision = run_config.get("precision")
    key = (json.dumps([run_config.model.to_dict(), run_config.optimizer.to_dict(),
                       precision.to_dict() if precision else None,
                       run_config.batch_size, run_config.grad_accum_steps,
                       run_config.schedule_steps or run_config.num_train_steps,
                       run_config.data.seq_len, task.name, task.settings()],
                      sort_keys=True), mesh)
    if key not in _BUNDLES:
        _BUNDLES[key] = train_step_lib.build_train_step(run_config, mesh, task=task)
    return _BUNDLES[key]


def _write_run_files(run_config, workdir: str, model_config) -> None:
    """model_config.json, vocab.txt and run_config.json at the work directory's root."""
    root = epath.Path(workdir)
    root.mkdir(parents=True, exist_ok=True)
    model_path = root / "model_config.json"
    wanted = json.dumps(model_config.to_dict(), indent=2, sort_keys=True)
    # Compared as configs: a file from before the precision knobs left the model still matches.
    if model_path.exists() and BertConfig.from_dict(
            json.loads(model_path.read_text()), str(model_path)) != model_config:
        raise UserError(f"{model_path}: this work directory holds a different model "
                        f"({model_path.read_text()}); use another --workdir")
    for name, text in (("model_config.json", wanted), ("run_config.json", to_json(run_config))):
        (root / (name + ".tmp")).write_text(text)
        (root / (name + ".tmp")).replace(root / name)
    if run_config.data.vocab_path:
        epath.Path(run_config.data.vocab_path).copy(root / "vocab.txt", overwrite=True)


def _initial_state(run_config, bundle, checkpoints, log):
    """(state, meta or None): resume > init_from > from scratch (see the module docstring)."""
    step = checkpoints.latest_step()
    if step is not None:
        abstract = bundle.abstract_state
        params, opt_state, meta = checkpoints.restore(step, abstract.params, abstract.opt_state)
        log(f"resuming from step {step} in {checkpoints.directory}")
        state = train_step_lib.TrainState(
            step=jax.device_put(np.int32(step), bundle.state_shardings.step),
            params=params, opt_state=opt_state)
        return state, meta
    state = bundle.init_state(jax.random.PRNGKey(run_config.seed))
    if run_config.init_from:
        state = _load_init_from(run_config.init_from, bundle, state, log)
    return state, None


def _load_init_from(path, bundle, state, log):
    """`state` with the parameters of a model directory in place of the random ones."""
    from bert_jax import model_io

    config, params, _ = model_io.load_model(path)
    for key in ("vocab_size", "hidden_dim", "num_layers", "num_heads", "mlp_dim",
                "max_positions", "num_segments"):
        if getattr(config, key) != getattr(bundle.model_config, key):
            raise UserError(f"init_from {path}: its {key} is {getattr(config, key)} but the run's "
                            f"model.{key} is {getattr(bundle.model_config, key)}")
    merged = _merge_params(state.params, params)
    placed = jax.tree.map(lambda value, target: jax.device_put(value.astype(target.dtype),
                                                               target.sharding),
                          merged, state.params)
    missing = sorted(set(state.params) - set(params))
    log(f"initialised from {path}" + (f" (fresh {', '.join(missing)})" if missing else ""))
    return state.replace(params=placed)


def _merge_params(initial, loaded):
    """`loaded` wherever it has a value of the same shape (an encoder-only source keeps fresh
    heads; a classifier for other labels is replaced by a fresh one)."""
    if not isinstance(initial, dict):
        fits = loaded is not None and np.shape(loaded) == tuple(initial.shape)
        return np.asarray(loaded) if fits else np.asarray(initial)
    return {key: _merge_params(value, (loaded or {}).get(key)) for key, value in initial.items()}


def evaluate(bundle, params, dataset, num_batches: int | None = None) -> dict:
    """Each term's exact mean over `num_batches` batches (None: all), and the loss.

    Sums and counts are added over batches before dividing, so a mean does not depend on
    how the data falls into batches.
    """
    task, sums, counts, batches = bundle.task, None, None, 0
    for local in (dataset if num_batches is None else
                  (batch for _, batch in zip(range(num_batches), dataset))):
        values = jax.device_get(bundle.eval_step(
            params, distributed.global_batch(local, bundle.batch_shardings)))
        sums = values["sums"] if sums is None else jax.tree.map(np.add, sums, values["sums"])
        counts = (values["counts"] if counts is None
                  else jax.tree.map(np.add, counts, values["counts"]))
        batches += 1
    if not batches:
        raise UserError("evaluation data gave no batches; check data.eval_files")
    means = task.means({name: np.float64(value) for name, value in sums.items()},
                       {name: np.float64(value) for name, value in counts.items()}, xp=np)
    return {name: float(means[name]) for name in task.evaluated}


class _Throughput:
    """Tokens/s and MFU between two log points, from wall time on the host."""

    def __init__(self, run_config, model_config, peak_flops_total: float, task):
        self.tokens_per_step = run_config.batch_size * run_config.data.seq_len
        self.peak = peak_flops_total
        self.flops_per_step = 0
        if peak_flops_total:
            self.flops_per_step = task.train_step_flops(
                model_config, run_config.batch_size, run_config.data.seq_len)
        self.reset(0)

    def reset(self, step: int) -> None:
        self.step, self.time = step, time.perf_counter()

    def measure(self, step: int) -> dict:
        elapsed = max(time.perf_counter() - self.time, 1e-9)
        steps = step - self.step
        values = {"tokens_per_second": steps * self.tokens_per_step / elapsed,
                  "steps_per_second": steps / elapsed}
        if self.peak:
            values["mfu"] = steps * self.flops_per_step / elapsed / self.peak
        self.reset(step)
        return values


def _check_finite(state, step: int, checkpoints) -> None:
    """Raises if a step since the last check was not finite (the step then froze the state)."""
    applied = int(jax.device_get(state.step))
    if applied != step:
        checkpoints.wait()
        last = checkpoints.latest_step()
        raise UserError(
            f"step {applied + 1}: the loss or the gradient norm is not finite (NaN or inf); "
            f"training stopped. The last good checkpoint is step {last} in "
            f"{checkpoints.directory}. Lower optimizer.learning_rate or raise "
            "optimizer.warmup_steps, or check the data, then rerun to resume from it")


def _save(checkpoints, state, step, run_config, dataset, evaluator) -> None:
    # Dropout keys are fold_in(PRNGKey(seed), step): the seed's key and the step restore them.
    rng = jax.random.key_data(jax.random.PRNGKey(run_config.seed)).reshape(-1)
    meta = dict(step=step, rng=[int(x) for x in rng],
                data=distributed.gather_json(dataset.state()),
                data_source=training_data.data_source(run_config),
                evaluator=evaluator.state() if evaluator else None)
    checkpoints.save(step, state.params, state.opt_state, meta)


class TermEvaluator:
    """The default evaluation: the task's term means on data.eval_files (pre-training).

    The interface every evaluator has: `every_steps` (and at the last step), `baseline`
    (also at step 0), `__call__(bundle, state, step) -> metrics`, `stop` (end the run
    now, e.g. early stopping), and `state()` / `restore(state)` for checkpoints.
    """
    baseline = True
    stop = False

    def __init__(self, run_config, dataset_factory):
        self.run_config, self.dataset_factory = run_config, dataset_factory
        self.every_steps = run_config.eval.every_steps

    def __call__(self, bundle, state, step) -> dict:
        processes, index = jax.process_count(), jax.process_index()
        dataset = self.dataset_factory("eval", self.run_config.eval.batch_size // processes,
                                       index, processes)
        return evaluate(bundle, state.params, dataset, self.run_config.eval.num_batches)

    def state(self):
        return None

    def restore(self, state) -> None:
        pass


def train(run_config, workdir: str, *, task=None, dataset_factory=None, evaluator=None,
          show_progress: bool = True, log=print) -> dict:
    """Runs (or resumes) `task` to run_config.num_train_steps in `workdir`.

    Returns {'step', 'preempted', 'stopped', 'evaluations': [(step, metrics)],
    'losses': [(step, loss)]}. Without a task the run is pre-training: its data section is
    prepared and its shards read here. `dataset_factory(split, batch_size, process_index,
    process_count)` gives the batches (required with a task; tests feed synthetic
    pre-training batches through it). `evaluator` (see `TermEvaluator`, the default when
    data.eval_files is set) evaluates during the run and may stop it early.
    """
    if task is None:
        tokenizer = training_data.prepare_data(run_config)
        dataset_factory = dataset_factory or training_data.reader_factory(run_config, tokenizer)
    elif dataset_factory is None:
        raise ValueError("a task's run needs its dataset_factory")
    if evaluator is None and run_config.data.eval_files:
        evaluator = TermEvaluator(run_config, dataset_factory)
    bundle = _bundle_for(run_config, sharding.mesh_from_config(run_config.mesh), task)
    is_chief = jax.process_index() == 0
    if is_chief:
        _write_run_files(run_config, workdir, bundle.model_config)
    checkpoints = checkpointing.Checkpoints(
        os.path.join(workdir, "checkpoints"), keep=run_config.checkpoint.keep,
        async_save=run_config.checkpoint.async_save)
    writer = MetricsWriter(os.path.join(workdir, "tensorboard"), enabled=is_chief)
    try:
        state, meta = _initial_state(run_config, bundle, checkpoints, log)
        if meta is not None and evaluator is not None and meta.get("evaluator") is not None:
            evaluator.restore(meta["evaluator"])
        return _loop(run_config, bundle, state, meta, checkpoints, writer, dataset_factory,
                     evaluator, show_progress and is_chief, log)
    finally:
        checkpoints.close()
        writer.close()


def _loop(run_config, bundle, state, meta, checkpoints, writer, dataset_factory, evaluator,
          show_progress, log) -> dict:
    from tqdm import tqdm

    processes, index = jax.process_count(), jax.process_index()
    dataset = dataset_factory("train", run_config.batch_size // processes, index, processes)
    training_data.restore_position(dataset, meta, run_config, log)
    step = start = int(jax.device_get(state.step))
    total = run_config.num_train_steps
    rng = jax.device_put(jax.random.PRNGKey(run_config.seed), sharding.replicated(bundle.mesh))
    throughput = _Throughput(run_config, bundle.model_config,
                             run_config.peak_flops_per_device * jax.device_count(), bundle.task)
    result = dict(step=step, preempted=False, stopped=False, evaluations=[], losses=[])
    if step >= total or (evaluator is not None and evaluator.stop):
        log(f"the run is complete: step {step} of {total} is saved in {checkpoints.directory}; "
            "raise --config.num_train_steps to train further")
        return result
    # The bar starts after the first step has compiled, so its rate and ETA are the steps'.
    progress = None
    if show_progress:
        log(f"compiling the training step (the progress bar starts after step {start + 1})")
    if evaluator is not None and evaluator.baseline and step == 0:  # the untrained baseline
        _run_evaluation(evaluator, bundle, state, step, writer, result)
    with _Preemption() as preemption:
        while step < total:
            local = next(dataset)
            state, metrics = bundle.train_step(
                state, distributed.global_batch(local, bundle.batch_shardings), rng)
            step += 1
            if progress is None:
                progress = tqdm(total=total, initial=step, disable=not show_progress,
                                unit="step", dynamic_ncols=True, desc=bundle.task.name)
            else:
                progress.update(1)
            stop = _preemption_requested(preemption, step, run_config.log_every_steps)
            if step % run_config.log_every_steps == 0 or step == total or stop:
                _check_finite(state, step, checkpoints)
                _log_metrics(bundle.task, metrics, step, throughput, writer, progress, result)
            # Evaluate before saving, so the checkpoint holds the evaluator's state after it.
            if evaluator is not None and (step % evaluator.every_steps == 0 or step == total):
                _check_finite(state, step, checkpoints)
                _run_evaluation(evaluator, bundle, state, step, writer, result)
                throughput.reset(step)
                result["stopped"] = evaluator.stop
            if (step % run_config.checkpoint.every_steps == 0 or step == total or stop
                    or result["stopped"]):
                _check_finite(state, step, checkpoints)
                _save(checkpoints, state, step, run_config, dataset, evaluator)
            if stop:
                checkpoints.wait()
                log(f"\nSIGTERM: saved step {step} in {checkpoints.directory}; "
                    "run the same command again to resume")
                result["preempted"] = True
                break
            if result["stopped"]:
                log(f"\nstopped early at step {step}: no better evaluation for a while")
                break
    if progress is not None:
        progress.close()
    if run_config.checkpoint.async_save and not result["preempted"]:
        began = time.monotonic()
        log(f"finishing the checkpoint of step {step} (written in the background) ...")
        checkpoints.wait()
        log(f"  written in {time.monotonic() - began:.0f} s")
    result["step"] = step
    return result


def _preemption_requested(preemption, step: int, every: int) -> bool:
    """Whether to stop now; several processes agree at log steps (a collective) so all stop."""
    if jax.process_count() == 1:
        return preemption.requested
    if step % every:
        return False
    votes = distributed.gather_json(preemption.requested)
    return any(votes)


def _log_metrics(task, metrics, step, throughput, writer, progress, result) -> None:
    values = {name: float(value) for name, value in jax.device_get(metrics).items()
              if name in task.logged}
    values.update(throughput.measure(step))
    writer.scalars(step, {f"train/{name}": value for name, value in values.items()})
    result["losses"].append((step, values["loss"]))
    shown = {name: f"{values[name]:.3f}" for name in task.logged[:2]}
    progress.set_postfix(**shown, tok_s=f"{values['tokens_per_second']:.0f}", refresh=False)


def _run_evaluation(evaluator, bundle, state, step, writer, result) -> None:
    metrics = evaluator(bundle, state, step)
    writer.scalars(step, {f"eval/{name}": value for name, value in metrics.items()
                          if isinstance(value, (int, float))})
    result["evaluations"].append((step, metrics))


def format_evaluations(evaluations) -> str:
    """The evaluation history as a table: step, loss, MLM loss and accuracy, NSP accuracy."""
    lines = [f"{'step':>8} {'loss':>8} {'mlm_loss':>9} {'mlm_acc':>8} {'nsp_loss':>9} "
             f"{'nsp_acc':>8}"]
    for step, metrics in evaluations:
        lines.append(f"{step:>8} {metrics['loss']:>8.4f} {metrics['mlm_loss']:>9.4f} "
                     f"{metrics['mlm_accuracy']:>8.4f} {metrics['nsp_loss']:>9.4f} "
                     f"{metrics['nsp_accuracy']:>8.4f}")
    return "\n".join(lines)
