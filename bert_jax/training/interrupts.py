"""Stopping a training run cleanly: SIGTERM and a first Ctrl-C save the current step; a
second Ctrl-C exits at once.

Python raises KeyboardInterrupt only between bytecodes, so a Ctrl-C arriving while a long
XLA step runs would surface minutes later, somewhere arbitrary, and save nothing. Instead
both signals set a flag that the loop polls after each step: it saves that step and
returns, within seconds of the step finishing. A user who cannot wait presses Ctrl-C again
and the process exits immediately (status 130; the last saved checkpoint is intact, since
every checkpoint is written under a temporary name first). A run stopped by a signal
exits as a shell reports that signal (`exit_status`): 130 after Ctrl-C, 143 after SIGTERM.
"""

import os
import signal
import sys

EXIT_NOW_STATUS = 130  # 128 + SIGINT, as a shell reports an interrupted command


class StopRequests:
    """`with StopRequests() as stops:` ... `if stops.requested:` save and return."""

    def __init__(self):
        self.requested = False
        self.interrupts = 0
        self.signal = None  # the first signal received
        self._previous = {}

    def __enter__(self) -> "StopRequests":
        for signum in (signal.SIGTERM, signal.SIGINT):
            try:
                self._previous[signum] = signal.signal(signum, self._handle)
            except ValueError:  # not the main thread: leave signals alone
                break
        return self

    @property
    def exit_status(self) -> int:
        """128 + the signal that stopped the run; SIGTERM's when this process received none
        (another process of the run was preempted, and all stop together)."""
        return 128 + int(self.signal or signal.SIGTERM)

    def _handle(self, signum, frame) -> None:
        self.signal = self.signal or signum
        if signum == signal.SIGINT:
            self.interrupts += 1
            if self.interrupts > 1:
                os.write(sys.stderr.fileno(), b"\nsecond Ctrl-C: exiting now without saving "
                         b"this step (the last checkpoint is intact)\n")
                os._exit(EXIT_NOW_STATUS)
            os.write(sys.stderr.fileno(), b"\nCtrl-C: saving a checkpoint when this step "
                     b"finishes, then exiting; press Ctrl-C again to exit now without saving\n")
        self.requested = True

    def __exit__(self, *exc) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous = {}
