"""Runs every test on eight simulated CPU devices, so mesh code is exercised without a TPU."""

import os
import signal

# A suite started in the background by a script inherits SIGINT ignored (shells do that to
# background jobs); the Ctrl-C tests need Python's own handler, as an interactive run has.
signal.signal(signal.SIGINT, signal.default_int_handler)

# Must happen before JAX is first imported anywhere in the test process.
os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()
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
