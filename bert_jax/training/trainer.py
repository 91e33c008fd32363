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

SIGTERM (spot / preemptible VMs) and a first Ctrl-C make the loop save the current step and
return (`interrupts.py`); a non-finite loss, gradient or parameter stops it with an error,
leaving the last good checkpoint. Before anything is written, the work directory is checked
(same model, `init_from` of the right size) and locked against a second run (`run_lock.py`).
"""

import contextlib
import json
import time

import jax
import numpy as np

from bert_jax import files, sharding
from bert_jax.training import checkpointing, distributed, train_step as train_step_lib
from bert_jax.training import training_data, workdir as workdir_lib
from bert_jax.errors import UserError
from bert_jax.training.interrupts import StopRequests
from bert_jax.training.metrics_writer import MetricsWriter
from bert_jax.training.run_lock import RunLock


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


def _initial_state(run_config, bundle, checkpoints, log, init_source=None):
    """(state, meta or None): resume > init_from > from scratch (see the module docstring).

    `init_source` is `_fitting_weights`' (name, params), read before anything was written."""
    step = checkpoints.latest_step()
    if step is not None:
        abstract = bundle.abstract_state
        params, opt_state, meta = checkpoints.restore(step, abstract.params, abstract.opt_state)
        _check_seed(meta, run_config.seed, checkpoints.directory, step)
        log(f"resuming from step {step} in {checkpoints.directory}")
        state = train_step_lib.TrainState(
            step=jax.device_put(np.int32(step), bundle.state_shardings.step),
            params=params, opt_state=opt_state)
        return state, meta
    state = bundle.init_state(jax.random.PRNGKey(run_config.seed))
    if init_source is not None or run_config.init_from:
        path, params = init_source or _read_init_from(run_config.init_from, bundle.model_config)
        state = _load_init_from(path, params, state, log,
                                getattr(bundle.task, "head_names", {}))
    return state, None


def _seed_key(seed: int) -> list[int]:
    """The raw key data of PRNGKey(seed), as checkpoints record it."""
    return [int(x) for x in jax.random.key_data(jax.random.PRNGKey(seed)).reshape(-1)]


def _check_seed(meta: dict, seed: int, directory, step: int) -> None:
    """A resumed run must keep its seed: dropout keys and the data order derive from it."""
    saved = meta.get("seed")
    if (saved is not None and saved != seed) or meta.get("rng", _seed_key(seed)) != _seed_key(seed):
        was = f"seed {saved}" if saved is not None else f"another seed (key {meta['rng']})"
        raise UserError(f"{directory}/{step}: this run was trained with {was}, not --config.seed "
                        f"{seed}; resuming with another seed would silently change its dropout "
                        "and data order. Use the original seed, or another --workdir")


def _read_init_from(path, model_config):
    """(path, params) of a model directory, refused if its sizes differ from the run's."""
    from bert_jax.interop import model_source

    return _fitting_weights(model_source.resolve(path).load(), model_config)


def _fitting_weights(loaded, model_config):
    """(name, params) of loaded weights (`.name`, `.config`, `.params`), refused if their
    sizes differ from the run's."""
    from bert_jax.run_config.init_from import ARCHITECTURE

    config, name = loaded.config, loaded.name
    for key in ARCHITECTURE:
        if getattr(config, key) != getattr(model_config, key):
            raise UserError(f"init_from {name}: its {key} is {getattr(config, key)} but the run's "
                            f"model.{key} is {getattr(model_config, key)}")
    return name, loaded.params


def _load_init_from(path, params, state, log, head_names=None):
    """`state` with the parameters of a model directory in place of the random ones;
    `head_names` says what the task calls a fresh parameter group (regress: its one-output
    `classifier` is a regression head)."""
    merged = _merge_params(state.params, params)
    placed = jax.tree.map(lambda value, target: jax.device_put(value.astype(target.dtype),
                                                               target.sharding),
                          merged, state.params)
    names = head_names or {}
    missing = sorted(names.get(name, name) for name in set(state.params) - set(params))
    log(f"initialised from {path}" + (f" (fresh {', '.join(missing)})" if missing else ""))
    return state.replace(params=placed)


def _merge_params(initial, loaded):
    """`loaded` wherever it has a value of the same shape (an encoder-only source keeps fresh
    heads; a classifier for other labels is replaced by a fresh one)."""
    if not isinstance(initial, dict):
        fits = loaded is not None and np.shape(loaded) == tuple(initial.shape)
        return np.asarray(loaded) if fits else np.asarray(initial)
    return {key: _merge_params(value, (loaded or {}).get(key)) for key, value in initial.items()}


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


