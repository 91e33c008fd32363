"""The host a CPU benchmark ran on, printed at its top and kept with its figures.

A ratio measured on one x86 CPU is not a ratio on another: the same bench gave bert-jax
1.17x transformers on one 2-core Xeon and 0.51x on another of the same machine kind (issue
52). So every CPU bench opens with the lines below (CPU model and the ISA extensions that
XLA's and torch's CPU kernels choose between, cores, the XLA flags and thread settings, the
load) and ends with the load after, and a figure quoted in the docs carries its host.

    from bench.host import announce_host
    announce_host()   # first thing in main(); prints the load after at exit
"""

import atexit
import datetime
import io
import os
import platform
import sys

from bert_jax import cpu_matmul, cpu_memory
from bert_jax.cpu_host import ISA_FLAGS, this_cpu

# Environment variables that change how fast the same code runs on the same CPU.
THREAD_SETTINGS = ("XLA_FLAGS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OMP_WAIT_POLICY",
                   "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "TF_NUM_INTRAOP_THREADS")


def usable_cores() -> int:
    """The cores this process may run on: its affinity where the OS has one (Linux), else
    all of them."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def host_lines(command: str = "pretrain") -> list[str]:
    """The header: date, CPU, ISA, cores, memory, thread settings, the matrix products'
    library as `bert-jax command` chooses it, load."""
    model, isa = this_cpu()
    usable = usable_cores()
    settings = [f"{name}={os.environ[name]}" for name in THREAD_SETTINGS if name in os.environ]
    lines = [f"host: {model}, {usable} usable of {os.cpu_count()} cores, "
             f"{_memory_gib():.0f} GiB; {platform.machine()}, Python {platform.python_version()}",
             f"  ISA: {' '.join(isa) or 'none of ' + ', '.join(ISA_FLAGS)}",
             f"  settings: {' '.join(settings) or 'none set'}",
             # The allocator's setting: a step's page faults, and so its time, depend on it.
             f"  {cpu_memory.state()}",
             # The matrix products' library: most of a step's time (cpu_matmul).
             f"  {cpu_matmul.state(command)}",
             f"  {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, "
             f"load average before {_load()}"]
    return lines


def announce_host(command: str = "pretrain", stream=sys.stdout) -> None:
    """Print host_lines() now; at exit, the load average and the frameworks' versions and
    threads (known only once the bench has imported them).

    First, on a CPU host, the bench chooses the matrix products' library as `bert-jax
    command` does (the pre-training step's benches keep the default) and is re-executed with
    glibc's tunables as `bert-jax` runs its commands (bert_jax/cpu_matmul.py and
    cpu_memory.py): both sides of a bench, in one process, run with the kernels and the
    allocator a user of the command gets."""
    cpu_matmul.choose(command, stream=io.StringIO())  # host_lines() says what it chose
    cpu_memory.relaunch_tuned(sys.orig_argv)
    print(*host_lines(command), sep="\n", file=stream, flush=True)
    atexit.register(lambda: print(f"host: load average after {_load()}; {_versions()}",
                                  file=stream, flush=True))


def _versions() -> str:
    """jax's and torch's versions and torch's threads, for those the bench has imported (a
    header must not import torch into a bench that does not use it)."""
    parts = []
    for name in ("jax", "torch", "tensorflow"):
        module = sys.modules.get(name)
        if module is not None:
            parts.append(f"{name} {getattr(module, '__version__', '?')}")
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "get_num_threads"):
        parts.append(f"torch threads {torch.get_num_threads()}")
    return ", ".join(parts) or "no framework imported yet"


def _memory_gib() -> float:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):
        return float("nan")


def _load() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())
