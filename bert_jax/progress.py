"""Progress a user can trust: bars that count finished work, and elapsed time while XLA compiles.

JAX returns from a jitted call as soon as the work is queued, so a bar advanced at every
call counts dispatched steps: right after compiling it read 145 step/s on a CPU that does
a few, then sat at 100% for minutes while the queue drained. `StepProgress` advances only to
a step whose results exist. A compile runs inside one call that says nothing for minutes
(BERT-Large for a v4 pod: three); `elapsed` shows that it is still going, and
`interruptible` lets Ctrl-C or SIGTERM end it with one line instead of a native stack dump.
A jitted function compiles again for each new input shape (fine-tuning and prediction batch
by length bucket), inside a step a bar is timing: `CompileWatch` says so and takes that time
off the bar's clock, so its rate and ETA stay those of the steps.
"""

import contextlib
import os
import signal
import sys
import threading
import time

from bert_jax.peak_memory import PeakMemory, format_gib

# How often a bar looks at which queued steps have finished (tqdm redraws at most every 0.1 s).
SYNC_SECONDS = 0.5
# Steps the host may run ahead of the device: enough to keep it fed (the next batch is queued
# while one runs), few enough that the bar lags by seconds, not by a queue of minutes.
MAX_QUEUED_STEPS = 2
# Work shorter than this shows nothing (a compile read from the persistent cache); longer work
# gets a line, in a log file one "still compiling" line every LOG_EVERY_SECONDS, on a terminal
# a line redrawn each second.
FIRST_LINE_SECONDS = 1.0
LOG_EVERY_SECONDS = 30.0
# How often `interruptible` asks its guard (a compile's memory watch: a compile grows by
# hundreds of MB a second at most, so the margin it keeps is not crossed between two looks).
GUARD_SECONDS = 0.2


def _is_ready(result) -> bool:
    import jax

    return all(leaf.is_ready() for leaf in jax.tree.leaves(result))


def _block_until_ready(result) -> None:
    import jax

    jax.block_until_ready(result)


class StepProgress:
    """A tqdm bar over steps that counts a step once its result (any pytree of arrays) exists.

    `advance(step, result)` after dispatching `step`. Every `sync_seconds` the bar moves to
    the newest step whose result is ready (steps finish in order, each taking the previous
    state); it never waits for that. It waits only when more than `max_queued` steps are in
    flight, and then for the oldest, so the device still has the rest queued: the host runs
    ahead by a bounded number of steps instead of queueing the whole run (`finetune mlm`
    queued all 17 of its 12 s steps and showed 100% three minutes early). `close()` waits
    for the last step. tqdm's rate and ETA are therefore those of finished steps.
    """

    def __init__(self, total: int, initial: int, description: str, enabled: bool = True,
                 unit: str = "step", sync_seconds: float = SYNC_SECONDS,
                 max_queued: int = MAX_QUEUED_STEPS, **bar_options):
        from tqdm import tqdm

        self.bar = tqdm(total=total, initial=initial, disable=not enabled, unit=unit,
                        dynamic_ncols=True, desc=description, **bar_options)
        self.sync_seconds, self.max_queued = sync_seconds, max_queued
        self._queued: list[tuple[int, object]] = []  # (step, result), oldest first
        self._done = initial
        self._synced = time.monotonic()

    @property
    def total(self) -> int:
        return self.bar.total

    def advance(self, step: int, result) -> None:
        self._queued.append((step, result))
        while len(self._queued) > self.max_queued:
            self._confirm(*self._queued.pop(0), wait=True)
        if time.monotonic() - self._synced >= self.sync_seconds:
            while self._queued and _is_ready(self._queued[0][1]):
                self._confirm(*self._queued.pop(0))
            self._show()

    def _confirm(self, step: int, result, wait: bool = False) -> None:
        if wait:
            _block_until_ready(result)
        self._done = max(self._done, step)

    def _show(self) -> None:
        if self._done > self.bar.n:
            self.bar.update(self._done - self.bar.n)
        self._synced = time.monotonic()

    def set_postfix(self, refresh: bool = False, **values) -> None:
        self.bar.set_postfix(refresh=refresh, **values)

    def finish(self) -> None:
        """Waits for every queued step and shows the last."""
        while self._queued:
            self._confirm(*self._queued.pop(0), wait=True)
        self._show()

    def close(self) -> None:
        self.finish()
        self.bar.close()


