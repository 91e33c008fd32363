"""Every output path checked before any work: one check for every command that writes.

A command that writes declares its outputs (`outputs(args)` in its module: the flag, the
path, and whether a file or a directory goes there); `bert_jax/cli.py` checks them all
here before the command runs, so a path that cannot be written is one line naming the flag
before any model is loaded or text read, not a traceback after minutes of work:

  FILE       a file written under a temporary name beside it and renamed into place: the
             path must not be a directory, and the directory it goes into (or the nearest
             one that exists, the others made on the way) must take a new file;
  DIRECTORY  a directory made if missing, whose files are written inside it (a work
             directory, create-data's shards): the path must not be a file, and it (or
             the nearest existing directory above it) must take a new file;
  PUBLISHED  a directory built under a temporary name beside it and renamed into place
             (convert, attention, probe): not a file, and its parent must take a new entry.

"Must take a new file" is tried, not inferred from permission bits: a hidden file is created
and removed there (root passes every `os.access` test, and a read-only mount fails only
when written). On `gs://` the bucket is checked to answer (`gcs.py`) and the path for being
a file where a directory is wanted or the reverse; whether the account may write is known
only when it writes, where a refusal is still one line (`storage_errors.py`).
"""

import dataclasses
import os
import tempfile

from bert_jax.errors import UserError
from bert_jax.storage import files
from bert_jax.storage.storage_errors import storage_failure

FILE, DIRECTORY, PUBLISHED = "file", "directory", "published directory"


@dataclasses.dataclass(frozen=True)
class Output:
    """One path a command will write: how the user named it (`--output`, `DST`), and what."""
    flag: str
    path: str
    kind: str = FILE


def check_outputs(outputs: list[Output]) -> None:
    """Raises a `UserError` naming the flag for the first output that cannot be written."""
    for output in outputs:
        check_output(output)


def check_output(output: Output) -> None:
    path, named = output.path, f"{output.flag} {output.path}"
    wants_file = output.kind == FILE
    if wants_file and files.isdir(path):
        raise UserError(f"{named}: is a directory; expected the name of a file to write")
    if not wants_file and files.isfile(path):
        raise UserError(f"{named}: is a file; expected a directory (or a name for a new one)")
    if files.is_remote(path):
        return
    start = os.path.abspath(path)
    if output.kind != DIRECTORY or not os.path.isdir(start):
        start = os.path.dirname(start)  # FILE and PUBLISHED are made beside their path
    existing = start
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise UserError(f"{named}: {existing} is a file, so no directory can be made there")
    _try_writing(existing, named)


def _try_writing(directory: str, named: str) -> None:
    """Creates and removes a hidden file in `directory`; a refusal is one line."""
    try:
        descriptor, probe = tempfile.mkstemp(prefix=".bert-jax-write-check-", dir=directory)
    except OSError as error:
        reason = storage_failure(error) or error.strerror or str(error)
        raise UserError(f"{named}: cannot write in {directory}: {reason}; choose a writable "
                        "place") from None
    os.close(descriptor)
    os.remove(probe)
