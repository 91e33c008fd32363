"""The peak resident memory of this process over a block of work, such as an XLA compile.

A compile of BERT-Large's step for a TPU pod held 8.75 GB and was killed on a 24 GiB machine
with other work beside it, and nothing had said what a compile needs. So every compile
says its peak beside its time. On Linux the kernel keeps the high-water mark of the resident
set (VmHWM in /proc/self/status) and resets it on request (writing 5 to
/proc/self/clear_refs), which gives the exact peak without sampling; elsewhere (macOS) a
thread samples the resident set every SAMPLE_SECONDS, which can miss a spike shorter than
that.

    with PeakMemory() as peak:
        compiled = lowered.compile()
    peak.bytes      # the process's largest resident set during the block
"""

import re
import threading

import psutil

SAMPLE_SECONDS = 0.05
_STATUS = "/proc/self/status"
_CLEAR_REFS = "/proc/self/clear_refs"
_HIGH_WATER = re.compile(r"^VmHWM:\s+(\d+)\s+kB", re.MULTILINE)
# Blocks being measured now: a reset of the kernel's mark for one (a compile inside another
# watched block) first folds the mark so far into the others.
_open: list = []
_lock = threading.Lock()


def _high_water_mark() -> int | None:
    """The kernel's peak resident bytes since the last reset, or None off Linux."""
    try:
        with open(_STATUS, encoding="ascii") as status:
            found = _HIGH_WATER.search(status.read())
    except OSError:
        return None
    return int(found.group(1)) * 1024 if found else None


def _reset_high_water_mark() -> bool:
    try:
        with open(_CLEAR_REFS, "w", encoding="ascii") as clear_refs:
            clear_refs.write("5")
        return True
    except OSError:  # not Linux, or a kernel or sandbox that refuses it
        return False


class PeakMemory:
    """A context manager: `bytes` is the process's peak resident set during the block and
    `before` its resident set when the block began."""

    def __init__(self):
        self.before = 0
        self.bytes = 0
        self._sampler = None
        self._done = threading.Event()

    def __enter__(self) -> "PeakMemory":
        self.before = psutil.Process().memory_info().rss
        with _lock:
            mark = _high_water_mark()
            for other in _open:
                other.bytes = max(other.bytes, mark or 0)
            exact = mark is not None and _reset_high_water_mark()
            _open.append(self)
        self.bytes = self.before
        if not exact:
            self._sampler = threading.Thread(target=self._sample, daemon=True,
                                             name="bert-jax-peak-memory")
            self._sampler.start()
        return self

    def _sample(self) -> None:
        process = psutil.Process()
        while not self._done.wait(SAMPLE_SECONDS):
            self.bytes = max(self.bytes, process.memory_info().rss)

    def __exit__(self, *exception) -> None:
        if self._sampler is not None:
            self._done.set()
            self._sampler.join()
        with _lock:
            _open.remove(self)
            mark = _high_water_mark() if self._sampler is None else None
        self.bytes = max(self.bytes, mark or 0, psutil.Process().memory_info().rss)


def format_gib(num_bytes: int) -> str:
    return f"{num_bytes / 2**30:.2f} GiB"
