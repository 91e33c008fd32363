"""The one file layer: every path a user gives may be local or `gs://` (any fsspec URL).

Local paths go through `os` (fast, and the error types users know); URLs go through fsspec,
which for `gs://` is gcsfs. Why fsspec and not `tf.io.gfile` or etils `epath`:
  - orbax (training checkpoints, bert-jax `params/`) reaches storage through `epath` for
    its directories and metadata and through tensorstore's own GCS driver for arrays. With
    TensorFlow installed `epath` would pick `tf.io.gfile` for `gs://`, whose GCS client has
    its endpoint compiled in, so nothing of it can be tried against a GCS emulator. Below,
    `EPATH_USE_TF=false` makes `epath` use fsspec too: one client for every byte.
  - tf.data reads local shards with its own fast TFRecord reader; remote shards are read
    through this module (`input_pipeline/tfrecord.py`), for the same reason.
  - the tokenizers, safetensors and TensorFlow's checkpoint reader need local files: they
    get a local copy (`local_copy`) of a remote file.
Writers build output under a temporary name and publish it only when complete
(`atomic_write`, `publish_directory`): locally by rename, on GCS by one upload of a
finished file (an object appears only when its upload completes). Local temporaries are
hidden siblings named for their process (`.NAME.tmp-PID-...`), so the next writer of the
same path removes those a killed process left (`bert_jax/storage/temporaries.py`).

Emulators: gcsfs honours STORAGE_EMULATOR_HOST, tensorstore TENSORSTORE_GCS_HTTP_URL
(`tests/gcs_emulator.py` sets both). `bert_jax/storage/gcs.py` finds credentials once and checks
each bucket answers before its first use: no network or no credentials is one line naming
the bucket within seconds, not a minute of retries.
"""

import codecs
import contextlib
import glob as local_glob
import io
import os
import posixpath
import shlex
import shutil
import tempfile

from bert_jax.errors import UserError
from bert_jax.storage.storage_errors import reported
from bert_jax.storage.temporaries import temporary_name

# Must be set before orbax's epath first resolves a gs:// path (it caches the choice).
os.environ["EPATH_USE_TF"] = "false"


def is_remote(path: str) -> bool:
    return "://" in str(path)


def _filesystem(path: str):
    import fsspec

    protocol = path.split("://", 1)[0]
    if protocol in ("gs", "gcs"):  # a bucket that cannot be reached fails fast, in one line
        from bert_jax.storage import gcs

        return gcs.filesystem(path)
    return fsspec.filesystem(protocol)


def _protocol(path: str) -> str:
    return path.split("://", 1)[0] + "://"


# -- names ---------------------------------------------------------------------------------
def join(path: str, *names: str) -> str:
    return posixpath.join(path, *names) if is_remote(path) else os.path.join(path, *names)


def dirname(path: str) -> str:
    return posixpath.dirname(path.rstrip("/")) if is_remote(path) else os.path.dirname(path)


def basename(path: str) -> str:
    return posixpath.basename(path.rstrip("/")) if is_remote(path) else os.path.basename(path)


def absolute(path: str) -> str:
    """An absolute local path, or the URL without a trailing slash."""
    if is_remote(path):
        protocol, rest = path.split("://", 1)
        return f"{protocol}://{posixpath.normpath(rest)}"
    return os.path.abspath(path)


def contains(directory: str, path: str) -> bool:
    """Whether `path` is `directory` or lies inside it (by name, after normalising)."""
    directory, path = absolute(directory), absolute(path)
    if is_remote(directory) != is_remote(path):
        return False
    local = not is_remote(directory)
    if local:
        directory, path = os.path.realpath(directory), os.path.realpath(path)
    return path == directory or path.startswith(directory.rstrip("/") + "/")


# -- queries -------------------------------------------------------------------------------
def exists(path: str) -> bool:
    return _filesystem(path).exists(path) if is_remote(path) else os.path.exists(path)


def isdir(path: str) -> bool:
    return _filesystem(path).isdir(path) if is_remote(path) else os.path.isdir(path)


def isfile(path: str) -> bool:
    return _filesystem(path).isfile(path) if is_remote(path) else os.path.isfile(path)


def size(path: str) -> int:
    return _filesystem(path).size(path) if is_remote(path) else os.path.getsize(path)


def listdir(path: str) -> list[str]:
    """Names (not paths) in a directory; FileNotFoundError if there is none."""
    if not is_remote(path):
        return os.listdir(path)
    filesystem = _filesystem(path)
    if not filesystem.isdir(path):
        raise FileNotFoundError(path)
    return [posixpath.basename(entry.rstrip("/"))
            for entry in filesystem.ls(path, detail=False)]


def glob(pattern: str) -> list[str]:
    """Sorted paths matching a shell pattern, with the URL scheme kept."""
    if not is_remote(pattern):
        return sorted(local_glob.glob(pattern))
    protocol = _protocol(pattern)
    return sorted(protocol + match for match in _filesystem(pattern).glob(pattern))


