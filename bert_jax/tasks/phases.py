"""A pre-training run in phases: one config file, every phase in turn, in one work directory.

A phased config is the two-phase mechanism of configs/bert_large_two_phase.py made general:
the file's `get_config(phase)` gives each phase's whole run config and its `PHASES` names
the phases in order (`--config FILE:PHASE` still runs one). A phase sets any run-config key:
its `num_train_steps` is where it ends (the step count carries on: phase 2 of 100-step
phases ends at step 200), and with it the masking rate, the mixture (`data.sources`
re-weighted, `data.mixture_tau`, sources added), `data.seq_len`, `batch_size` and
`grad_accum_steps`, the RoPE theta (`model.global_rope_theta`, `local_rope_theta`: the
model fields a later phase may change, `workdir.PHASE_FIELDS`) and the learning-rate shape
(`optimizer.*`, `schedule_steps`: one schedule over every phase, e.g. a decay in the last).

Each phase resumes the previous phase's checkpoint (parameters, optimizer state, step),
as phase 2 of the two-phase config always has; its data continues where that data was (a
mixture: each unchanged source), else starts from its beginning (`data_position.py`). A
phase already trained is passed over, so the same command resumes a run stopped in any
phase, and reads exactly the batches of a run never stopped.
"""

from bert_jax import run_config as run_config_lib
from bert_jax.errors import UserError
from bert_jax.interop import source_kinds
from bert_jax.tasks.pretraining_data import prepare_run
from bert_jax.training import trainer, workdir as workdir_lib


def phases_of(config_spec: str) -> tuple[str, ...] | None:
    """The phase names of a phased config file (its PHASES), None for one without or for
    `FILE:ARG`, which names its phase."""
    path, has_argument, _ = config_spec.partition(":")
    if has_argument:
        return None
    module = run_config_lib.import_config_file(run_config_lib.resolve_config_file(path))
    phases = getattr(module, "PHASES", None)
    if phases is None:
        return None
    if not phases or not all(isinstance(name, str) for name in phases):
        raise UserError(f"{path}: PHASES must be a non-empty tuple of phase names (strings, "
                        f"each given to get_config), got {phases!r}")
    return tuple(phases)


def load_phases(config_spec: str, overrides: list[str]) -> list[tuple[str, object]]:
    """(name, locked run config) of every phase, each with the overrides; phases must end
    at increasing steps."""
    names = phases_of(config_spec)
    loaded = [(name, run_config_lib.load_run_config(f"{config_spec}:{name}", overrides))
              for name in names]
    ends = [config.num_train_steps for _, config in loaded]
    if any(later <= earlier for earlier, later in zip(ends, ends[1:])):
        raise UserError(f"{config_spec}: each phase's num_train_steps is the step it ends at, "
                        f"so they must increase; got {dict(zip(names, ends))}")
    return loaded


def _saved_step(workdir: str) -> int:
    """The latest finished checkpoint's step in `workdir`, 0 without one."""
    if not workdir_lib.has_checkpoint(workdir):
        return 0
    steps = source_kinds.finished_steps(workdir)
    return steps[-1] if steps else 0


def run_phases(config_spec: str, loaded: list[tuple[str, object]], workdir: str, *,
               show_progress: bool = True, log=print) -> dict:
    """Trains each phase of `config_spec` (`loaded`: `load_phases`' list) in `workdir` in
    turn, passing over those already trained; stops after a phase that was preempted or
    stopped early. Returns the last phase's `trainer.train` result with 'losses' and
    'evaluations' of every phase trained here and 'phases': {name: the step it ended at}."""
    losses, evaluations, ended, result = [], [], {}, None
    for name, config in loaded:
        ended[name] = config.num_train_steps
        if _saved_step(workdir) >= config.num_train_steps:
            continue  # trained by an earlier command
        log(f"phase {name}: to step {config.num_train_steps}")
        run = prepare_run(config, log)
        result = trainer.train(config, workdir, task=run.task,
                               dataset_factory=run.dataset_factory,
                               init_weights=run.init_weights, show_progress=show_progress,
                               log=log)
        losses += result["losses"]
        evaluations += result["evaluations"]
        if result["preempted"] or result["stopped"]:
            break
    if result is None:
        log(f"the run is complete: every phase of {config_spec} is trained in {workdir}")
        result = dict(step=_saved_step(workdir), preempted=False, stopped=False,
                      already_finished=True)
    return dict(result, losses=losses, evaluations=evaluations, phases=ended)
