"""Timing both sides of a bench in interleaved rounds, after a warm-up that reaches the
steady state a long run's steps are in.

The benches (model_step, modernbert_step and eurobert_step, packing_step, scan_compile) time
each side's calls round by round, the sides alternating, so that a change in the machine's
load hits them all; and before that they warm each side up, past its compilation, until a
call no longer grows the process's heap.
"""

import resource
import sys
import time

# A call that takes fewer fresh pages than this (10 MiB) from the kernel runs in the heap it
# already holds: the steady state a long run's steps are in.
STEADY_FAULTS = 2560
QUIET_ROUNDS = 2
WARM_UP_LIMIT = 12


def time_rounds(steps: dict, rounds: int, repeats: dict,
                faults: dict | None = None) -> dict[str, list[list[float]]]:
    """Seconds per call, [round][call], for each entry of `steps`, called `repeats[name]`
    times per round; the entries alternate, so a change in machine load hits them all.

    `faults`, if given, is filled with each entry's minor page faults a call, per round: a
    round whose process took fresh pages from the kernel (its heap grew) ran slower for that,
    not for its own work, and the figure says which rounds did."""
    from tqdm import tqdm
    times = {name: [] for name in steps}
    if faults is not None:
        faults.update({name: [] for name in steps})
    with tqdm(total=rounds * sum(repeats.values()), unit="call", leave=False) as bar:
        for _ in range(rounds):
            for name, step in steps.items():
                round_times = []
                faults_before = _minor_faults()
                for _ in range(repeats[name]):
                    start = time.perf_counter()
                    step()
                    round_times.append(time.perf_counter() - start)
                    bar.update()
                times[name].append(round_times)
                if faults is not None:
                    faults[name].append((_minor_faults() - faults_before) / repeats[name])
    return times


def _minor_faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def warm_up(calls: dict, minimum: int, stream=sys.stdout) -> None:
    """Calls the entries of `calls` in rounds, as time_rounds will: at least `minimum`
    rounds (compilation), then until QUIET_ROUNDS rounds in a row in which no call took
    STEADY_FAULTS page faults or more, at most WARM_UP_LIMIT rounds; says how many it took.

    With glibc's tunables (bert_jax/cpu_memory.py) freed memory stays in the process's heap,
    but the heap reaches the size and layout a step's allocations fit only after several
    steps: EuroBERT's 1-layer 2 x 128 train step took 99k-235k faults and 7.6-10.2 s a call
    for its first five calls, then none and 1.9 s (AMX Xeon). A bench that starts timing
    before then times the heap's growth, not the step. The sides alternate here as in the
    timed rounds, since in one process what one side frees the other's allocations may take;
    and one quiet round is not enough (EuroBERT's 3-layer train step beside transformers' was
    quiet in its third round and took 513k and 257k faults in the next two)."""
    quiet = 0
    for count in range(1, WARM_UP_LIMIT + 1):
        grew = []
        for name, call in calls.items():
            before = _minor_faults()
            call()
            if _minor_faults() - before >= STEADY_FAULTS:
                grew.append(name)
        quiet = 0 if grew else quiet + 1
        if count >= minimum and quiet >= QUIET_ROUNDS:
            break
    still = f"; still growing: {', '.join(grew)}" if grew else ""
    print(f"warm-up: {count} round(s), until {QUIET_ROUNDS} in a row took no fresh memory (at "
          f"most {WARM_UP_LIMIT}){still}", file=stream, flush=True)
