"""bench/xla_cpu_trace.py, which bench/profile_step.py reads its traces with, counts each
XLA operation's own time: a conditional's trace event holds its branch's operations on the
same thread, and counting both (as before) put the masked-LM head's products in the profile
twice, once under `word_logits/cond`."""

import os
import sys

REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPOSITORY)
from bench.xla_cpu_trace import own_times  # noqa: E402


def test_an_event_holding_others_keeps_only_its_own_time():
    events = [("cond", 0, 100), ("product", 10, 40), ("branch", 50, 90), ("inner", 60, 70),
              ("after", 120, 130)]
    assert dict(own_times(events)) == {"cond": 30, "product": 30, "branch": 30, "inner": 10,
                                       "after": 10}


def test_events_in_any_order_and_back_to_back_are_their_own():
    events = [("second", 10, 20), ("first", 0, 10), ("third", 20, 25)]
    assert dict(own_times(events)) == {"first": 10, "second": 10, "third": 5}
