"""File access that also reaches cloud storage: local paths through Python, `gs://...` (any
`scheme://`) through `tf.io.gfile`, so TPU pods read shards and manifests from a bucket.

TensorFlow is imported only when a URL is actually used.
"""

import glob as local_glob
import os


def _is_url(path: str) -> bool:
    return "://" in path


def open_file(path: str, mode: str = "r", **options):
    """A file object; `options` (such as encoding) apply to local files only."""
    if _is_url(path):
        import tensorflow as tf
        return tf.io.gfile.GFile(path, mode)
    return open(path, mode, **options)


def glob(pattern: str) -> list[str]:
    if _is_url(pattern):
        import tensorflow as tf
        return tf.io.gfile.glob(pattern)
    return local_glob.glob(pattern)


def isdir(path: str) -> bool:
    if _is_url(path):
        import tensorflow as tf
        return tf.io.gfile.isdir(path)
    return os.path.isdir(path)


def exists(path: str) -> bool:
    if _is_url(path):
        import tensorflow as tf
        return tf.io.gfile.exists(path)
    return os.path.exists(path)


def size(path: str) -> int:
    if _is_url(path):
        import tensorflow as tf
        return tf.io.gfile.stat(path).length
    return os.path.getsize(path)
