"""bench/timed_rounds.py: a bench's warm-up lasts until no call grows the process's memory,
and its rounds say how many fresh pages each call took."""

import io
import os
import sys

REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPOSITORY)
from bench import timed_rounds  # noqa: E402
from fresh_pages import touch  # noqa: E402


class GrowingCall:
    """A call that takes `growing` calls' worth of fresh memory (40 MiB each, every page
    written: 10,240 faults, four times STEADY_FAULTS) and then none, as a step whose heap is
    still growing does; the maps are kept, as a heap keeps what it grew."""

    def __init__(self, growing: int):
        self.growing, self.calls, self.maps = growing, 0, []

    def __call__(self):
        self.calls += 1
        if self.calls <= self.growing:
            self.maps.append(touch(40))


def test_warm_up_lasts_until_two_rounds_in_a_row_take_no_fresh_memory():
    quick, slow = GrowingCall(0), GrowingCall(3)
    said = io.StringIO()
    timed_rounds.warm_up({"quick": quick, "slow": slow}, minimum=2, stream=said)
    # Rounds 1-3: `slow` grew; rounds 4 and 5 are the first two in a row in which neither
    # did. `quick` is called in every round too (the sides alternate as in the timed rounds).
    assert (quick.calls, slow.calls) == (5, 5)
    assert said.getvalue().startswith("warm-up: 5 round(s), until 2 in a row took no fresh")


def test_warm_up_runs_its_minimum_and_stops_at_its_limit():
    steady, always = GrowingCall(0), GrowingCall(100)
    timed_rounds.warm_up({"steady": steady}, minimum=3, stream=io.StringIO())
    assert steady.calls == 3  # compilation's calls, though two quiet rounds came sooner
    said = io.StringIO()
    timed_rounds.warm_up({"always": always}, minimum=1, stream=said)
    assert always.calls == timed_rounds.WARM_UP_LIMIT
    assert said.getvalue().rstrip().endswith("still growing: always")


def test_rounds_count_each_sides_fresh_pages_a_call():
    growing, steady = GrowingCall(2), GrowingCall(0)
    faults = {}
    times = timed_rounds.time_rounds({"growing": growing, "steady": steady}, rounds=3,
                                     repeats={"growing": 2, "steady": 1}, faults=faults)
    assert [len(round_times) for round_times in times["growing"]] == [2, 2, 2]
    # Round 1: two calls of 10,240 faults each; the interpreter's own few pages aside.
    assert 10_240 <= faults["growing"][0] < 10_240 + 500
    assert max(faults["growing"][1:]) < 500
    assert max(faults["steady"]) < 500
