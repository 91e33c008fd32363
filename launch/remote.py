"""The bash scripts `bert-jax launch` runs on the TPU VM workers through `gcloud ... ssh --command`.

Every value that comes from the job file enters a script through `shlex.quote`, and each
script is handed to `bash -c` as one quoted word, so nothing in a job file can break out of
the command it belongs to. `$HOME` and `$(hostname)` are left for the worker to expand.
"""

import shlex

from launch.job import Job, override_arguments

CHECKOUT = "$HOME/bert-jax"  # where `setup` clones the code on each worker
LOG_DIR = "$HOME/bert-jax-logs"  # each worker's own log of the run, appended across restarts
# Seconds between copies of a worker's log to the work directory, where it outlives the slice.
LOG_COPY_SECONDS = 60


def _join(statements: list[str]) -> str:
    """One statement a line, so that a dry run prints a script a person can read."""
    return "\n".join(statements)


def bash(statements: list[str]) -> str:
    """One remote command that runs the statements under bash with strict error handling."""
    return "bash -c " + shlex.quote(_join(["set -euo pipefail", *statements]))


def log_file(job: Job) -> str:
    return f"{LOG_DIR}/{shlex.quote(job.name)}.log"


def _pid_file(job: Job) -> str:
    return f"{LOG_DIR}/{shlex.quote(job.name)}.pid"


def setup_script(job: Job) -> str:
    """Clones (or updates) the code at the job's revision and installs it in a virtualenv."""
    return bash([
        f"[ -d {CHECKOUT}/.git ] || git clone --quiet {shlex.quote(job.repository)} {CHECKOUT}",
        f"cd {CHECKOUT}",
        f"git fetch --quiet origin {shlex.quote(job.revision)}",
        "git checkout --quiet --detach FETCH_HEAD",
        "python3 -m venv .venv",
        ".venv/bin/pip install --quiet --upgrade pip",
        # requirements-tpu.txt adds libtpu: jax then finds the worker's TPU chips.
        ".venv/bin/pip install --quiet -r requirements.txt -r requirements-tpu.txt",
        ".venv/bin/pip install --quiet --no-deps -e .",
        'echo "bert-jax $(git rev-parse --short HEAD) installed on $(hostname)"',
    ])


def pretrain_argv(job: Job) -> list[str]:
    """The command every worker runs. On a TPU VM, jax.distributed finds the coordinator,
    the number of processes and this worker's id by itself, so no flags for them; the
    pretrain command resumes from the newest checkpoint in `--workdir` when there is one.
    No progress bar: its carriage returns make a log file unreadable."""
    return ([".venv/bin/bert-jax", "pretrain", "--config", job.train_config,
             "--workdir", job.workdir, "--no-progress"]
            + override_arguments(job))


def _training_script(job: Job) -> list[str]:
    """Runs pretrain with its output in the worker's log, copied to the work directory."""
    log, remote_log = log_file(job), f"{shlex.quote(job.workdir + '/logs/')}$(hostname).log"
    exports = [f"export {key}={shlex.quote(value)}" for key, value in job.env]
    return [
        *exports,
        f"( while sleep {LOG_COPY_SECONDS}; do gcloud storage cp --quiet {log} {remote_log} "
        "> /dev/null 2>&1 || true; done ) &",
        "copier=$!",
        "status=0",
        f"{shlex.join(pretrain_argv(job))} >> {log} 2>&1 || status=$?",
        f'echo "bert-jax pretrain exited with status $status at $(date -u)" >> {log}',
        "kill $copier 2> /dev/null || true",
        f"gcloud storage cp --quiet {log} {remote_log} || true",
        "exit $status",
    ]


def start_script(job: Job) -> str:
    """Starts the run detached (it survives the ssh session), unless it is already running."""
    pid_file = _pid_file(job)
    return bash([
        f"mkdir -p {LOG_DIR}",
        f"cd {CHECKOUT}",
        f"if [ -f {pid_file} ] && kill -0 \"$(cat {pid_file})\" 2> /dev/null; then "
        f'echo "{job.name} is already running on $(hostname)"; exit 0; fi',
        f'echo "=== run started $(date -u) ===" >> {log_file(job)}',
        # setsid: its own session, so the job outlives the ssh connection; its pid is the
        # process group that `stop` signals.
        f"nohup setsid {bash(_training_script(job))} > /dev/null 2>&1 < /dev/null &",
        f"echo $! > {pid_file}",
        f'echo "started {job.name} on $(hostname); log: {log_file(job)}"',
    ])


def stop_script(job: Job) -> str:
    """SIGTERM to the run's process group: pretrain writes a checkpoint and exits."""
    pid_file = _pid_file(job)
    return bash([
        f"if [ -f {pid_file} ] && kill -0 \"$(cat {pid_file})\" 2> /dev/null; then "
        f'kill -TERM -- "-$(cat {pid_file})"; echo "stopping {job.name} on $(hostname)"; '
        f'else echo "{job.name} is not running on $(hostname)"; fi',
    ])


def follow_log_script(job: Job, lines: int) -> str:
    return bash([f"tail -n {int(lines)} -F {log_file(job)}"])
