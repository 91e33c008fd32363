"""On a CPU host, a step's temporaries in huge pages: glibc's `glibc.malloc.hugetlb=1`.

XLA's CPU runtime allocates a step's temporaries (hundreds of MB to GBs) with malloc and
frees them when the step ends. glibc serves allocations that large with mmap and returns
them with munmap, so every step takes fresh 4 KiB pages from the kernel: BERT-Base's
8 x 128 train step took 392k page faults a step, EuroBERT's 3-layer 2 x 1,024 step 2.0M, and
their steps spent 15-40% of their time in the kernel (docs/tests-and-benchmarks.md, "Page
faults"). With the glibc tunable `glibc.malloc.hugetlb=1` (glibc 2.35 and later) malloc asks
for transparent huge pages (madvise) for what it maps: 2 MiB a fault, about 1,100 faults a
step instead of 392k, and memory is still handed back to the kernel when freed.

A tunable is read once, when the process starts. So `relaunch_tuned(argv)` re-executes the
process with it set (`bert-jax`'s commands that run a model call it before importing
anything heavy, and so do the CPU benches), where it helps:
- Linux with glibc 2.35 or later, transparent huge pages `always` or `madvise`;
- no accelerator (or JAX_PLATFORMS=cpu): on a TPU or GPU the step's memory is the device's;
- the user has chosen nothing: no GLIBC_TUNABLES, no MALLOC_*_ variable, no LD_PRELOAD'ed
  allocator (tcmalloc and jemalloc keep freed memory themselves), and BERT_JAX_CPU_MALLOC is
  not `system` (the opt-out).
`state()` says in one line what this process runs with, and why (the benches' host header).

Changing glibc's malloc from inside a running process does not work: mallopt's "never
unmap, never trim, one arena" leaves no faults on some steps, but the heap fragments (a step's
buffer no longer fits the hole the last one left) and grew to 8.4 GB with page faults on
every other step, measured here.
"""

import os
import platform
import re
import sys

from bert_jax.training.distributed import accelerator_present  # imports no JAX

OPT_OUT = "BERT_JAX_CPU_MALLOC"  # =system leaves glibc's defaults alone
TUNABLE = "glibc.malloc.hugetlb=1"
_TRANSPARENT_HUGE_PAGES = "/sys/kernel/mm/transparent_hugepage/enabled"
_USER_SETTINGS = ("MALLOC_MMAP_MAX_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_ARENA_MAX",
                  "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_CONF")


def huge_page_mode(path: str = _TRANSPARENT_HUGE_PAGES) -> str | None:
    """The kernel's transparent-huge-page mode ('always', 'madvise', 'never'), None off Linux."""
    try:
        with open(path, encoding="ascii") as file:
            chosen = re.search(r"\[(\w+)\]", file.read())
    except OSError:
        return None
    return chosen.group(1) if chosen else None


def glibc_version() -> tuple[int, int] | None:
    library, version = platform.libc_ver()
    if library != "glibc" or not version:
        return None
    major, minor, *_ = (int(part) for part in version.split("."))
    return major, minor


def reason_to_leave_alone(environ, glibc: tuple[int, int] | None, huge_pages: str | None,
                          accelerator: bool) -> str | None:
    """Why this process should run as it is, or None where the tunable helps and is unset."""
    if environ.get(OPT_OUT, "") == "system":
        return f"{OPT_OUT}=system"
    if TUNABLE in environ.get("GLIBC_TUNABLES", ""):
        return None if huge_pages in ("always", "madvise") else f"huge pages {huge_pages}"
    chosen = [name for name in ("GLIBC_TUNABLES", *_USER_SETTINGS) if name in environ]
    if "malloc" in environ.get("LD_PRELOAD", ""):
        chosen.append(f"LD_PRELOAD={environ['LD_PRELOAD']}")
    if chosen:
        return f"the environment chooses: {', '.join(chosen)}"
    if glibc is None or glibc < (2, 35):
        return "not glibc 2.35 or later"
    if huge_pages not in ("always", "madvise"):
        return f"the kernel's transparent huge pages are {huge_pages or 'absent'}"
    platforms = environ.get("JAX_PLATFORMS", "")
    if platforms != "cpu" and (platforms or accelerator):
        return "an accelerator holds the step's memory"
    return None


def _reason(environ) -> str | None:
    return reason_to_leave_alone(environ, glibc_version(), huge_page_mode(),
                                 accelerator_present())


def state(environ=os.environ) -> str:
    """One line: the allocator this process runs with, and why."""
    if TUNABLE in environ.get("GLIBC_TUNABLES", "") and _reason(environ) is None:
        return (f"malloc: GLIBC_TUNABLES={environ['GLIBC_TUNABLES']} (a step's temporaries "
                f"in huge pages; {OPT_OUT}=system runs without)")
    return f"malloc: as the system has it ({_reason(environ) or 'started without the tunable'})"


def relaunch_tuned(argv: list[str]) -> None:
    """Re-executes this process as `argv` (the interpreter's own arguments, `sys.orig_argv`)
    with GLIBC_TUNABLES set, where it helps and is unset; returns where it does not."""
    if _reason(os.environ) is not None or TUNABLE in os.environ.get("GLIBC_TUNABLES", ""):
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, *argv[1:]],
              dict(os.environ, GLIBC_TUNABLES=TUNABLE))
