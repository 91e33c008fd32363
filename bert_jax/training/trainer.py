"""The training loop of any task: data in, train steps, evaluation, metrics, checkpoints, preemption.

The caller gives the task (the interface in `task.py`: model, batches, loss, metrics), the
`dataset_factory` that reads its data and, to start from a model's weights, `init_weights`;
the run config has already been completed by the caller (pre-training's data section by
`bert_jax/tasks/pretraining_data.py`), so run_config.json records what the run used. The
starting state is the checkpoint's (resume), else those weights, else the seed's
(`initial_state.py`). A phase-2 run (longer sequences, other shards) in a phase-1 work
directory resumes its parameters, optimizer and step, and starts the new data from its
beginning (`data_position.py`).

SIGTERM (spot / preemptible VMs) and a first Ctrl-C make the loop save the current step and
return (`interrupts.py`); a non-finite loss, gradient or parameter stops it with an error,
leaving the last good checkpoint. Before anything is written, the work directory is checked
(the same run: model, starting model, task and labels; `init_from` of the right size) and
locked against a second run (`run_lock.py`); a run with nothing left to train writes nothing.
"""

import contextlib
import json
import time
from typing import Callable

import jax

from bert_jax.storage import files
from bert_jax import sharding
from bert_jax.errors import UserError
from bert_jax.progress import CompileWatch
from bert_jax.run_config import checkpoint_suite
from bert_jax.training import batch_warmup, checkpointing, distributed, initial_state
from bert_jax.training import train_step as train_step_lib, workdir as workdir_lib
from bert_jax.training.data_position import data_source, restore_position, seek_step
from bert_jax.training.evaluation import TermEvaluator, close_reader
from bert_jax.training.interrupts import StopRequests
from bert_jax.training.metrics_writer import MetricsWriter
from bert_jax.training.run_lock import RunLock
from bert_jax.training.throughput import Throughput
from input_pipeline.mixture_config import shares


_BUNDLES = {}


def _bundle_for(run_config, mesh, task):
    """build_train_step, reused (with its compiled programs) when a process trains again.

    A resume in the same process, as in tests or notebooks, then skips recompiling.
    """
    precision, warmup = run_config.get("precision"), run_config.get("batch_warmup")
    key = (json.dumps([run_config.model.to_dict(), run_config.optimizer.to_dict(),
                       precision.to_dict() if precision else None,
                       warmup.to_dict() if warmup else None,
                       run_config.batch_size, run_config.grad_accum_steps,
                       run_config.schedule_steps or run_config.num_train_steps,
                       run_config.data.seq_len, task.name, task.settings()],
                      sort_keys=True), mesh)
    if key not in _BUNDLES:
        _BUNDLES[key] = train_step_lib.build_train_step(run_config, mesh, task)
    return _BUNDLES[key]


