"""What an XLA CPU program spent its time on, read from a jax.profiler trace: each HLO
instruction's own time on XLA's worker threads, its share of the wall clock (operations that
run at once on two threads share it), and the JAX operation each instruction was made for (its
metadata op_name). bench/profile_step.py files them under model parts."""

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


def thread_times(threads: list, steps: int) -> collections.Counter:
    """Nanoseconds per step of each XLA operation on the XLA worker threads (`threads`, as
    `read_threads` gives them), its own time: an
    operation that holds others on its thread (a conditional running its branch's products)
    is counted without them, which are counted under their own names. Two operations running
    at once on two threads are both counted whole, so the sum can exceed the wall clock."""
    totals = collections.Counter()
    for events in threads:
        for name, nanoseconds in own_times(events):
            totals[name] += nanoseconds / steps
    return totals


def wall_times(threads: list, steps: int) -> collections.Counter:
    """Nanoseconds per step of wall clock of each XLA operation on `threads` (as `read_threads`
    gives them): each instant is shared equally
    by the operations running then (each thread's innermost), so the sum is the time some
    operation ran, never more than the wall clock. XLA's CPU runtime runs independent
    operations on its threads at once (the masked-LM head's two gradient products, each on
    one thread), which thread times count twice."""
    segments = [segment for events in threads for segment in innermost(events)]
    return collections.Counter({name: nanoseconds / steps
                                for name, nanoseconds in shared_wall(segments).items()})


def shared_wall(segments) -> collections.Counter:
    """Each name's share of the wall clock over (name, start, end) `segments` from several
    threads: an instant that k segments cover counts 1/k to each."""
    changes = collections.defaultdict(list)  # time -> [(+1 or -1, name)]
    for name, start, end in segments:
        changes[start].append((1, name))
        changes[end].append((-1, name))
    times = sorted(changes)
    running, shares = collections.Counter(), collections.Counter()  # running: names now
    for time, following in zip(times, times[1:]):
        for change, name in changes[time]:
            running[name] += change
            if not running[name]:
                del running[name]
        count = sum(running.values())
        for name, instances in running.items():
            shares[name] += (following - time) * instances / count
    return shares


def read_threads(trace_dir: str) -> list[list[tuple[str, float, float]]]:
    """Each XLA worker thread's operation events, (name, start, end) in nanoseconds, from the
    one trace jax.profiler wrote under `trace_dir`: read once, for both kinds of time."""
    from jax.profiler import ProfileData
    path = glob.glob(os.path.join(trace_dir, "**", "*.xplane.pb"), recursive=True)[0]
    return [[(event.name, event.start_ns, event.end_ns) for event in line.events
             if not event.name.startswith(("ThunkExecutor", "SlinkyThreadPool"))]
            for plane in ProfileData.from_file(path).planes for line in plane.lines
            if line.name.startswith("tf_XLAEigen")]


def own_times(events) -> list[tuple[str, float]]:
    """(name, its duration less the events it holds) for (name, start, end) events of one
    thread, which nest but never overlap otherwise."""
    events = sorted(events, key=lambda event: (event[1], -event[2]))
    own = [0] * len(events)
    for index, start, end in _innermost_spans(events):
        own[index] += end - start
    return [(name, nanoseconds) for (name, _, _), nanoseconds in zip(events, own)]


def innermost(events) -> list[tuple[str, float, float]]:
    """The (name, start, end) spans of one thread's nested events during which each is the
    innermost running: the thread's time, each instant given to one operation."""
    events = sorted(events, key=lambda event: (event[1], -event[2]))
    return [(events[index][0], start, end) for index, start, end in _innermost_spans(events)]


def _innermost_spans(events) -> list[tuple[int, float, float]]:
    """(index, start, end) spans of sorted nested `events` in which events[index] is the
    innermost running."""
    spans, open_events, cursor = [], [], None  # open_events: indices still running

    def close_through(time):
        nonlocal cursor
        while open_events and events[open_events[-1]][2] <= time:
            index = open_events.pop()
            spans.append((index, cursor, events[index][2]))
            cursor = events[index][2]

    for index, (_, start, end) in enumerate(events):
        close_through(start)
        if open_events:
            spans.append((open_events[-1], cursor, start))
        open_events.append(index)
        cursor = start
    close_through(float("inf"))
    return [(index, start, end) for index, start, end in spans if end > start]
