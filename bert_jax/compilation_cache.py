"""A persistent cache of compiled XLA programs, so a command's second run does not compile.

A fine-tuning run compiles one training step per length bucket (about ten seconds each for
MiniLM on a laptop CPU, minutes for BERT-Large on a TPU), and `embed` or `search` one
forward pass per bucket; the same model and settings produce the same programs every run.
The CLI turns on JAX's persistent compilation cache before any work:

- `BERT_JAX_COMPILATION_CACHE=DIR` (local or gs://) chooses where; the default is
  `$XDG_CACHE_HOME/bert-jax/xla` (`~/.cache/bert-jax/xla`); `off` disables it;
- JAX's own `JAX_COMPILATION_CACHE_DIR`, when set, wins (JAX reads it itself);
- programs that compile in under a second are not stored, and the cache keeps at most
  2 GiB, least recently used programs evicted first.

JAX keys each entry by the program, the compiler options, the devices and the JAX version,
so a stale entry is never used: a changed model or jaxlib simply compiles again.
"""

import os

MAX_BYTES = 2 * 1024**3


def default_directory() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "bert-jax", "xla")


def enable() -> str | None:
    """Points JAX at the cache directory; returns it, or None when the cache is off.

    Sets JAX's environment variables rather than `jax.config`, so that commands which never
    import JAX (`launch`, `--help`) stay fast; it must run before JAX is imported, and the
    processes a command starts (local pod workers) inherit it.
    """
    if os.environ.get("JAX_COMPILATION_CACHE_DIR"):
        return os.environ["JAX_COMPILATION_CACHE_DIR"]
    directory = os.environ.get("BERT_JAX_COMPILATION_CACHE", default_directory())
    if directory.lower() in ("", "off", "0", "false", "none"):
        return None
    os.environ["JAX_COMPILATION_CACHE_DIR"] = directory
    os.environ.setdefault("JAX_COMPILATION_CACHE_MAX_SIZE", str(MAX_BYTES))
    return directory
