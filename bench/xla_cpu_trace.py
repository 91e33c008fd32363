"""What an XLA CPU program spent its time on, read from a jax.profiler trace: each HLO
instruction's own time on XLA's worker threads, and the JAX operation each instruction was
made for (its metadata op_name). bench/profile_step.py files both under model parts."""

import collections
import glob
import os
import re


def op_names(hlo_text: str) -> dict[str, str]:
    """HLO instruction name -> its metadata op_name."""
    names = {}
    for line in hlo_text.splitlines():
        match = re.match(r"\s*(?:ROOT )?%?([\w.\-]+) = .*?op_name=\"([^\"]*)\"", line)
        if match:
            names[match.group(1)] = match.group(2)
    return names


def thread_times(trace_dir: str, steps: int) -> collections.Counter:
    """Nanoseconds per step of each XLA operation on the XLA worker threads, its own time: an
    operation that holds others on its thread (a conditional running its branch's products)
    is counted without them, which are counted under their own names."""
    from jax.profiler import ProfileData
    path = glob.glob(os.path.join(trace_dir, "**", "*.xplane.pb"), recursive=True)[0]
    totals = collections.Counter()
    for plane in ProfileData.from_file(path).planes:
        for line in plane.lines:
            if not line.name.startswith("tf_XLAEigen"):
                continue
            events = ((event.name, event.start_ns, event.end_ns) for event in line.events
                      if not event.name.startswith(("ThunkExecutor", "SlinkyThreadPool")))
            for name, nanoseconds in own_times(events):
                totals[name] += nanoseconds / steps
    return totals


def own_times(events) -> list[tuple[str, float]]:
    """(name, its duration less the events it holds) for (name, start, end) events of one
    thread, which nest but never overlap otherwise."""
    events = sorted(events, key=lambda event: (event[1], -event[2]))
    own, open_events = [], []  # open_events: indices into own of events still running
    for name, start, end in events:
        while open_events and own[open_events[-1]][2] <= start:
            open_events.pop()
        if open_events:  # held by the innermost running event: not its own time
            parent = own[open_events[-1]]
            parent[1] -= end - start
        own.append([name, end - start, end])
        open_events.append(len(own) - 1)
    return [(name, nanoseconds) for name, nanoseconds, _ in own]
