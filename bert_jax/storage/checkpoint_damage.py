"""Damaged checkpoints recognised in one place, and named with the file that is damaged.

A checkpoint that was whole when written can be damaged later: a file deleted, or cut short
by an interrupted copy or a full disk on another machine. Orbax and tensorstore then fail
deep inside a restore, each in its own shape (a FileNotFoundError, a JSON error, a KeyError
for a missing item, a ValueError with tensorstore's status code wrapped in a plain
Exception), with tracebacks from every read still in flight. `damage` turns any of these
into words naming the file; `quiet_failed_restore` keeps the reads in flight quiet.
A network or permission failure is not damage: it passes through unchanged.
"""

import contextlib
import gc
import json
import logging
import os
import re
import sys

from bert_jax.storage import files

# tensorstore's words for data that is not there or not what it should be (a file deleted,
# cut short or overwritten); a network or permission failure is none of these.
_DAMAGE_CODES = ("OUT_OF_RANGE", "NOT_FOUND", "DATA_LOSS", "FAILED_PRECONDITION")
_TENSORSTORE_READ = re.compile(r'"(?P<key>[^"]+)" in OCDBT database at (?:local file )?'
                               r'"(?P<where>[^"]*)":? (?P<detail>.*?)(?: \[tensorstore_spec|$)',
                               re.MULTILINE)
_ITEM_MISSING = re.compile(r'Item "(?P<item>[^"]+)" was not found in the checkpoint')
_VALUE_SIZE = re.compile(r"not valid for value of size (?P<size>\d+)")


def damage(error: BaseException, directory: str) -> str | None:
    """What is damaged in the checkpoint `directory` (a step's, or a `params` item's) in
    words naming the file, if `error` (or one it was raised from) says a file is missing,
    cut short or not what it should be; None for any other error (a bug, a network or
    permission failure), which the caller lets through."""
    seen, visited = error, set()
    while seen is not None and id(seen) not in visited:
        visited.add(id(seen))
        if isinstance(seen, FileNotFoundError):
            missing = seen.filename or str(seen).removeprefix("File ").removesuffix(" not found.")
            return f"{missing} is missing"
        if isinstance(seen, json.JSONDecodeError):
            return f"{_invalid_json_file(directory)} is not valid JSON ({seen.msg})"
        if isinstance(seen, KeyError) and _ITEM_MISSING.search(str(seen)):
            return f"{directory}/{_ITEM_MISSING.search(str(seen))['item']} is missing"
        text = str(seen)
        if isinstance(seen, ValueError) and text.startswith(_DAMAGE_CODES):
            read = _TENSORSTORE_READ.search(text)
            if read is None:
                return f"{directory}: {text.splitlines()[0][:300]}"
            where, detail = read["where"].rstrip("/"), read["detail"].splitlines()[0][:300]
            return (f"{where}: {read['key']} cannot be read ({detail})"
                    + _cut_file(where, _VALUE_SIZE.search(detail)))
        seen = seen.__cause__ or seen.__context__
    return None


# The JSON files orbax reads back: a step's metadata, an item's tree metadata, `meta`'s value.
_JSON_NAMES = ("_CHECKPOINT_METADATA", "_METADATA", "metadata")


def _invalid_json_file(directory: str) -> str:
    """The JSON file under `directory` that does not parse (the error does not say which),
    or 'a JSON file under DIRECTORY' where it cannot be told."""
    if not files.is_remote(directory):
        for root, _, names in sorted(os.walk(directory)):
            for name in sorted(set(names) & set(_JSON_NAMES)):
                path = os.path.join(root, name)
                try:
                    with open(path, encoding="utf-8") as file:
                        json.load(file)
                except ValueError:  # JSONDecodeError, or bytes that are not UTF-8
                    return path
    return f"a JSON file under {directory}"


def _cut_file(directory: str, size) -> str:
    """'; FILE holds only N bytes' naming each file under the (local) `directory` of the
    size tensorstore found: the data file(s) cut short (a database may keep a copy of its
    data in a second file, cut as well)."""
    if size is None or files.is_remote(directory) or not os.path.isdir(directory):
        return ""
    wanted = int(size["size"])
    found = sorted(os.path.join(root, name) for root, _, names in os.walk(directory)
                   for name in names if os.path.getsize(os.path.join(root, name)) == wanted)
    if not found:
        return ""
    return f"; {' and '.join(found)} {'holds' if len(found) == 1 else 'hold'} only {wanted} bytes"


@contextlib.contextmanager
def quiet_failed_restore():
    """Around a restore that may fail: the reads still in flight when it fails finish later
    on tensorstore's threads, each waking an event loop orbax has closed, and Python prints
    each as an "Exception ignored" traceback (dozens for one cut file). A hook installed
    once, for the process, drops exactly those (`_is_noise`) and passes any other on.
    Orbax's own warnings on the way to the error (absl's "Failed to get item metadata")
    are held back for the block: the error says what they would."""
    global _previous_hook
    if _previous_hook is None:
        _previous_hook = sys.unraisablehook
        sys.unraisablehook = _drop_noise
    absl = logging.getLogger("absl")
    level = absl.level
    absl.setLevel(logging.ERROR)
    try:
        yield
    except BaseException:
        # The abandoned reads are finalised now rather than at some later moment. Only on
        # failure: a full collection takes 0.6 s with TensorFlow and torch imported, and a
        # restore that succeeded abandoned nothing.
        gc.collect()
        raise
    finally:
        absl.setLevel(level)


_previous_hook = None


def _is_noise(unraisable) -> bool:
    """A read of a failed restore: its wake-up of the closed event loop, or its coroutine,
    finalised with the error the restore already raised."""
    error, source = unraisable.exc_value, unraisable.object
    if isinstance(error, RuntimeError) and str(error) == "Event loop is closed":
        return True
    code = getattr(source, "cr_code", None)
    return code is not None and "orbax" in code.co_filename


def _drop_noise(unraisable) -> None:
    if not _is_noise(unraisable):
        _previous_hook(unraisable)
