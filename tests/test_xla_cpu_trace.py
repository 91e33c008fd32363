"""bench/xla_cpu_trace.py, which bench/profile_step.py reads its traces with, counts each
XLA operation's own time: a conditional's trace event holds its branch's operations on the
same thread, and counting both (as before) put the masked-LM head's products in the profile
twice, once under `word_logits/cond`. And each operation's share of the wall clock: XLA's CPU
runtime runs independent operations on two threads at once, and their thread times together
exceed the wall time they took."""

import os
import sys

REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPOSITORY)
from bench.xla_cpu_trace import innermost, own_times, shared_wall  # noqa: E402


def test_an_event_holding_others_keeps_only_its_own_time():
    events = [("cond", 0, 100), ("product", 10, 40), ("branch", 50, 90), ("inner", 60, 70),
              ("after", 120, 130)]
    assert dict(own_times(events)) == {"cond": 30, "product": 30, "branch": 30, "inner": 10,
                                       "after": 10}


def test_events_in_any_order_and_back_to_back_are_their_own():
    events = [("second", 10, 20), ("first", 0, 10), ("third", 20, 25)]
    assert dict(own_times(events)) == {"first": 10, "second": 10, "third": 5}


def test_a_thread_gives_each_instant_to_its_innermost_event():
    events = [("cond", 0, 100), ("product", 10, 40), ("after", 120, 130)]
    assert innermost(events) == [("cond", 0, 10), ("product", 10, 40), ("cond", 40, 100),
                                 ("after", 120, 130)]


def test_operations_running_at_once_share_the_wall_clock():
    # Two gradient products at once on two threads from 0 to 100, then one alone to 150; an
    # idle gap from 150 to 200 belongs to nobody. Exact: the shares are sums of halves of
    # integers.
    segments = [("dx", 0, 100), ("dw", 0, 150), ("update", 200, 210)]
    assert shared_wall(segments) == {"dx": 50, "dw": 100, "update": 10}
    assert sum(shared_wall(segments).values()) == 160  # the time some operation ran
