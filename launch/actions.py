"""The `bert-jax launch` actions: create, setup, run, logs, status, stop, delete.

Preemption: a spot slice that Cloud TPU takes back stays listed in state PREEMPTED (a
queued resource goes to SUSPENDED) and can never run again. `run` therefore looks at the
state first: READY -> start the job; PREEMPTED, TERMINATED, SUSPENDED or FAILED -> delete the
slice, create it again, install the code and start the job, which resumes from the newest
checkpoint in the gs:// work directory. Absent -> an error: `run` never rents a slice that
the user did not `create` first.
"""

import sys
import time

from bert_jax.errors import UserError
from launch import gcloud, remote
from launch.check import check_jobs, load_train_config
from launch.job import Job
from launch.runner import CommandRunner, GcloudError

NOT_FOUND = "NOT_FOUND"
# States from which a slice cannot come back: only delete-and-create helps.
LOST_STATES = ("PREEMPTED", "TERMINATED", "SUSPENDED", "FAILED", "STOPPED")
# Seconds between polls while a queued resource waits for capacity.
POLL_SECONDS = 30.0


def _message(text: str) -> None:
    """Progress for the user on stderr, so stdout stays commands (dry run) or logs only."""
    print(f"bert-jax launch: {text}", file=sys.stderr, flush=True)


def _query_state(runner: CommandRunner, argv: list[str]) -> str:
    result = runner.run(argv, capture=True, check=False)
    if result.returncode != 0:
        if "not_found" in result.stderr.lower() or "not found" in result.stderr.lower():
            return NOT_FOUND
        raise GcloudError(f"could not read the state of the slice: {result.stderr.strip()}")
    return result.stdout.strip() or "UNKNOWN"


def slice_state(job: Job, runner: CommandRunner) -> str:
    """READY, CREATING, PREEMPTED, ... or NOT_FOUND; for a queued job, a lost queued
    resource (SUSPENDED, FAILED) or one still waiting reports its own state."""
    if job.queued:
        queued_state = _query_state(runner, gcloud.describe_queued(job))
        if queued_state != "ACTIVE":
            return queued_state
    return _query_state(runner, gcloud.describe_node(job))


def _check(job: Job, runner: CommandRunner, full: bool) -> None:
    """A mistake in the job should not cost a rented slice: the config and its overrides are
    always loaded; `full` (and not a dry run) also reads the data and traces the step."""
    if full and not runner.dry_run:
        check_jobs([job], out=sys.stderr)
    else:
        load_train_config(job)


def create(job: Job, runner: CommandRunner, poll_seconds: float = POLL_SECONDS,
           check: bool = True) -> None:
    """Rents the slice, after `launch check` (`check=False`: the config load only); a
    queued request is polled until its slice is ACTIVE."""
    _check(job, runner, check)
    _message(f"creating {job.accelerator.name} slice {job.name!r} "
             f"({job.num_workers} workers) in {job.zone}")
    if not job.queued:
        runner.run(gcloud.create_node(job))
        return
    runner.run(gcloud.create_queued(job))
    if runner.dry_run:
        return
    last_state = None
    while True:
        state = _query_state(runner, gcloud.describe_queued(job))
        if state != last_state:
            _message(f"queued resource {job.name!r} is {state}")
            last_state = state
        if state == "ACTIVE":
            return
        if state in ("FAILED", "SUSPENDED", NOT_FOUND):
            raise GcloudError(f"queued resource {job.name!r} ended in state {state}; see "
                              f"`gcloud compute tpus queued-resources describe {job.name} "
                              f"--zone={job.zone} --project={job.project}`")
        time.sleep(poll_seconds)


def setup(job: Job, runner: CommandRunner) -> None:
    """Installs the job's code revision in a virtualenv on every worker."""
    _message(f"installing {job.repository}@{job.revision} on {job.num_workers} workers")
    runner.run(gcloud.ssh(job, remote.setup_script(job)))


def start(job: Job, runner: CommandRunner) -> None:
    runner.run(gcloud.ssh(job, remote.start_script(job)))
    if runner.dry_run:
        _message(f"dry run: nothing was started; the command above would start the job on "
                 f"{job.num_workers} workers")
        return
    _message(f"started on {job.num_workers} workers; follow with `bert-jax launch logs "
             f"{job.path}`; logs are copied to {job.workdir}/logs/")


def run(job: Job, runner: CommandRunner, poll_seconds: float = POLL_SECONDS,
        check: bool = True) -> None:
    """Starts the job on every worker, first re-creating a preempted slice (see module doc);
    `launch check` runs first unless `check=False`."""
    _check(job, runner, check)
    if runner.dry_run:  # no state to look at: print the commands of the READY path
        start(job, runner)
        return
    state = slice_state(job, runner)
    if state == NOT_FOUND:
        raise UserError(f"slice {job.name!r} does not exist in {job.zone}: run "
                        f"`bert-jax launch create {job.path}` and `setup` first")
    if state in LOST_STATES:
        _message(f"slice {job.name!r} is {state}: deleting it, creating it again, installing "
                 f"the code and resuming from {job.workdir}")
        delete(job, runner)
        create(job, runner, poll_seconds, check=False)  # checked above
        setup(job, runner)
    elif state != "READY":
        raise UserError(f"slice {job.name!r} is {state}; wait until `bert-jax launch status "
                        f"{job.path}` says READY")
    start(job, runner)


def logs(job: Job, runner: CommandRunner, worker: int = 0, lines: int = 100) -> None:
    """Follows one worker's log live; once the slice is gone, lists the copies in the workdir."""
    if runner.dry_run or slice_state(job, runner) == "READY":
        runner.run(gcloud.ssh(job, remote.follow_log_script(job, lines), worker=str(worker)))
        return
    _message(f"slice {job.name!r} is not READY; the logs copied to the work directory are:")
    runner.run(gcloud.list_storage(f"{job.workdir}/logs/"))
    _message("print one with `gcloud storage cat PATH`")


def status(job: Job, runner: CommandRunner) -> str:
    """Prints and returns the slice's state."""
    if runner.dry_run:
        if job.queued:
            runner.run(gcloud.describe_queued(job))
        runner.run(gcloud.describe_node(job))
        return "UNKNOWN"
    state = slice_state(job, runner)
    print(f"{job.name}: {state} ({job.accelerator.name}, {job.num_workers} workers, "
          f"{job.zone}, {'spot' if job.spot else 'on-demand'}"
          f"{', queued' if job.queued else ''}; workdir {job.workdir})", flush=True)
    if state in LOST_STATES:
        print(f"{job.name}: lost; `bert-jax launch run {job.path}` re-creates it and resumes "
              "from the newest checkpoint", flush=True)
    return state


def stop(job: Job, runner: CommandRunner) -> None:
    """Asks the run on every worker to checkpoint and exit (SIGTERM); the slice stays."""
    runner.run(gcloud.ssh(job, remote.stop_script(job)))


def delete(job: Job, runner: CommandRunner) -> None:
    """Gives the slice back (and its queued resource): billing stops; the workdir stays."""
    _message(f"deleting slice {job.name!r}")
    runner.run(gcloud.delete_queued(job) if job.queued else gcloud.delete_node(job))


ACTIONS = {"create": create, "setup": setup, "run": run, "logs": logs, "status": status,
           "stop": stop, "delete": delete}
