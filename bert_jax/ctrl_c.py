"""Ctrl-C ends any command promptly and cleanly: one line, status 130, no traceback.

Two things stood in the way (issue 51):

- Python swallows a KeyboardInterrupt raised while a garbage-collection callback runs: it
  prints "Exception ignored in garbage collection callback" and carries on. JAX registers
  such a callback (`jax._src.lib._xla_gc_callback`, which frees XLA's buffers), and a
  signal's handler runs wherever the interpreter is when it checks, so a Ctrl-C landing in
  a collection (often, while modules import or texts are tokenised) was lost: `search`
  ran to the end with status 0. `install` has the signal sent again from the hook Python
  calls for such errors, by a new thread: sent from this one, it would be handled at once,
  inside the hook, and swallowed there too; from another, the main thread handles it at
  its next check, where the program is then (a collection again: sent again).
- Once the interrupt has unwound to `bert_jax/cli.py` (every `finally` has run: temporaries
  removed, locks released), the interpreter's own teardown would free modules while XLA's
  threads may still run what the interrupted code dispatched, a crash at exit at worst.
  `exit_now` ends the process there instead, after flushing what was printed.
"""

import _thread
import os
import signal
import sys

_installed = False


def install() -> None:
    """Makes a KeyboardInterrupt that Python could not raise (inside a garbage-collection
    callback or a finaliser) arrive again as a signal, instead of being dropped."""
    global _installed
    if _installed:
        return
    previous = sys.unraisablehook

    def raise_again(unraisable) -> None:
        if isinstance(unraisable.exc_value, KeyboardInterrupt):
            # `threading.Thread.start` waits for the thread, where it could be handled too.
            _thread.start_new_thread(os.kill, (os.getpid(), signal.SIGINT))
            return
        previous(unraisable)

    sys.unraisablehook = raise_again
    _installed = True


def exit_now(status: int) -> None:
    """Ends the process with `status` after flushing, without the interpreter's teardown."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: nothing more can be said
            pass
    os._exit(status)