# -- reading -------------------------------------------------------------------------------
def open_file(path: str, mode: str = "r", encoding: str | None = None,
              newline: str | None = None):
    """A file object; text modes default to UTF-8, and reading drops a leading byte-order
    mark (`utf-8-sig`): Excel and several GLUE distributions start their files with one, and
    it would otherwise become part of the first header name, label or token."""
    if "b" not in mode and encoding is None:
        writing = any(flag in mode for flag in "wax+")
        encoding = "utf-8" if writing else "utf-8-sig"
    if is_remote(path):
        return _filesystem(path).open(path, mode, encoding=encoding, newline=newline)
    return open(path, mode, encoding=encoding, newline=newline)


def read_text(path: str) -> str:
    with open_file(path) as file:
        return file.read()


def read_user_text(path: str, what: str, newline: str | None = None) -> str:
    """The UTF-8 text of a file the user named (`what`: "input", "CoNLL", ...), a leading
    byte-order mark dropped; a missing file, a directory or bytes that are not UTF-8 become
    one clear error naming the path."""
    try:
        with open_file(path, newline=newline) as file:
            text = file.read()
    except FileNotFoundError:
        raise UserError(f"{path}: {what} file not found") from None
    except IsADirectoryError:
        raise UserError(f"{path}: is a directory, expected a {what} file") from None
    except UnicodeDecodeError as error:
        raise UserError(f"{path}: not UTF-8 text ({error.reason} at byte {error.start})"
                        + wide_encoding_hint(path)) from None
    if "\x00" in text[:_SNIFFED]:  # valid UTF-8, but perhaps UTF-16 without a byte-order mark
        hint = wide_encoding_hint(path)
        if hint:
            raise UserError(f"{path}: not UTF-8 text (NUL bytes between the letters)" + hint)
    return text


_SNIFFED = 4096  # characters looked at for signs of a UTF-16 file without a BOM
# Byte-order marks of the encodings a UTF-8 reader fails on, longest first (UTF-32 LE's
# starts with UTF-16 LE's).
_WIDE_BOMS = ((codecs.BOM_UTF32_LE, "UTF-32"), (codecs.BOM_UTF32_BE, "UTF-32"),
              (codecs.BOM_UTF16_LE, "UTF-16"), (codecs.BOM_UTF16_BE, "UTF-16"))


def wide_encoding_hint(path: str) -> str:
    """'; it looks like UTF-16 ...' and how to convert it, when `path` starts with a UTF-16 or
    UTF-32 byte-order mark or holds NUL bytes (UTF-16 without one, as some Windows tools
    save text); else ''."""
    with open_file(path, "rb") as file:
        head = file.read(_SNIFFED)
    encoding = next((name for bom, name in _WIDE_BOMS if head.startswith(bom)), None)
    sign = f"it starts with a {encoding} byte-order mark"
    if encoding is None and head.count(0) > len(head) // 4:  # ASCII letters in 2 bytes each
        encoding = "UTF-16BE" if head[:1] == b"\x00" else "UTF-16LE"
        sign = "its letters alternate with NUL bytes"
    if encoding is None:
        return ""
    stem, extension = posixpath.splitext(path)
    return (f"; it looks like {encoding} ({sign}): convert it to UTF-8, e.g. `iconv -f "
            f"{encoding} -t UTF-8 {shlex.quote(path)} > {shlex.quote(stem + '.utf8' + extension)}`")


def split_lines(text: str) -> list[str]:
    """The lines of `text`, split at \\n, \\r\\n or \\r only: `str.splitlines` also splits at
    U+2028, U+0085 and other characters that are text inside a line of a data file."""
    return [line.rstrip("\r\n") for line in io.StringIO(text, newline="")]


def read_bytes(path: str) -> bytes:
    with open_file(path, "rb") as file:
        return file.read()


@contextlib.contextmanager
def local_copy(path: str):
    """A local path holding `path` (a file or directory): itself, or a temporary download."""
    if not is_remote(path):
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="bert-jax-download-") as directory:
        local = os.path.join(directory, basename(path))
        filesystem = _filesystem(path)
        if filesystem.isdir(path):
            filesystem.get(path.rstrip("/") + "/", local + "/", recursive=True)
        else:
            filesystem.get_file(path, local)
        yield local


# -- writing -------------------------------------------------------------------------------
def makedirs(path: str) -> None:
    """Creates a directory and its parents (on GCS, directories exist by their objects)."""
    if not is_remote(path):
        os.makedirs(path, exist_ok=True)


def remove(path: str) -> None:
    if is_remote(path):
        _filesystem(path).rm_file(path)
    else:
        os.remove(path)