def _format_seconds(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds // 60:.0f} min {seconds % 60:02.0f} s"


@contextlib.contextmanager
def elapsed(what: str, log=None, stream=None, enabled: bool = True):
    """Shows `what ... N s` while the block runs, from a small thread; nothing for a block
    done within FIRST_LINE_SECONDS.

    On a terminal (`stream`, default stderr) the line is redrawn every second and ends with
    the total; otherwise (a pipe, a log file) `log` gets `what ...`, then a line every
    LOG_EVERY_SECONDS and the total, so a long compile never looks like a hang in
    `launch logs` either. The total comes with the process's peak resident memory over the
    block (bert_jax.peak_memory): what a compile needs, for the next machine to be sized by.
    """
    stream = stream or sys.stderr
    if not enabled:
        yield
        return
    terminal = log is None and stream.isatty()
    log = log or (lambda line: print(line, file=stream, flush=True))
    began, done, drawn = time.monotonic(), threading.Event(), threading.Event()

    def tick():
        if done.wait(FIRST_LINE_SECONDS):
            return
        drawn.set()
        if terminal:
            stream.write(f"\r{what} ... {_format_seconds(time.monotonic() - began)}")
            stream.flush()
        else:
            log(f"{what} ...")
        interval = 1.0 if terminal else LOG_EVERY_SECONDS
        while not done.wait(interval):
            seconds = _format_seconds(time.monotonic() - began)
            if terminal:
                stream.write(f"\r{what} ... {seconds}")
                stream.flush()
            else:
                log(f"  still {what}: {seconds}")

    thread = threading.Thread(target=tick, name="bert-jax-elapsed", daemon=True)
    thread.start()
    peak, failed = PeakMemory(), False
    try:
        with peak:
            yield
    except BaseException:
        failed = True
        raise
    finally:
        done.set()
        thread.join()
        # What a compile needs is its peak resident memory: said beside its time.
        finished = (f"{'stopped after' if failed else 'done in'} "
                    f"{_format_seconds(time.monotonic() - began)}, peak resident "
                    f"memory {format_gib(peak.bytes)}")
        if drawn.is_set() and terminal:  # a block done within the first second leaves no line
            stream.write(f"\r{what} ... {finished}\n")
            stream.flush()
        elif drawn.is_set():
            log(f"  {what}: {finished}")


def hold_clock(bar, seconds: float) -> None:
    """Takes `seconds` (just spent on something else, such as a compile) off a tqdm bar's
    clock: its elapsed time, rate and ETA are then those of the work it counts."""
    if bar is None or bar.disable:
        return
    bar.start_t += seconds
    bar.last_print_t += seconds  # tqdm's smoothed rate measures from the last print


def batch_shapes(batch: dict) -> tuple:
    """What a jitted step compiles for: each input's name and shape."""
    return tuple(sorted((name, tuple(value.shape)) for name, value in batch.items()))


def rows_by_length(batch: dict) -> str:
    """`R x T` of a batch of token rows (its input_ids, else its first 2-D input)."""
    shapes = batch_shapes(batch)
    rows, length = dict(shapes).get("input_ids") or next(
        shape for _, shape in shapes if len(shape) == 2)
    return f"{rows} x {length}"


class CompileWatch:
    """Calls a jitted step, saying "compiling WHAT for R x T" the first time a batch shape
    comes (XLA compiles inside that call) and keeping that time out of the bar's clock and
    of each `holds(seconds)` (a throughput meter's).

    A shape compiled earlier, or read from the persistent compilation cache within
    FIRST_LINE_SECONDS, shows nothing. The lines go above the bar (tqdm.write), not over it.
    """

    def __init__(self, what: str, enabled: bool = True, log=None, holds=()):
        from tqdm import tqdm

        self.what, self.enabled, self.holds = what, enabled, holds
        self.log = log or (lambda line: tqdm.write(line, file=sys.stderr))
        self.seen: set = set()

    def __call__(self, batch: dict, bar, function):
        """`function()` (the step on `batch`, a dict of numpy arrays) under the watch."""
        shapes = batch_shapes(batch)
        if shapes in self.seen:
            return function()
        self.seen.add(shapes)
        began = time.monotonic()
        with elapsed(f"compiling {self.what} for {rows_by_length(batch)}", self.log,
                     enabled=self.enabled):
            result = function()
        seconds = time.monotonic() - began
        hold_clock(bar, seconds)
        for hold in self.holds:
            hold(seconds)
        return result


def interruptible(function, what: str, command: str, log=None, stream=None, guard=None):
    """`function()` run in a worker thread while this (main) thread shows the elapsed time and
    stays able to take signals: Ctrl-C or SIGTERM then ends the process with one line (exit
    status 130 or 143) instead of waiting for, or dumping the stack of, native code.

    `guard`, where given, is asked every GUARD_SECONDS while the work runs; once it returns a
    line, the process ends with that line as an error (exit status 2), as a compile that is
    about to run the machine out of memory must (bert_jax.compiler.compile_memory.watch).
    Called from another thread, the work runs in that thread, unwatched and uninterruptible.

    The process exits at once (`os._exit`): this is for work that writes nothing, such as an
    ahead-of-time compile. Returns what `function` returns, or raises what it raised.
    """
    stream = stream or sys.stderr
    if threading.current_thread() is not threading.main_thread():  # signals go to the main one
        with elapsed(what, log, stream):
            return function()
    outcome: dict = {}

    def work():
        try:
            outcome["value"] = function()
        except BaseException as error:  # re-raised in the calling thread
            outcome["error"] = error

    def stop(signal_number, _frame):
        name = "Ctrl-C" if signal_number == signal.SIGINT else "SIGTERM"
        stream.write(f"\nbert-jax {command}: stopped by {name} while {what} "
                     f"(after {_format_seconds(time.monotonic() - began)})\n")
        stream.flush()
        os._exit(128 + signal_number)

    # Native libraries (libtpu) install their own handlers when they load; these replace them
    # for the duration, so the signal reaches Python and this thread.
    previous = {number: signal.signal(number, stop) for number in (signal.SIGINT, signal.SIGTERM)}
    began = time.monotonic()
    worker = threading.Thread(target=work, name="bert-jax-compile", daemon=True)
    try:
        with elapsed(what, log, stream):
            worker.start()
            while worker.is_alive():
                worker.join(GUARD_SECONDS)
                stop_line = guard() if guard is not None and worker.is_alive() else None
                if stop_line:
                    stream.write(f"\nbert-jax {command}: error: {stop_line} (after "
                                 f"{_format_seconds(time.monotonic() - began)})\n")
                    stream.flush()
                    os._exit(2)
            if "error" in outcome:  # inside the block: its last line says stopped, not done
                raise outcome["error"]
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
    return outcome["value"]
