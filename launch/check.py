"""`bert-jax launch check`: a job file's run tried on this machine before a slice is rented.

Loads each job's pretrain config with its overrides exactly as the workers will (a bad key
fails here, in-process, at once), then hands the rest to `bert_jax.preflight` in a
subprocess that simulates the slice's device count on the CPU: vocabulary, manifests and
first records read from the job's own (gs://) paths, the mesh built over those devices,
the train step traced for it. `create` and `run` call this before any gcloud command.
`launch/` imports no JAX; the subprocess does. Before any of that, a job with gs:// paths
needs Cloud Storage to be reachable and credentials to be found: checked in seconds, so that
a machine without network or login fails in one line instead of a minute of retries.
"""

import json
import os
import socket
import subprocess
import sys
import threading
import urllib.parse
from typing import TextIO

from bert_jax.errors import UserError
from launch.job import Job, override_arguments
from launch.local import process_environment


def load_train_config(job: Job):
    """The job's pretrain config with its overrides, found as `pretrain` finds it (a shipped
    config by name from any directory, `configs/bert_large.py` included; another file
    relative to here, as to the repository root on the workers); a missing file, a
    mistyped key or a bad value fails here."""
    from bert_jax.run_config import load_run_config  # ml_collections only, no JAX

    try:
        return load_run_config(job.train_config, override_arguments(job))
    except UserError as error:
        raise UserError(f"{job.path}: [train] config: {error}") from None


# How long reaching Cloud Storage may take before the check says it cannot.
REACH_SECONDS = 5.0
STORAGE_ENDPOINT = "https://storage.googleapis.com"


def _remote_paths(job: Job) -> list[str]:
    return [value for value in (job.workdir, *(str(value) for _, value in job.overrides))
            if value.startswith("gs://")]


def _connect(host: str, port: int, timeout: float) -> str | None:
    """None if a TCP connection to host:port opens within `timeout` seconds (name lookup
    included, which socket's own timeout does not bound), else why not."""
    outcome = {}

    def attempt():
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            outcome["error"] = None
        except OSError as error:
            outcome["error"] = f"{type(error).__name__}: {error.strerror or error}"

    thread = threading.Thread(target=attempt, daemon=True)
    thread.start()
    thread.join(timeout)
    return outcome.get("error", f"no answer within {timeout:.0f} s")


def _has_credentials() -> bool:
    """Application default credentials as google-auth finds them, without asking a server:
    the variable, gcloud's file, or (on a Cloud VM) the metadata server's address."""
    if os.environ.get("GOOGLE_APPLICATION_CREDENTIALS"):
        return True
    config = os.environ.get("CLOUDSDK_CONFIG") or os.path.join(
        os.path.expanduser("~"), ".config", "gcloud")
    if os.path.isfile(os.path.join(config, "application_default_credentials.json")):
        return True
    return _connect("169.254.169.254", 80, 1.0) is None  # a Compute Engine / TPU VM


def check_storage_access(jobs: list[Job], timeout: float = REACH_SECONDS) -> None:
    """Raises `UserError` (one line: what failed and what to set up) when the jobs' gs://
    paths cannot be read from here; the emulator of STORAGE_EMULATOR_HOST stands in for
    Cloud Storage and needs no credentials."""
    paths = [path for job in jobs for path in _remote_paths(job)]
    if not paths:
        return
    emulator = os.environ.get("STORAGE_EMULATOR_HOST")
    url = urllib.parse.urlsplit(emulator or STORAGE_ENDPOINT)
    port = url.port or (443 if url.scheme == "https" else 80)
    reason = _connect(url.hostname, port, timeout)
    if reason is not None:
        raise UserError(
            f"launch check: cannot reach Cloud Storage at {url.hostname}:{port} ({reason}); "
            f"the job reads {paths[0]}. Check this machine's network (or proxy), or run the "
            "check where gs:// is reachable")
    if not emulator and not _has_credentials():
        raise UserError(
            f"launch check: no Google Cloud credentials to read {paths[0]}; run `gcloud auth "
            "application-default login` (or set GOOGLE_APPLICATION_CREDENTIALS to a service "
            "account key file)")


def _spec(job: Job) -> dict:
    """What the preflight subprocess needs of one job; the config is loaded here first."""
    load_train_config(job)
    return dict(job=job.path, config=job.train_config, overrides=override_arguments(job),
                devices=job.accelerator.num_devices, workers=job.num_workers)


def check_jobs(jobs: list[Job], out: TextIO | None = None) -> None:
    """Checks every job; raises `UserError` naming the jobs that would fail on the pod."""
    out = out or sys.stdout
    check_storage_access(jobs)
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