def move(source: str, destination: str) -> None:
    """Renames a file or directory tree (on object storage: copies, then deletes)."""
    if is_remote(source):
        _filesystem(source).mv(source, destination, recursive=True)
    else:
        os.rename(source, destination)


def rmtree(path: str) -> None:
    """Removes a directory tree if it exists."""
    if is_remote(path):
        filesystem = _filesystem(path)
        if filesystem.exists(path):
            filesystem.rm(path, recursive=True)
    else:
        shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def atomic_write(path: str, mode: str = "w", encoding: str | None = None):
    """A file that appears at `path` only if the block completes; nothing is left otherwise.

    Locally: a temporary sibling renamed over `path`. Remotely: a local temporary file
    uploaded in one piece when complete.
    """
    # A full disk, a file-size limit or a read-only directory met while writing: one line.
    with reported(path, "writing", "nothing half-written was left"):
        if is_remote(path):
            with tempfile.TemporaryDirectory(prefix="bert-jax-upload-") as directory:
                local = os.path.join(directory, basename(path))
                with atomic_write(local, mode, encoding) as file:
                    yield file
                _upload(local, path)
            return
        makedirs(os.path.dirname(os.path.abspath(path)))
        temporary = temporary_name(path)
        if "b" not in mode and encoding is None:
            encoding = "utf-8"
        try:
            with open(temporary, mode.replace("w", "x"), encoding=encoding) as file:
                yield file
            os.replace(temporary, path)
        except BaseException:
            if os.path.exists(temporary):
                os.remove(temporary)
            raise


def _upload(local: str, path: str) -> None:
    """Uploads a finished file in one piece; a bucket gone or forbidden meanwhile is one line
    (an object appears only when its upload completes, so nothing partial is left there)."""
    try:
        _filesystem(path).put_file(local, path)
    except (OSError, ValueError) as error:  # gcsfs: FileNotFoundError, PermissionError, HTTP
        reason = f"{type(error).__name__}: {error}".splitlines()[0][:200]
        raise UserError(f"{path}: uploading {size(local):,} bytes failed ({reason}); nothing "
                        "was written there") from None


def write_text(path: str, text: str) -> None:
    with atomic_write(path) as file:
        file.write(text)


def copy_file(source: str, destination: str) -> None:
    """Copies one file between any two locations, atomically at the destination."""
    with open_file(source, "rb") as reader, atomic_write(destination, "wb") as writer:
        shutil.copyfileobj(reader, writer)


def publish_directory(local_directory: str, destination: str) -> None:
    """Makes a finished local directory appear at `destination`, replacing what is there.

    Locally a rename (atomic); remotely an upload into `destination` after removing the old
    one, and a failed upload removes what it wrote (GCS has no directory rename).
    """
    rmtree(destination)
    if not is_remote(destination):
        os.rename(local_directory, destination)
        return
    filesystem = _filesystem(destination)
    try:
        filesystem.put(local_directory.rstrip("/") + "/", destination.rstrip("/") + "/",
                       recursive=True)
    except BaseException:
        rmtree(destination)
        raise


def expand(pattern: str, inside_directory: str = "*") -> list[str]:
    """Sorted files a glob matches; a directory stands for its files matching `inside_directory`.

    Hidden files (such as a writer's temporaries) match only a pattern that names them.
    """
    if isdir(pattern):
        pattern = join(pattern, inside_directory)
    return [path for path in glob(pattern) if not isdir(path)]


def move_into_place(finished_file: str, destination: str) -> None:
    """Publishes a finished file at `destination`: a rename, an upload then delete, or for a
    remote file (a Beam worker's) a copy on the server then delete."""
    if is_remote(finished_file):
        _filesystem(finished_file).mv(finished_file, destination)
    elif is_remote(destination):
        _filesystem(destination).put_file(finished_file, destination)
        os.remove(finished_file)
    else:
        os.replace(finished_file, destination)


def ancestors(path: str) -> list[str]:
    """`path` (made absolute) and each directory above it, up to the root or the bucket."""
    path = absolute(path)
    if is_remote(path):
        protocol, rest = path.split("://", 1)
        parts = rest.split("/")
        return [f"{protocol}://" + "/".join(parts[:count]) for count in range(len(parts), 0, -1)]
    found = [path]
    while os.path.dirname(found[-1]) != found[-1]:
        found.append(os.path.dirname(found[-1]))
    return found


def apply_umask(directory: str) -> None:
    """Gives a local tree the modes a plain `mkdir`/`open` would: 0777/0666 less the umask.

    Temporary directories and some writers use 0700/0600, which would keep others from
    reading an exported model.
    """
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(directory, 0o777 & ~umask)
    for root, directories, names in os.walk(directory):
        for name in directories:
            os.chmod(os.path.join(root, name), 0o777 & ~umask)
        for name in names:
            os.chmod(os.path.join(root, name), 0o666 & ~umask)