class _Throughput:
    """Tokens/s and MFU between two log points, from wall time on the host; instances/s and
    real (not padding) tokens/s from the steps' counts where the task counts them (packed
    rows hold several instances, and a row's padding is no work done)."""
    COUNTED = {"num_sequences": "instances_per_second",
               "num_real_tokens": "real_tokens_per_second"}

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
        self.totals = {}

    def count(self, metrics: dict) -> None:
        """Adds a step's counts; they stay on the device, so this does not wait for the step."""
        for name in self.COUNTED:
            if name in metrics:
                self.totals[name] = metrics[name] + self.totals.get(name, 0.0)

    def measure(self, step: int) -> dict:
        elapsed = max(time.perf_counter() - self.time, 1e-9)
        steps = step - self.step
        values = {"tokens_per_second": steps * self.tokens_per_step / elapsed,
                  "steps_per_second": steps / elapsed}
        for name, total in jax.device_get(self.totals).items():
            values[self.COUNTED[name]] = float(total) / elapsed
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
        advice = ("Lower optimizer.learning_rate or raise optimizer.warmup_steps, or check the "
                  "data, then")
        where = (f"The last good checkpoint is step {last} in {checkpoints.directory}. {advice} "
                 "rerun to resume from it" if last is not None else
                 f"No checkpoint has been saved yet, so there is nothing to resume. {advice} "
                 "start again")
        raise UserError(f"step {applied + 1}: the loss, the gradient norm or the updated "
                        f"parameters are not finite (NaN or inf); training stopped. {where}")


def _save(checkpoints, state, step, run_config, dataset, evaluator) -> None:
    # Dropout keys are fold_in(PRNGKey(seed), step): the seed's key and the step restore them.
    meta = dict(step=step, seed=run_config.seed, rng=_seed_key(run_config.seed),
                data=distributed.gather_json(dataset.state()),
                data_source=training_data.data_source(run_config),
                evaluator=evaluator.state() if evaluator else None)
    checkpoints.save(step, state.params, state.opt_state, meta)


class TermEvaluator:
    """The default evaluation: the task's term means on data.eval_files (pre-training).

    The interface every evaluator has: `every_steps` (and at the last step), `baseline`
    (also at step 0), `__call__(bundle, state, step) -> metrics`, `stop` (end the run
    now, e.g. early stopping), `state()` / `restore(state)` for checkpoints, and
    `show_progress` (set by the loop: whether an evaluation shows its own bar).
    """
    baseline = True
    stop = False
    show_progress = False  # set by the training loop: its own bar, if the run shows one

    def __init__(self, run_config, dataset_factory):
        self.run_config, self.dataset_factory = run_config, dataset_factory
        self.every_steps = run_config.eval.every_steps

    def __call__(self, bundle, state, step) -> dict:
        processes, index = jax.process_count(), jax.process_index()
        dataset = self.dataset_factory("eval", self.run_config.eval.batch_size // processes,
                                       index, processes)
        return evaluate(bundle, state.params, dataset, self.run_config.eval.num_batches,
                        self.show_progress)

    def state(self):
        return None

    def restore(self, state) -> None:
        pass


