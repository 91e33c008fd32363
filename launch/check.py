"""`bert-jax launch check`: a job file's run tried on this machine before a slice is rented.

Loads each job's pretrain config with its overrides exactly as the workers will (a bad key
fails here, in-process, at once), then hands the rest to `bert_jax.preflight` in a
subprocess that simulates the slice's device count on the CPU: vocabulary, manifests and
first records read from the job's own (gs://) paths, the mesh built over those devices,
the train step traced for it. `create` and `run` call this before any gcloud command.
`launch/` imports no JAX; the subprocess does.
"""

import json
import os
import subprocess
import sys
from typing import TextIO

from bert_jax.errors import UserError
from launch.job import Job, override_arguments
from launch.local import process_environment


def load_train_config(job: Job):
    """The job's pretrain config with its overrides, as the workers load it (paths are
    relative to the repository root); a mistyped key or a bad value fails here."""
    from bert_jax.run_config import load_run_config  # ml_collections only, no JAX

    if not os.path.isfile(job.train_config.partition(":")[0]):
        raise UserError(f"{job.path}: [train] config {job.train_config!r} is not in this "
                        f"directory ({os.getcwd()}); run bert-jax launch from the repository "
                        "root")
    return load_run_config(job.train_config, override_arguments(job))


def _spec(job: Job) -> dict:
    """What the preflight subprocess needs of one job; the config is loaded here first."""
    load_train_config(job)
    return dict(job=job.path, config=job.train_config, overrides=override_arguments(job),
                devices=job.accelerator.num_devices, workers=job.num_workers)


def check_jobs(jobs: list[Job], out: TextIO | None = None) -> None:
    """Checks every job; raises `UserError` naming the jobs that would fail on the pod."""
    out = out or sys.stdout
    specs = [_spec(job) for job in jobs]
    env = process_environment(max(spec["devices"] for spec in specs))
    out.write(f"bert-jax launch check: {len(specs)} job(s); reading their data and tracing "
              "the train step on simulated devices\n")
    out.flush()
    process = subprocess.Popen(
        [sys.executable, "-m", "bert_jax.preflight", json.dumps(specs)], env=env,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    failed = 0
    for line in process.stdout:
        failed += line.startswith("  error: ")
        out.write(line)
        out.flush()
    if process.wait() != 0:
        what = f"{failed} of {len(specs)} job(s) would fail on the pod" if failed else \
            f"the check itself failed (exit status {process.returncode})"
        raise UserError(f"launch check: {what}, see above")