def train(run_config, workdir: str, *, task, dataset_factory: Callable,
          init_weights: Callable | None = None, evaluator=None, show_progress: bool = True,
          log=print, task_files: dict[str, str] | None = None) -> dict:
    """Runs (or resumes) `task` to run_config.num_train_steps in `workdir`.

    Returns {'step', 'preempted', 'stopped', 'already_finished' (nothing was left to train,
    so nothing was written), 'evaluations': [(step, metrics)], 'losses': [(step, loss)]},
    and when preempted 'exit_status' (130 after Ctrl-C, 143 after SIGTERM).
    `dataset_factory(split, batch_size, process_index, process_count)` gives the
    batches of split "train" (and "eval" for the default evaluator). `init_weights()` gives
    the weights of run_config.init_from's model (an object with .name, .config, .params:
    `initial_state.LoadedWeights`); it is called once, before anything is written, and
    only when the run starts fresh. `evaluator` (see `evaluation.py`; a `TermEvaluator`
    when data.eval_files is set) evaluates during the run and may stop it early.
    `task_files` (name -> text) are written with the run's own files, after every check.
    """
    if evaluator is None and run_config.data.eval_files:
        evaluator = TermEvaluator(run_config.eval, dataset_factory)
    bundle = _bundle_for(run_config, sharding.mesh_from_config(run_config.mesh), task)
    is_chief = jax.process_index() == 0
    # Everything that can refuse the run is checked before anything is written.
    workdir_lib.check_run(workdir, bundle.model_config, run_config.init_from, task_files,
                          getattr(task, "tuned_setting_names", ()))
    weights = None
    if not workdir_lib.has_checkpoint(workdir):
        weights = initial_state.load_init_weights(init_weights, run_config.init_from,
                                                  bundle.model_config)
    with RunLock(workdir) if is_chief else contextlib.nullcontext():
        checkpoints = checkpointing.Checkpoints(
            files.join(workdir, workdir_lib.CHECKPOINTS), keep=run_config.checkpoint.keep,
            async_save=run_config.checkpoint.async_save,
            keep_period=checkpoint_suite.keep_period(run_config))
        try:
            state, meta = initial_state.initial_state(bundle, checkpoints, run_config.seed, log,
                                                      weights)
            if meta is not None and evaluator is not None and meta.get("evaluator") is not None:
                evaluator.restore(meta["evaluator"])
            loop = _Loop(run_config, bundle, checkpoints, evaluator,
                         show_progress and is_chief, log)
            if loop.finished(state):  # a finished run is left exactly as it is
                return loop.result
            if is_chief:
                workdir_lib.write_run_files(run_config, workdir, bundle.model_config, task_files)
            writer = MetricsWriter(files.join(workdir, "tensorboard"), enabled=is_chief)
            try:
                return loop.run(state, meta, dataset_factory, writer)
            finally:
                writer.close()
                close_reader(loop.dataset)
        finally:
            checkpoints.close()


