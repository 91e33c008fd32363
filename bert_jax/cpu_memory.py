"""On a CPU host, glibc's malloc keeps the memory a step frees for the next step.

XLA's CPU runtime allocates a step's temporaries (hundreds of MB to GBs) with malloc and
frees them when the step ends. glibc serves allocations that large with mmap and returns
them with munmap, so every step takes fresh pages from the kernel, which clears each one:
BERT-Base's 8 x 128 train step took 392k page faults a step, EuroBERT's 3-layer 2 x 1,024
step 2.0M, and the ModernBERT bench spent 45 s of its 144 s in the kernel
(docs/tests-and-benchmarks.md, "Page faults"). Three glibc tunables stop that:
  glibc.malloc.mmap_max=0          nothing is served by mmap: everything from the heap;
  glibc.malloc.trim_threshold=1e15 the heap's free top is never handed back to the kernel;
  glibc.malloc.arena_max=1         one heap for every thread: a thread's own heap (an mmap'ed
                                   region of at most 64 MB) is unmapped whenever it falls
                                   empty, the same churn.
The cost is memory: the process keeps its peak heap resident until it exits, and what one
framework frees no longer goes back for another to take (the ModernBERT bench's peak rose
from 4.93 to 5.86 GB, the EuroBERT bench's from 14.25 to 19.55 GB).

Tunables are read once, when the process starts (glibc 2.26 and later). So
`relaunch_tuned(argv)` re-executes the process with GLIBC_TUNABLES set (`bert-jax`'s commands
that run a model call it before importing anything heavy, and so do the CPU benches), where
it helps:
- Linux with glibc 2.26 or later, and no accelerator (or JAX_PLATFORMS=cpu): on a TPU or GPU
  the step's memory is the device's, and the input pipeline's threads keep their own heaps;
- the user has chosen nothing: no GLIBC_TUNABLES, no MALLOC_*_ variable, no LD_PRELOAD'ed
  allocator (tcmalloc and jemalloc keep freed memory themselves: both measured as fast as
  these settings), and BERT_JAX_CPU_MALLOC is not `system` (the opt-out).
`state()` says in one line what this process runs with, and why (the benches' host header).

Two things that do not work, measured here: the same settings made with mallopt() in a
running process fragment the heap (a step's buffer no longer fits the hole the last one left:
it grew to 8.4 GB, with page faults on every other step), and glibc.malloc.hugetlb=1 (huge
pages for what malloc maps) cut the faults 20-fold but not the kernel's time clearing pages,
and made the ModernBERT train step slower.
"""

import os
import platform
import sys

from bert_jax.training.distributed import (  # imports no JAX
    accelerator_present, accelerator_runs_steps)

OPT_OUT = "BERT_JAX_CPU_MALLOC"  # =system leaves glibc's defaults alone
TUNABLE = ("glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=1000000000000000:"
           "glibc.malloc.arena_max=1")
_USER_SETTINGS = ("MALLOC_MMAP_MAX_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_ARENA_MAX",
                  "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_CONF")


def glibc_version() -> tuple[int, int] | None:
    library, version = platform.libc_ver()
    if library != "glibc" or not version:
        return None
    major, minor, *_ = (int(part) for part in version.split("."))
    return major, minor


def reason_to_leave_alone(environ, glibc: tuple[int, int] | None,
                          accelerator: bool) -> str | None:
    """Why this process should run as it is, or None where the tunables help (set or not)."""
    if environ.get(OPT_OUT, "") == "system":
        return f"{OPT_OUT}=system"
    if environ.get("GLIBC_TUNABLES", "") == TUNABLE:
        return None
    chosen = [name for name in ("GLIBC_TUNABLES", *_USER_SETTINGS) if name in environ]
    if "malloc" in environ.get("LD_PRELOAD", ""):
        chosen.append(f"LD_PRELOAD={environ['LD_PRELOAD']}")
    if chosen:
        return f"the environment chooses: {', '.join(chosen)}"
    if glibc is None or glibc < (2, 26):
        return "not glibc 2.26 or later"
    if accelerator_runs_steps(environ, accelerator):
        return "an accelerator holds the step's memory"
    return None


def _reason(environ) -> str | None:
    return reason_to_leave_alone(environ, glibc_version(), accelerator_present())


def state(environ=os.environ) -> str:
    """One line: the allocator this process runs with, and why."""
    reason = _reason(environ)
    if reason is None and environ.get("GLIBC_TUNABLES", "") == TUNABLE:
        return (f"malloc: GLIBC_TUNABLES={TUNABLE} (freed memory kept for the next step; "
                f"{OPT_OUT}=system runs without)")
    return f"malloc: as the system has it ({reason or 'started without the tunable'})"


def relaunch_tuned(argv: list[str]) -> None:
    """Re-executes this process as `argv` (the interpreter's own arguments, `sys.orig_argv`)
    with GLIBC_TUNABLES set, where it helps and is unset; returns where it does not."""
    if _reason(os.environ) is not None or os.environ.get("GLIBC_TUNABLES") == TUNABLE:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, *argv[1:]],
              dict(os.environ, GLIBC_TUNABLES=TUNABLE))