def train(run_config, workdir: str, *, task=None, dataset_factory=None, evaluator=None,
          show_progress: bool = True, log=print, init_weights=None) -> dict:
    """Runs (or resumes) `task` to run_config.num_train_steps in `workdir`.

    Returns {'step', 'preempted', 'stopped', 'evaluations': [(step, metrics)],
    'losses': [(step, loss)]}, and when preempted 'exit_status' (130 after Ctrl-C, 143 after
    SIGTERM). Without a task the run is pre-training: its data section is prepared and its
    shards read here. `dataset_factory(split, batch_size, process_index,
    process_count)` gives the batches (required with a task; tests feed synthetic
    pre-training batches through it). `evaluator` (see `TermEvaluator`, the default when
    data.eval_files is set) evaluates during the run and may stop it early.
    `init_weights()` gives the starting weights (`.name`, `.config`, `.params`) in place of
    reading run_config.init_from; it is called once, before anything is written, and only
    when the run starts fresh.
    """
    if task is None:
        tokenizer = training_data.prepare_data(run_config, log)
        dataset_factory = dataset_factory or training_data.reader_factory(run_config, tokenizer)
    elif dataset_factory is None:
        raise ValueError("a task's run needs its dataset_factory")
    if evaluator is None and run_config.data.eval_files:
        evaluator = TermEvaluator(run_config, dataset_factory)
    bundle = _bundle_for(run_config, sharding.mesh_from_config(run_config.mesh), task)
    is_chief = jax.process_index() == 0
    # Everything that can refuse the run is checked before anything is written.
    workdir_lib.check_model_config(workdir, bundle.model_config)
    init_source = None
    if (init_weights or run_config.init_from) and not workdir_lib.has_checkpoint(workdir):
        init_source = (_fitting_weights(init_weights(), bundle.model_config) if init_weights
                       else _read_init_from(run_config.init_from, bundle.model_config))
    with RunLock(workdir) if is_chief else contextlib.nullcontext():
        if is_chief:
            workdir_lib.write_run_files(run_config, workdir, bundle.model_config)
        checkpoints = checkpointing.Checkpoints(
            files.join(workdir, workdir_lib.CHECKPOINTS), keep=run_config.checkpoint.keep,
            async_save=run_config.checkpoint.async_save)
        writer = MetricsWriter(files.join(workdir, "tensorboard"), enabled=is_chief)
        try:
            state, meta = _initial_state(run_config, bundle, checkpoints, log, init_source)
            if meta is not None and evaluator is not None and meta.get("evaluator") is not None:
                evaluator.restore(meta["evaluator"])
            return _loop(run_config, bundle, state, meta, checkpoints, writer, dataset_factory,
                         evaluator, show_progress and is_chief, log)
        finally:
            checkpoints.close()
            writer.close()


def _loop(run_config, bundle, state, meta, checkpoints, writer, dataset_factory, evaluator,
          show_progress, log) -> dict:
    from bert_jax.progress import StepProgress, elapsed

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
    # The bar starts after the first step has compiled and run, so its rate and ETA are the
    # steps'; it counts a step once the step's metrics exist (StepProgress), not when queued.
    progress = None
    if evaluator is not None:
        evaluator.show_progress = show_progress  # evaluations show their own bar
    if evaluator is not None and evaluator.baseline and step == 0:  # the untrained baseline
        _run_evaluation(evaluator, bundle, state, step, writer, result)
    with StopRequests() as preemption:
        while step < total:
            batch = distributed.global_batch(next(dataset), bundle.batch_shardings)
            if progress is None:  # XLA compiles inside this first call, silent for minutes
                with elapsed(f"compiling the training step (the bar starts after step "
                             f"{start + 1})", None if show_progress else log):
                    state, metrics = bundle.train_step(state, batch, rng)
                    jax.block_until_ready(metrics)
            else:
                state, metrics = bundle.train_step(state, batch, rng)
            step += 1
            throughput.count(metrics)
            if progress is None:
                progress = StepProgress(total, step, bundle.task.name, show_progress)
            else:
                progress.advance(step, metrics)
            stop = _preemption_requested(preemption, step, run_config.log_every_steps)
            if step % run_config.log_every_steps == 0 or step == total or stop:
                _check_finite(state, step, checkpoints)
                _log_metrics(bundle.task, metrics, step, throughput, writer, progress, result,
                             None if show_progress else log)
            # Evaluate before saving, so the checkpoint holds the evaluator's state after it.
            if evaluator is not None and (step % evaluator.every_steps == 0 or step == total):
                progress.finish()  # the bar shows this step before the evaluation's own bar
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
                log(f"\nstopped (SIGTERM or Ctrl-C): saved step {step} in "
                    f"{checkpoints.directory}; run the same command again to resume")
                result["preempted"] = True
                result["exit_status"] = preemption.exit_status  # 130 after Ctrl-C, 143 SIGTERM
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


def _log_metrics(task, metrics, step, throughput, writer, progress, result, log=None) -> None:
    """TensorBoard and the progress bar; without a bar (a log file), one line per call."""
    values = {name: float(value) for name, value in jax.device_get(metrics).items()
              if name in task.logged}
    values.update(throughput.measure(step))
    writer.scalars(step, {f"train/{name}": value for name, value in values.items()})
    result["losses"].append((step, values["loss"]))
    shown = {name: f"{values[name]:.3f}" for name in task.logged[:2]}
    progress.set_postfix(**shown, tok_s=f"{values['tokens_per_second']:.0f}", refresh=False)
    if log is not None:
        log(f"step {step}/{progress.total}: " + " ".join(
            f"{name} {values[name]:.4g}" for name in task.logged if name in values)
            + f" tokens/s {values['tokens_per_second']:.0f}" + "".join(
                f" {label} {values[name]:.0f}" for name, label in (
                    ("instances_per_second", "instances/s"),
                    ("real_tokens_per_second", "real tokens/s")) if name in values))


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
