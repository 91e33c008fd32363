"""Quiet start-up: no TensorFlow, absl, orbax or libtpu noise on ordinary commands.

`install()` runs once when `bert_jax` is imported (the CLI and the Python API both import
it first). It removes messages that say nothing to a bert-jax user, and only those:
- TensorFlow's C++ start-up lines (`WARNING: All log messages before absl::InitializeLog()`,
  `oneDNN custom operations are on`, CPU-instruction notes), which it writes straight to
  file descriptor 2 while `import tensorflow` runs, so `TF_CPP_MIN_LOG_LEVEL` cannot stop
  them: that import runs with descriptor 2 captured, and every other line is passed on;
- orbax's `Metadata file does not exist` warning when it reads a checkpoint written without
  the optional metadata file;
- libtpu's probe for a TPU (a page about `TPU_WORKER_HOSTNAMES`) on a machine that has the
  TPU extra installed but no TPU or GPU: JAX is kept on the CPU there unless JAX_PLATFORMS
  says otherwise;
- what compiling for a TPU this host does not have (`bert-jax aot`) prints and cannot be
  helped: libtpu's "Failed to find host bounds" line when it first describes a topology
  (`native_noise_filtered()` around that call), and JAX's "Error reading persistent
  compilation cache entry" when a second run finds the first one's program in the cache:
  only a client of that TPU could load it, so JAX compiles again, as it would without it.
(JAX's warning for each program with oneDNN's products, which it cannot cache, is filtered
where oneDNN is chosen, by `cpu_matmul.choose`, whose start-up line says it instead.)

The same hook makes that import quicker: TensorFlow ends its import by loading Keras's
optimizers (to register them for SavedModels that Keras wrote), 2-3 s of every command's
start-up, and bert-jax uses no Keras. That load sits in a `try` that passes an ImportError, so
it is made to fail for as long as TensorFlow's import runs; `import keras` or `tf.keras`
afterwards loads Keras as usual.
"""

import importlib.abc
import importlib.util
import logging
import os
import re
import sys
import tempfile
import warnings

# Lines TensorFlow writes to descriptor 2 at import, and libtpu when it describes a topology
# with no TPU here (it asks for TPU_ACCELERATOR_TYPE, which only a TPU VM has), that a user
# cannot act on.
_NATIVE_NOISE = re.compile(
    r"All log messages before absl::InitializeLog|oneDNN custom operations are on"
    r"|cpu_feature_guard|This TensorFlow binary is optimized|rebuild TensorFlow with"
    r"|Unable to register cu(DNN|FFT|BLAS) factory|TF-TRT Warning|computation placer already"
    r"|Failed to find host bounds for accelerator type")
# JAX's warning when a cached program cannot be loaded because it is for devices this host
# lacks (a compile-only TPU topology); JAX then compiles it again. Other cache errors pass.
_CACHE_NOISE = (r"Error reading persistent compilation cache entry .*"
                r"must be constructed with a Client")
# absl (Python) log messages from orbax that describe its own optional files.
_ABSL_NOISE = re.compile(r"Metadata file does not exist")
_QUIET_IMPORTS = ("tensorflow",)
# What TensorFlow's import loads eagerly and bert-jax never uses (Keras 3's optimizers, or
# tf_keras's under TF_USE_LEGACY_KERAS=1).
_SKIPPED_BY_TENSORFLOW_IMPORT = ("keras.src.optimizers", "tf_keras.src.optimizers")


def _prefer_cpu_off_accelerators() -> None:
    """Keeps JAX on the CPU on a machine with no TPU or GPU, unless JAX_PLATFORMS says otherwise.

    With libtpu installed (the `tpu` extra, also used for `bert-jax aot`) but no TPU, JAX
    would otherwise probe for one at start-up and print a page of libtpu warnings.
    """
    from bert_jax.training.distributed import accelerator_present  # imports no JAX

    if ("JAX_PLATFORMS" not in os.environ and "jax" not in sys.modules
            and not accelerator_present()):
        os.environ["JAX_PLATFORMS"] = "cpu"


class _FilteredStderr:
    """Captures descriptor 2 for a while, then passes on every line that is not noise."""

    def __enter__(self):
        sys.stderr.flush()
        self._capture = tempfile.TemporaryFile(mode="w+b")
        self._saved = os.dup(2)
        os.dup2(self._capture.fileno(), 2)
        return self

    def __exit__(self, *exc_info):
        sys.stderr.flush()
        os.dup2(self._saved, 2)
        os.close(self._saved)
        self._capture.seek(0)
        text = self._capture.read().decode("utf-8", errors="replace")
        self._capture.close()
        kept = [line for line in text.splitlines(keepends=True)
                if not _NATIVE_NOISE.search(line)]
        if kept:
            sys.stderr.write("".join(kept))
            sys.stderr.flush()
        return False


def native_noise_filtered() -> _FilteredStderr:
    """A context in which native code's lines to descriptor 2 pass, noise excepted."""
    return _FilteredStderr()


class _SkippedImports:
    """For a while, `import` of each named module not yet imported raises ImportError (a None
    in sys.modules does that without importing its parents); afterwards it imports again."""

    def __init__(self, names):
        self._names = names

    def __enter__(self):
        self._skipped = [name for name in self._names if name not in sys.modules]
        for name in self._skipped:
            sys.modules[name] = None
        return self

    def __exit__(self, *exc_info):
        for name in self._skipped:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]
        return False


class _QuietLoader(importlib.abc.Loader):
    """The original loader, run with descriptor 2 filtered and Keras's eager load skipped."""

    def __init__(self, loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        with _FilteredStderr(), _SkippedImports(_SKIPPED_BY_TENSORFLOW_IMPORT):
            self._loader.exec_module(module)

    def __getattr__(self, name):  # get_resource_reader, is_package, ...
        return getattr(self._loader, name)


class _QuietImportFinder(importlib.abc.MetaPathFinder):
    """Finds `tensorflow` as usual and hands back its spec with a filtering loader."""

    def __init__(self):
        self._finding = False

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in _QUIET_IMPORTS or self._finding:
            return None
        self._finding = True
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._finding = False
        if spec is None or spec.loader is None:
            return None
        spec.loader = _QuietLoader(spec.loader)
        return spec


class _AbslNoiseFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not _ABSL_NOISE.search(record.getMessage())


def install() -> None:
    """Idempotent; a no-op for modules already imported before bert_jax."""
    _prefer_cpu_off_accelerators()
    # TensorFlow's Python-side INFO lines (its C++ start-up lines are filtered above).
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    if not any(isinstance(finder, _QuietImportFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _QuietImportFinder())
    warnings.filterwarnings("ignore", message=_CACHE_NOISE, category=UserWarning)
    absl_logger = logging.getLogger("absl")
    if not any(isinstance(existing, _AbslNoiseFilter) for existing in absl_logger.filters):
        absl_logger.addFilter(_AbslNoiseFilter())
