"""What a compile will take in memory at least, known before it starts; a refusal where the
machine cannot hold even that, and a watch that stops a compile before the machine runs out.

XLA's compilers hold the whole program, its fusions and its schedule in host memory while
they work: BERT-Large's unrolled train step for a v5e:2x2 took 5.81 GiB on top of what the
process held (bench/compile_memory.py, docs/tpu-pods.md), and the same compile beside other
work was killed for memory on a 24 GiB machine after 15 minutes. Neither libtpu nor XLA
says beforehand what a compile will need, and the size of the lowered program (its StableHLO
operations, known in seconds) does not predict it closely: ModernBERT-base's step, 17,730
operations, took 5.17 GiB, BERT-Base's, 39,610, took 4.79. It does bound it from below: every
compile measured took at least `LOWER_BOUNDS`' line of its operations. So `aot`
- refuses before compiling where the machine has less memory available than that bound,
  in one line with both figures;
- watches the compile (`watch`), and stops it in one line where the machine's available
  memory falls under a margin (1 GiB, or 5% of its memory where that is more), before the
  kernel's out-of-memory killer picks a process, the compile or another.
`--no-memory-check` turns both off. Available memory is Linux's MemAvailable (psutil's
`available`), or what is left under a cgroup's limit where that is less.
"""

import dataclasses
import functools
import os
import re

import psutil

from bert_jax.errors import UserError
from launch.tpu_types import GIB

# A function of the lowered module ("func.func public @main(...) {", "func.func private @f(")
# and, inside it, one operation per line: "%x = stablehlo.add ...", "%y:2 = func.call @f(...)",
# "stablehlo.return %z", "return %z", ops of other dialects (sdy., chlo., ...) alike.
_FUNCTION = re.compile(r"^\s*func\.func (?:public |private )?@([\w.$-]+)\(")
_OPERATION = re.compile(r"^\s*(?:%[^=]+= )?\"?(?:[a-z_]+\.[a-z_.]+|return|call)\b")
_CALL = re.compile(r"\bcall @([\w.$-]+)\(")


@dataclasses.dataclass(frozen=True)
class LowerBound:
    """Resident bytes a compile adds to its process, at least:
    fixed_bytes + per_operation_bytes x (operations beyond free_operations)."""
    fixed_bytes: float
    per_operation_bytes: float
    free_operations: int

    def bytes(self, operations: int) -> int:
        return int(self.fixed_bytes + self.per_operation_bytes
                   * max(0, operations - self.free_operations))


# Under every compile bench/compile_memory.py measured on an AMD EPYC (2 cores, 24 GiB,
# jax 0.10.2, libtpu 0.0.42.1, 2026-12-02), with room: TPU (v5e:2x2) from 0.61 GiB
# (EuroBERT's demo, 2,890 operations) to 5.81 GiB (BERT-Large, 76,780), each measured
# compile 1.17x (BERT-Large) to 4.56x (ModernBERT-base) its bound; GPU (h100) 0.40 GiB
# (demo, 8,289 operations) and 1.10 GiB (BERT-Base 32 x 512, 38,587), 1.13x and 1.20x.
LOWER_BOUNDS = {
    "tpu": LowerBound(fixed_bytes=0.5 * GIB, per_operation_bytes=70e3, free_operations=8_000),
    "gpu": LowerBound(fixed_bytes=0.2 * GIB, per_operation_bytes=20e3, free_operations=0),
}

# The memory a watched compile leaves the machine: stopped below this, or 5% of it.
KEEP_FREE_BYTES = GIB


def program_operations(lowered) -> int:
    """The lowered program's StableHLO operations as the compiler will hold them: each called
    function's counted at every call (XLA inlines calls before it optimises), a loop's body
    once (a scanned layer stack is one layer)."""
    return expanded_operations(lowered.as_text())


def expanded_operations(module_text: str) -> int:
    """`program_operations` of a module's text (its entry function is `main`)."""
    own, calls, current = {}, {}, None
    for line in module_text.splitlines():
        function = _FUNCTION.match(line)
        if function:
            current = function.group(1)
            own[current], calls[current] = 0, []
        elif current is not None and _OPERATION.match(line):
            own[current] += 1
            calls[current] += _CALL.findall(line)
    totals = {}

    def total(name: str) -> int:
        if name not in totals:
            totals[name] = 0  # a recursive call (none in JAX's output) counts once
            totals[name] = own.get(name, 0) + sum(total(callee) for callee in calls.get(name, ()))
        return totals[name]

    return total("main")


@functools.cache
def _cgroup_directory() -> str | None:
    """This process's cgroup (v2) directory, looked up once (the watch asks five times a
    second), or None where there is none."""
    try:
        with open("/proc/self/cgroup") as file:
            path = next((line.split(":", 2)[2].strip() for line in file
                         if line.startswith("0::")), None)
    except OSError:
        return None
    return None if path is None else os.path.join("/sys/fs/cgroup", path.lstrip("/"))


def _cgroup_room() -> int | None:
    """Bytes left under this process's cgroup (v2) memory limit, or None with no limit."""
    directory = _cgroup_directory()
    if directory is None:
        return None
    try:
        with open(os.path.join(directory, "memory.max")) as file:
            limit = file.read().strip()
        if limit == "max":
            return None
        with open(os.path.join(directory, "memory.current")) as file:
            return int(limit) - int(file.read())
    except (OSError, ValueError):
        return None


def available_bytes() -> int:
    """Memory this process can still take without pushing others out or being killed."""
    room = _cgroup_room()
    available = psutil.virtual_memory().available
    return available if room is None else min(available, room)


def check(least_bytes: int, what: str, resident_before: int = 0,
          available: int | None = None) -> None:
    """Raises a one-line UserError where compiling `what` needs at least `least_bytes` beyond
    the process's `resident_before` (less what it has taken since: lowering the program)
    and the machine has less available."""
    available = available_bytes() if available is None else available
    taken = max(0, psutil.Process().memory_info().rss - resident_before) if resident_before else 0
    needed = least_bytes - taken
    if needed <= available:
        return
    raise UserError(
        f"compiling {what} needs at least {needed / GIB:.1f} GiB more memory (from its "
        f"program's size) and this machine has {available / GIB:.1f} GiB available: free "
        f"memory or use a larger machine, or pass --no-memory-check to try anyway")


def watch(what: str, keep_free: int | None = None):
    """A guard for `progress.interruptible`: None while the machine has `keep_free` bytes
    available (default: KEEP_FREE_BYTES, or 5% of its memory where that is more), then the
    line to stop `what` with."""
    keep_free = keep_free or max(KEEP_FREE_BYTES, psutil.virtual_memory().total // 20)
    process = psutil.Process()
    before = process.memory_info().rss

    def guard() -> str | None:
        available = available_bytes()
        if available >= keep_free:
            return None
        taken = process.memory_info().rss - before
        return (f"stopped {what}: it had taken {taken / GIB:.2f} GiB and this machine has "
                f"{available / GIB:.2f} GiB left (under the {keep_free / GIB:.2f} GiB kept "
                f"free); give it a machine with more free memory, or pass --no-memory-check "
                f"to let it run on")

    return guard
