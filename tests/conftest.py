"""Runs every test on eight simulated CPU devices, so mesh code is exercised without a TPU."""

import os
import signal
import weakref

import pytest

# A suite started in the background by a script inherits SIGINT ignored (shells do that to
# background jobs); the Ctrl-C tests need Python's own handler, as an interactive run has.
signal.signal(signal.SIGINT, signal.default_int_handler)

# Must happen before JAX is first imported anywhere in the test process.
# LLVM at -O0: the suite is mostly CPU compiles of tiny programs, and LLVM's optimisation is
# about a third of their time (test_finetune_training.py, test_phases.py,
# test_eurobert_finetune.py and a continued-pretraining run: 197 s -> 132 s, one process,
# AMD EPYC, 2 cores). XLA's own passes, its fusions and the order of every reduction are
# unchanged; at most a multiply-add is left as two roundings instead of one, which every
# parity bound already allows between two implementations (tests/tolerances.py), and each
# bit-identical check compares two runs of one build. No test holds compiled code's speed to
# a bound (their clocks are timeouts). test_training.py's pod processes keep the flag.
# And XLA's older loop emitters for fusions, not its MLIR fusion emitters: even at -O0, XLA's
# backend compile was 393 s of 635 s of test time in ten of the heaviest files (jax's own
# compile events, Intel Xeon Ice Lake, 2 cores), and the older emitters compile the same tiny
# train steps in 0.67x (BERT) and 0.70x (ModernBERT) of the time (medians of 6 interleaved
# compiles in one process). The programs differ only in how XLA's CPU backend fuses and emits
# elementwise work and reductions (reductions may then add in another order: the parity
# bounds allow that, and bit-identical checks compare two runs of one build, except
# tests/test_update_pass.py's two programs, which it compiles with the default emitters).
# Users' programs keep XLA's defaults, and CI's recipes (.ci/recipes) run the README's
# commands with them.
os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_backend_optimization_level=0"
    " --xla_cpu_use_fusion_emitters=false"
    " --xla_force_host_platform_device_count=8").strip()
os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")
# libtpu is installed for the AOT test; keep every other JAX process off its probe and lock.
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# Hugging Face must never try the network: these machines have none, and tests must not.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# The commands' compiled-program cache (bert_jax/compilation_cache.py): one per test session,
# shared by the commands the tests run in subprocesses, never the user's ~/.cache.
if "BERT_JAX_COMPILATION_CACHE" not in os.environ:
    import tempfile

    os.environ["BERT_JAX_COMPILATION_CACHE"] = tempfile.mkdtemp(prefix="bert-jax-xla-")


@pytest.fixture(autouse=True)
def _shard_readers_closed_after_each_test(monkeypatch):
    """Closes every shard reader a test opened and left open. A reader nobody refers to is
    freed at once (input_pipeline/record_pipeline.py), but one something still holds (a
    failing test's traceback, a fixture of wider scope) keeps its read-ahead threads; when
    such readers were freed by the cycle collector at a random moment in a later test, it
    waited for their threads: a collection after tests/test_data_mixture.py's resume test
    took 19.7 s (186 threads down to 60) where one takes about 0.9 s."""
    from input_pipeline import reader  # here, so xdist's controller never loads TensorFlow

    opened = weakref.WeakSet()
    open_reader = reader.PretrainingDataset.__init__

    def open_and_remember(self, *args, **kwargs):
        open_reader(self, *args, **kwargs)
        opened.add(self)

    monkeypatch.setattr(reader.PretrainingDataset, "__init__", open_and_remember)
    yield
    for dataset in list(opened):
        dataset.close()
