"""Memory that is resident for certain: fresh pages from the kernel, each one written.

Tests of memory measurement need a block whose pages the process did not hold before. numpy's
malloc cannot promise that: a long-lived test worker's heap can hold freed memory that is
still resident, and malloc reuses it (CI: a worker at 7.1 GB took np.ones' 200 MiB without its
resident set growing; reproduced by running tests/test_peak_memory.py in a process started
with cpu_memory's tunables after freeing 300 MiB of numpy array). An anonymous map is always
new pages, and deleting it hands them back.
"""

import mmap

MIB = 2**20


def touch(megabytes: int) -> mmap.mmap:
    """`megabytes` MiB of new pages, every one written: resident, not only reserved."""
    block = mmap.mmap(-1, megabytes * MIB)
    for offset in range(0, megabytes * MIB, mmap.PAGESIZE):
        block[offset] = 1
    return block
