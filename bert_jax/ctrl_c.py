"""Ctrl-C ends any command promptly and cleanly: one line, status 130, no traceback, no crash.

Three things stood in the way (issue 51), each seen on `search` interrupted at random moments:

- A KeyboardInterrupt raised inside a native module's initialisation crashed the process:
  `from jaxlib import _jax` (XLA's bindings, loaded when a command first imports JAX) runs
  Python code while it sets itself up, and an exception there left it half-made: SIGSEGV or
  SIGABRT with nothing printed (2 of 30 tries with the signal 0.05-1.5 s after the start).
  So while an import is running, a Ctrl-C is held back and sent again moments later, until
  it lands outside every import (within `_HELD_AT_MOST` seconds). The same holds while JAX
  sets up its backends (`jax/_src/xla_bridge.py`): native clients are made there, and its
  discovery of plugins catches every exception, a KeyboardInterrupt too, logs it as a
  "plugin configuration error" and carries on (1 of 11 tries).
- Python swallows a KeyboardInterrupt raised while a garbage-collection callback runs: it
  prints "Exception ignored in garbage collection callback" and carries on. JAX registers
  such a callback (`jax._src.lib._xla_gc_callback`), so a Ctrl-C landing in a collection
  was lost and `search` ran to the end with status 0 (8 of 11 tries 1-4 s after the start).
  The hook Python calls for such errors sends the signal again.
- Once the interrupt has unwound to `bert_jax/cli.py` (every `finally` has run: temporaries
  removed, locks released), the interpreter's own teardown would free modules while XLA's
  threads may still run what the interrupted code dispatched. `exit_now` ends the process
  there instead, after flushing what was printed.

A signal is sent again from a new thread: sent from this one, it would be handled at once,
where it was just held back; from another, the main thread handles it at its next check.
"""

import _thread
import os
import signal
import sys
import time

_HELD_AT_MOST = 10.0  # seconds a Ctrl-C waits for an import to finish before it is raised
_RESEND_AFTER = 0.05  # seconds between tries
_JAX_BACKENDS = os.path.join("jax", "_src", "xla_bridge.py")
_installed = False
_held_since: float | None = None


def _send_again(delay: float = 0.0) -> None:
    def send() -> None:
        time.sleep(delay)
        os.kill(os.getpid(), signal.SIGINT)

    _thread.start_new_thread(send, ())  # `threading` would wait for it to start, here


def _held_back_here(frame) -> bool:
    """Whether `frame` is inside an import or JAX's setting up of its backends."""
    while frame is not None:
        name = frame.f_code.co_filename
        if name.startswith("<frozen importlib") or name.endswith(_JAX_BACKENDS):
            return True
        frame = frame.f_back
    return False


def _interrupt(signum, frame) -> None:
    """SIGINT's handler: KeyboardInterrupt, as Python's own, except where held back."""
    global _held_since
    now = time.monotonic()
    if _held_back_here(frame) and now - (_held_since or now) < _HELD_AT_MOST:
        _held_since = _held_since or now
        _send_again(_RESEND_AFTER)
        return
    _held_since = None
    raise KeyboardInterrupt


def _raise_again(previous):
    def hook(unraisable) -> None:
        if isinstance(unraisable.exc_value, KeyboardInterrupt):
            _send_again()  # raised where the main thread is next, outside this callback
            return
        previous(unraisable)
    return hook


def install() -> None:
    """Holds a Ctrl-C back while an import runs or JAX sets up its backends, and has a KeyboardInterrupt that Python
    could not raise (inside a garbage-collection callback or a finaliser) arrive again. A
    SIGINT that this process ignores (a background job's) stays ignored."""
    global _installed
    if _installed:
        return
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _interrupt)
    sys.unraisablehook = _raise_again(sys.unraisablehook)
    _installed = True


def exit_now(status: int) -> None:
    """Ends the process with `status` after flushing, without the interpreter's teardown."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: nothing more can be said
            pass
    os._exit(status)
