"""bert_jax.peak_memory: a block's peak resident memory, for compiles to say what they need."""

import time

import psutil

from bert_jax import peak_memory
from fresh_pages import MIB, touch



def test_a_freed_allocation_still_counts_at_its_peak():
    with peak_memory.PeakMemory() as peak:
        block = touch(200)
        del block
    # The process held at least `before` plus the 200 MiB at the allocation's height. The
    # upper bound: the allocation and the interpreter's own churn, far under a second copy.
    assert peak.bytes - peak.before >= 200 * MIB - 4 * MIB, (peak.bytes, peak.before)
    assert peak.bytes - peak.before < 400 * MIB
    assert psutil.Process().memory_info().rss < peak.bytes


def test_a_watched_block_inside_another_leaves_the_outer_peak_whole():
    with peak_memory.PeakMemory() as outer:
        block = touch(200)
        del block
        # The inner watch resets the kernel's high-water mark; the outer must keep its 200 MiB.
        with peak_memory.PeakMemory() as inner:
            small = touch(20)
            del small
    assert outer.bytes - outer.before >= 196 * MIB
    assert inner.bytes - inner.before < 150 * MIB


def test_without_the_kernels_mark_a_sampler_measures(monkeypatch):
    monkeypatch.setattr(peak_memory, "_reset_high_water_mark", lambda: False)
    monkeypatch.setattr(peak_memory, "SAMPLE_SECONDS", 0.005)
    with peak_memory.PeakMemory() as peak:
        block = touch(200)
        time.sleep(0.05)  # held long enough for the sampler to see it (a spike can be missed)
        del block
    assert peak.bytes - peak.before >= 196 * MIB
