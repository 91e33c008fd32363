"""Temporaries beside an output, named for the process that writes them, and swept when
that process is gone.

A writer builds its output under a hidden sibling name, `.NAME.tmp-PID-N`, and renames it over
NAME when complete (`files.atomic_write`, `interop/model_writers.write_directory_atomically`,
create-data's shards). A `kill -9` or a power cut runs no `finally`, so the temporary stays,
hidden and as large as the output; the PID in its name lets the next writer of the same path
tell a dead writer's leftovers from a live one's and remove only the former.
"""

import contextlib
import os
import shutil


def temporary_prefix(path: str) -> str:
    """`.NAME.tmp-PID-`: the start of every temporary name a writer of `path` in this process
    uses beside it (hidden, and naming its process, so a later run can tell it is stale)."""
    return f".{os.path.basename(os.path.abspath(path))}.tmp-{os.getpid()}-"


def temporary_name(path: str) -> str:
    """A unique sibling name (`temporary_prefix` + a count); stale siblings of a killed
    writer are removed first. Created by the caller (`open(..., "x")` keeps the umask)."""
    remove_stale_temporaries(path)
    stem = os.path.join(os.path.dirname(os.path.abspath(path)), temporary_prefix(path))
    for attempt in range(1000):
        if not os.path.exists(stem + str(attempt)):
            return stem + str(attempt)
    raise FileExistsError(f"{path}: no free temporary name beside it")


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def remove_stale_temporaries(path: str) -> None:
    """Removes the temporaries beside local `path` (`.NAME.tmp-PID-*`, files or directories)
    whose writer process is gone: a `kill -9` or a power cut leaves them, hidden and as large
    as the output, and no `finally` of theirs will run. A live writer's are kept, so two
    runs on this machine never delete each other's work."""
    directory, name = os.path.split(os.path.abspath(path))
    prefix = f".{name}.tmp-"
    try:
        entries = os.listdir(directory)
    except (FileNotFoundError, NotADirectoryError):
        return
    for entry in entries:
        pid = entry[len(prefix):].split("-", 1)[0]
        if not entry.startswith(prefix) or not pid.isdigit() or _process_alive(int(pid)):
            continue
        stale = os.path.join(directory, entry)
        if os.path.isdir(stale) and not os.path.islink(stale):
            shutil.rmtree(stale, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                os.remove(stale)
