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

Before that, an output is refused, in one line, where writing it would lose something the
user owns: when it is one of the command's own inputs (`inputs`: `predict --output` naming
its `--input`), and when an existing, non-empty file there is not of the kind the command
writes (`ours`, a `FileKind` from `file_kinds.py`: a search index has its own marker, an
`.npy` its magic; a data file or a corpus is neither). A file of the same kind is replaced,
as a rerun replaces its own output, and an empty file holds nothing to lose. (No file output
has an `--overwrite`; the directories `convert`, `attention` and `probe` publish replace a
non-empty one only with it, `model_writers.py`.) Where the size of an output is known before
the work (`embed`'s N x H floats), `check_space` says before the work that the file system
cannot hold it.

"Must take a new file" is tried, not inferred from permission bits (root passes every
`os.access` test, and a read-only mount fails only when written): a hidden file of one byte
is written and removed there, so a full disk, which still makes an empty file, is found
before the work too. On `gs://` the bucket is checked to answer (`gcs.py`) and the path for
being a file where a directory is wanted or the reverse; whether the account may write is
known only when it writes, where a refusal is still one line (`storage_errors.py`).
"""

import dataclasses
import os
import shutil
import tempfile

from bert_jax.errors import UserError
from bert_jax.storage import files
from bert_jax.storage.file_kinds import FileKind
from bert_jax.storage.storage_errors import storage_failure

FILE, DIRECTORY, PUBLISHED = "file", "directory", "published directory"


@dataclasses.dataclass(frozen=True)
class Output:
    """One path a command will write: how the user named it (`--output`, `DST`), and what."""
    flag: str
    path: str
    kind: str = FILE
    inputs: tuple[tuple[str, str | None], ...] = ()  # (flag, path) read: never written over
    ours: FileKind | None = None  # FILE: the kind it writes; another kind there is refused
    reusable: bool = False  # an existing file of its kind may be read, not written (an index)


def check_outputs(outputs: list[Output]) -> None:
    """Raises a `UserError` naming the flag for the first output that cannot be written."""
    for output in outputs:
        check_output(output)


def check_output(output: Output) -> None:
    path, named = output.path, f"{output.flag} {output.path}"
    wants_file = output.kind == FILE
    _check_not_an_input(output, named)
    if wants_file and files.isdir(path):
        raise UserError(f"{named}: is a directory; expected the name of a file to write")
    if not wants_file and files.isfile(path):
        raise UserError(f"{named}: is a file; expected a directory (or a name for a new one)")
    if wants_file and output.ours is not None and files.isfile(path) and files.size(path) \
            and not output.ours.recognise(path):
        raise UserError(f"{named}: exists and is not {output.ours.what}, so it is not a file "
                        "this command wrote; bert-jax replaces only its own kind of file: "
                        "choose another name, or move that file away")
    if files.is_remote(path) or (output.reusable and files.isfile(path)):
        return  # a reused file in a read-only place is fine; replacing it is one line then
    start = os.path.abspath(path)
    if output.kind != DIRECTORY or not os.path.isdir(start):
        start = os.path.dirname(start)  # FILE and PUBLISHED are made beside their path
    existing = start
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise UserError(f"{named}: {existing} is a file, so no directory can be made there")
    _try_writing(existing, named)


def _check_not_an_input(output: Output, named: str) -> None:
    """Refuses an output that is one of the command's inputs, or (a directory published whole,
    replacing what is there) that holds one."""
    for flag, source in output.inputs:
        if not source:
            continue
        if _same_path(output.path, source):
            raise UserError(f"{named}: is also {flag} {source}, which writing there would "
                            "destroy; choose another output")
        if output.kind == PUBLISHED and files.contains(output.path, source):
            raise UserError(f"{named}: holds {flag} {source}, which replacing it would "
                            "destroy; choose another output")


def _same_path(first: str, second: str) -> bool:
    """Whether two names reach one file or directory (a link or `./` in either included)."""
    if files.is_remote(first) or files.is_remote(second):
        return files.absolute(first) == files.absolute(second)
    try:
        return os.path.samefile(first, second)
    except OSError:  # one does not exist yet
        return os.path.realpath(first) == os.path.realpath(second)


def check_space(flag: str, path: str, needed: int) -> None:
    """Refuses, before the work, a local output of `needed` bytes that its file system has no
    room for (a remote one is checked when written)."""
    if files.is_remote(path):
        return
    directory = os.path.dirname(os.path.abspath(path))
    while not os.path.isdir(directory):
        directory = os.path.dirname(directory)
    free = shutil.disk_usage(directory).free
    if needed > free:
        raise UserError(f"{flag} {path}: needs {needed:,} bytes but {directory} has only "
                        f"{free:,} free; free some space or choose another place")


def _try_writing(directory: str, named: str) -> None:
    """Creates a hidden file of one byte in `directory` and removes it; a refusal is one line.
    The byte matters: a full file system still makes an empty file, but has no block for it."""
    probe = None
    try:
        descriptor, probe = tempfile.mkstemp(prefix=".bert-jax-write-check-", dir=directory)
        try:
            os.write(descriptor, b"\n")
            os.fsync(descriptor)  # a network file system may refuse only when it flushes
        finally:
            os.close(descriptor)
    except OSError as error:
        reason = storage_failure(error) or error.strerror or str(error)
        raise UserError(f"{named}: cannot write in {directory}: {reason}; choose a writable "
                        "place") from None
    finally:
        if probe is not None and os.path.exists(probe):
            os.remove(probe)
