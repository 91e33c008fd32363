"""Runs gcloud argv lists (or prints them for `--dry-run`) and turns failures into clear errors."""

import os
import shlex
import subprocess
import sys
import threading
from typing import TextIO

from bert_jax.errors import UserError

# Phrases gcloud prints when a zone has no capacity or the project has no quota left.
_NO_CAPACITY_MARKERS = ("resource_exhausted", "quota", "no more capacity", "stockout",
                        "insufficient capacity")


class GcloudError(UserError):
    """A gcloud command failed; the message says which and what to try."""


class CommandRunner:
    """Runs each command, or with `dry_run` prints it (ready to paste) instead."""

    def __init__(self, dry_run: bool = False, out: TextIO | None = None):
        self.dry_run = dry_run
        self.out = out or sys.stdout

    def run(self, argv: list[str], capture: bool = False, check: bool = True
            ) -> subprocess.CompletedProcess | None:
        """Runs `argv`; stdout is returned when `capture`, else streamed to the terminal.

        Returns None in a dry run. stderr is always read so that failures can be explained,
        and echoed so that gcloud's own progress messages still reach the user.
        """
        if self.dry_run:
            print(dry_run_text(argv), file=self.out, flush=True)
            return None
        try:
            process = subprocess.Popen(argv, stdout=subprocess.PIPE if capture else None,
                                       stderr=subprocess.PIPE)
        except FileNotFoundError:
            raise GcloudError(
                f"{argv[0]} was not found on PATH: install the Google Cloud SDK "
                "(https://cloud.google.com/sdk/docs/install) and run `gcloud auth login`") from None
        # stderr is shown as it comes (gcloud's prompts end without a newline) and kept.
        stderr_chunks = []
        copier = threading.Thread(target=_tee, args=(process.stderr, stderr_chunks), daemon=True)
        copier.start()
        stdout = process.stdout.read() if capture else None
        returncode = process.wait()
        copier.join()
        stderr = b"".join(stderr_chunks).decode("utf-8", "replace")
        if check and returncode != 0:
            raise explain_failure(argv, returncode, stderr)
        return subprocess.CompletedProcess(
            argv, returncode, stdout.decode("utf-8", "replace") if capture else None, stderr)


def dry_run_text(argv: list[str]) -> str:
    """`argv` ready to paste; a remote script (`--command=...`) as a here-document, one
    statement a line, instead of a single line of nested quoting."""
    marker = "REMOTE_SCRIPT"
    if not argv[-1].startswith("--command=") or marker in argv[-1]:
        return shlex.join(argv)
    script = argv[-1].removeprefix("--command=")
    return (f"{shlex.join(argv[:-1])} --command=\"$(cat <<'{marker}'\n{script}\n{marker}\n)\"")


def _tee(stream, chunks: list) -> None:
    """Copies a child's stderr to ours chunk by chunk, keeping a copy."""
    while chunk := os.read(stream.fileno(), 4096):
        chunks.append(chunk)
        sys.stderr.write(chunk.decode("utf-8", "replace"))
        sys.stderr.flush()


def explain_failure(argv: list[str], returncode: int, stderr: str) -> GcloudError:
    """The error to show for a failed gcloud call, with advice for a quota or capacity error."""
    last_lines = "\n".join(stderr.strip().splitlines()[-5:])
    message = f"`{shlex.join(argv[:6])} ...` failed with exit code {returncode}:\n{last_lines}"
    if any(marker in stderr.lower() for marker in _NO_CAPACITY_MARKERS):
        message += (
            "\nThe zone has no capacity or the project has no quota for this accelerator. "
            "Try one of: `spot = true` in the job file (spot capacity has its own, larger quota), "
            "`queued = true` (the request waits for capacity instead of failing), another zone "
            "that offers this TPU generation, or ask for more quota on the IAM & Admin > Quotas "
            "page of the Cloud console.")
    return GcloudError(message)
