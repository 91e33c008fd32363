"""Storage faults a user can run into, recognised in one place and reported as one line.

A full disk, a file-size limit (`ulimit -f`), a read-only or forbidden directory and a
used-up quota are the user's to fix, not bugs: each becomes a `UserError` naming the path,
whoever met it. They reach us in several shapes: an `OSError` with its errno (Python's own
files, the run lock), a `ValueError` whose text holds the OS's words (tensorstore, under
orbax's checkpoints, often wrapped by orbax's background threads), or a TensorFlow error
with the OS's words (the shard writer's TFRecordWriter), or a short write with no errno at
all (NumPy's `tofile`, under `np.save`: "7680 requested and 2016 written", counted in array
items). So an error is
recognised by its errno, by the OS's words for one of these errnos, or as a short write, on
it or on any error that caused it.
"""

import contextlib
import errno
import os
import re

from bert_jax.errors import UserError

# errno -> what to tell the user it means.
REASONS = {
    errno.ENOSPC: "no space left on device",
    errno.EFBIG: "file too large (the file-size limit, `ulimit -f`, or the file system's "
                 "largest file)",
    errno.EROFS: "read-only file system",
    errno.EACCES: "permission denied",
    errno.EDQUOT: "disk quota exceeded",
}
# The OS's words for each ("No space left on device", "File too large", ...), for errors
# that carry only a message.
_WORDS = {os.strerror(code): reason for code, reason in REASONS.items()}
_SHORT_WRITE = re.compile(r"(\d+) requested and (\d+) written")


def storage_failure(error: BaseException) -> str | None:
    """What went wrong in words (`REASONS`) if `error` or one of its causes is one of these
    storage faults; None for any other error."""
    seen, visited = error, set()
    while seen is not None and id(seen) not in visited:
        visited.add(id(seen))
        if isinstance(seen, OSError) and seen.errno in REASONS:
            return REASONS[seen.errno]
        text = str(seen)
        for words, reason in _WORDS.items():
            if words in text:
                return reason
        short = _SHORT_WRITE.search(text) if isinstance(seen, OSError) else None
        if short:
            return (f"the write stopped short, {int(short[2]):,} of {int(short[1]):,} array "
                    "items written (the file system is full, or a quota or file-size limit "
                    "was reached)")
        seen = seen.__cause__ or seen.__context__
    return None


@contextlib.contextmanager
def reported(path: str, action: str, advice: str = ""):
    """Turns a storage fault inside the block into `UserError("PATH: ACTION failed: REASON;
    ADVICE")`; every other error passes unchanged."""
    try:
        yield
    except UserError:
        raise
    except Exception as error:
        reason = storage_failure(error)
        if reason is None:
            raise
        raise UserError(f"{path}: {action} failed: {reason}" + (f"; {advice}" if advice else "")
                        ) from None