class _Loop:
    """One run's steps and, at the steps that ask for it, logging, evaluation, checkpoints
    and stopping (preemption, early stopping)."""

    def __init__(self, run_config, bundle, checkpoints, evaluator, show_progress, log):
        self.run_config, self.bundle, self.checkpoints = run_config, bundle, checkpoints
        self.evaluator, self.show_progress, self.log = evaluator, show_progress, log
        self.result = dict(step=0, preempted=False, stopped=False, evaluations=[], losses=[],
                           already_finished=False)
        self.writer = None  # the run's MetricsWriter, from `run`
        # With a batch-size warm-up the reader gives micro-batches, a step reads several.
        self.warmup = bundle.batch_warmup
        self.read_size = self.warmup.micro_batch_size if self.warmup else run_config.batch_size
        self.data_source = data_source(run_config.data, self.read_size)
        batch_size, seq_len = run_config.batch_size, run_config.data.seq_len
        peak = run_config.peak_flops_per_device * jax.device_count()
        self.throughput = Throughput(seq_len, bundle.task.train_step_flops(
            bundle.model_config, batch_size, seq_len) / batch_size if peak else 0, peak)
        self.dataset = None
        self.compiles = CompileWatch("the training step", log=None if show_progress else log,
                                     holds=[self.throughput.hold])

    def finished(self, state) -> bool:
        """Whether the run has no step left to train (it says so, and `result` says
        `already_finished`): then nothing is written, not even the run's own files."""
        step = self.result["step"] = int(jax.device_get(state.step))
        total, evaluator = self.run_config.num_train_steps, self.evaluator
        if step < total and not (evaluator is not None and evaluator.stop):
            return False
        self.log(f"the run is complete: step {step} of {total} is saved in "
                 f"{self.checkpoints.directory}; raise --config.num_train_steps to train further")
        self.result.update(already_finished=True, stopped=step < total)
        return True

    def run(self, state, meta, dataset_factory, writer) -> dict:
        from bert_jax.progress import StepProgress

        self.writer = writer
        processes, index = jax.process_count(), jax.process_index()
        self.dataset = dataset_factory("train", self.read_size // processes, index, processes)
        restore_position(self.dataset, meta, self.data_source, self.log)
        step, evaluator = self.result["step"], self.evaluator
        seek_step(self.dataset, step, self.warmup)
        total = self.run_config.num_train_steps
        if evaluator is not None:
            evaluator.show_progress = self.show_progress  # evaluations show their own bar
            if evaluator.baseline and step == 0:  # the untrained baseline
                self._evaluate(state, step)
        rng = jax.device_put(jax.random.PRNGKey(self.run_config.seed),
                             sharding.replicated(self.bundle.mesh))
        # The bar starts after the first step has compiled and run, so its rate and ETA are the
        # steps'; it counts a step once the step's metrics exist (StepProgress), not when queued.
        progress = None
        with StopRequests() as preemption:
            while step < total:
                state, metrics = self._step(state, rng, step, progress)
                self.throughput.count(metrics, self._batch_size(step))
                step += 1
                if progress is None:
                    progress = StepProgress(total, step, self.bundle.task.name,
                                            self.show_progress)
                else:
                    progress.advance(step, metrics)
                if self._after_step(state, step, metrics, progress, preemption):
                    break
        if progress is not None:
            progress.close()
        self._finish(step)
        self.result["step"] = step
        if hasattr(self.dataset, "drawn_counts"):
            self.result["data_proportions"] = self._drawn_shares()
        return self.result

    def _drawn_shares(self) -> dict[str, float]:
        """A mixture's share of the rows every process drew so far, per source: each host
        draws its own rows (a collective call: every process logs at the same steps)."""
        counts = distributed.gather_json(self.dataset.drawn_counts())
        return shares({name: sum(process[name] for process in counts)
                       for name in counts[0]})

    def _step(self, state, rng, step: int, progress):
        """One train step on the next batch; a step on a batch shape not seen before also
        compiles, and says so (fine-tuning batches come in several lengths)."""
        from bert_jax.progress import batch_shapes, elapsed, rows_by_length

        local = self._local_batch(step)
        batch = distributed.global_batch(local, self.bundle.batch_shardings)
        if progress is not None:
            return self.compiles(local, progress.bar,
                                 lambda: self.bundle.train_step(state, batch, rng))
        self.compiles.seen.add(batch_shapes(local))
        # XLA compiles inside this first call, silent for minutes.
        began = time.monotonic()
        with elapsed(f"compiling the training step for {rows_by_length(local)} (the bar "
                     f"starts after step {step + 1})", None if self.show_progress else self.log):
            state, metrics = self.bundle.train_step(state, batch, rng)
            jax.block_until_ready(metrics)
        self.throughput.hold(time.monotonic() - began)
        return state, metrics

    def _local_batch(self, step: int) -> dict:
        """This process's rows of the batch of the update at `step`: the reader's next batch,
        or with a warm-up as many micro-batches as that update takes, in their slots."""
        if self.warmup is None:
            return next(self.dataset)
        micro_batches = [next(self.dataset) for _ in range(self.warmup.micro_batches(step))]
        return batch_warmup.step_batch(micro_batches, self.warmup.full)

    def _batch_size(self, step: int) -> int:
        """Sequences in the update at `step`."""
        return self.warmup.batch_size(step) if self.warmup else self.run_config.batch_size

    def _after_step(self, state, step: int, metrics, progress, preemption) -> bool:
        """Logs, evaluates and saves where `step` asks for it; True when the run stops here."""
        config, evaluator, result = self.run_config, self.evaluator, self.result
        last = step == config.num_train_steps
        stop = _preemption_requested(preemption, step, config.log_every_steps)
        if step % config.log_every_steps == 0 or last or stop:
            _check_finite(state, step, self.checkpoints)
            self._log_metrics(metrics, step, progress)
        # Evaluate before saving, so the checkpoint holds the evaluator's state after it.
        if evaluator is not None and (step % evaluator.every_steps == 0 or last):
            progress.finish()  # the bar shows this step before the evaluation's own bar
            _check_finite(state, step, self.checkpoints)
            self._evaluate(state, step)
            self.throughput.reset(step)
            result["stopped"] = evaluator.stop
        if step % config.checkpoint.every_steps == 0 or last or stop or result["stopped"]:
            _check_finite(state, step, self.checkpoints)
            self._save(state, step)
        if stop:
            self.checkpoints.wait()
            self.log(f"\nstopped (SIGTERM or Ctrl-C): saved step {step} in "
                     f"{self.checkpoints.directory}; run the same command again to resume")
            result["preempted"] = True
            result["exit_status"] = preemption.exit_status  # 130 after Ctrl-C, 143 SIGTERM
            return True
        if result["stopped"]:
            self.log(f"\nstopped early at step {step}: no better evaluation for a while")
            return True
        return False

    def _log_metrics(self, metrics, step: int, progress) -> None:
        """TensorBoard and the progress bar; without a bar (a log file), one line per call."""
        logged = self.bundle.task.logged
        values = {name: float(value) for name, value in jax.device_get(metrics).items()
                  if name in logged}
        values.update(self.throughput.measure(step))
        values["batch_size"] = self._batch_size(step - 1)  # the last update's
        self.writer.scalars(step, {f"train/{name}": value for name, value in values.items()})
        if hasattr(self.dataset, "drawn_counts"):  # a mixture: each source's share so far
            self.writer.scalars(step, {f"data/{name}": share for name, share
                                       in self._drawn_shares().items()})
        self.result["losses"].append((step, values["loss"]))
        shown = {name: f"{values[name]:.3f}" for name in logged[:2]}
        if self.warmup is not None:  # the batch in use while it grows
            shown["batch"] = values["batch_size"]
        progress.set_postfix(**shown, tok_s=f"{values['tokens_per_second']:.0f}", refresh=False)
        if not self.show_progress:
            named = logged + (("batch_size",) if self.warmup is not None else ())
            self.log(f"step {step}/{progress.total}: " + " ".join(
                f"{name} {values[name]:.4g}" for name in named if name in values)
                + f" tokens/s {values['tokens_per_second']:.0f}" + "".join(
                    f" {label} {values[name]:.0f}" for name, label in (
                        ("instances_per_second", "instances/s"),
                        ("real_tokens_per_second", "real tokens/s")) if name in values))

    def _evaluate(self, state, step: int) -> None:
        metrics = self.evaluator(self.bundle, state, step)
        self.writer.scalars(step, {f"eval/{name}": value for name, value in metrics.items()
                                   if isinstance(value, (int, float))})
        self.result["evaluations"].append((step, metrics))

    def _save(self, state, step: int) -> None:
        # Dropout keys are fold_in(PRNGKey(seed), step): the seed's key and the step restore them.
        seed, evaluator = self.run_config.seed, self.evaluator
        meta = dict(step=step, seed=seed, rng=initial_state.seed_key(seed),
                    data=distributed.gather_json(self.dataset.state()),
                    data_source=self.data_source,
                    evaluator=evaluator.state() if evaluator else None)
        saved = self.bundle.layer_storage.per_layer(state)  # checkpoints are per layer
        self.checkpoints.save(step, saved.params, saved.opt_state, meta)

    def _finish(self, step: int) -> None:
        """Waits for a checkpoint still being written in the background (unless preempted:
        that one was waited for already)."""
        if self.run_config.checkpoint.async_save and not self.result["preempted"]:
            began = time.monotonic()
            self.log(f"finishing the checkpoint of step {step} (written in the background) ...")
            self.checkpoints.wait()
            self.log(f"  written in {time.monotonic() - began:.0f} s")


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


def _preemption_requested(preemption, step: int, every: int) -> bool:
    """Whether to stop now; several processes agree at log steps (a collective) so all stop."""
    if jax.process_count() == 1:
        return preemption.requested
    if step % every:
        return False
    votes = distributed.gather_json(preemption.requested)
    return any(votes)
