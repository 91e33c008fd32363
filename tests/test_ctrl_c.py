"""Ctrl-C ends a command promptly and cleanly (bert_jax/ctrl_c.py, issue 51), and `predict`
on a run still training says which step it used and that the run is still going.

Old behaviour: a SIGINT landing while JAX's garbage-collection callback ran was swallowed
("Exception ignored in garbage collection callback"), so `search` interrupted 1-3 s after
its start ran to the end with status 0 (8 of 11 tries); once `-2` (killed at teardown).
"""

import gc
import os
import signal
import subprocess
import sys
import time

import pytest

from bert_jax import cpu_matmul, ctrl_c
from bert_jax.commands.predict import say_which_checkpoint
from bert_jax.interop import model_source
from bert_jax.training.run_lock import RunLock, running_holder

TESTS = os.path.dirname(os.path.abspath(__file__))


def _interrupt_inside_a_gc_callback(seconds: float) -> bool:
    """Whether a SIGINT sent from inside a garbage-collection callback (where Python handles
    it, and drops the KeyboardInterrupt) still interrupts this thread within `seconds`."""
    sent = []

    def callback(phase, _info):
        if phase == "start" and not sent:
            sent.append(True)
            os.kill(os.getpid(), signal.SIGINT)
            sum(range(10))  # a few bytecodes: the handler runs here, inside the callback

    gc.callbacks.append(callback)
    try:
        gc.collect()
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            time.sleep(0.01)
    except KeyboardInterrupt:
        return True
    finally:
        gc.callbacks.remove(callback)
    return False


@pytest.fixture
def installed(monkeypatch):
    """`ctrl_c.install()` in this process, undone afterwards (the handler and the hook)."""
    monkeypatch.setattr(sys, "unraisablehook", lambda _: None)  # Python's own: drops it
    monkeypatch.setattr(ctrl_c, "_installed", False)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield ctrl_c.install
    finally:
        signal.signal(signal.SIGINT, previous)


def test_an_interrupt_swallowed_in_a_gc_callback_arrives_again(installed):
    assert not _interrupt_inside_a_gc_callback(0.3)  # what the bug was
    installed()
    assert _interrupt_inside_a_gc_callback(5.0)


def test_an_interrupt_during_an_import_waits_for_the_import_to_finish(installed, tmp_path,
                                                                        monkeypatch):
    """A module whose import receives SIGINT half-way (as jaxlib's native bindings did while
    they set themselves up): Python's handler raises inside it; ours after it."""
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("interrupted_before", "interrupted_after"):
        (tmp_path / f"{name}.py").write_text(
            "import os, signal\nos.kill(os.getpid(), signal.SIGINT)\n"
            "halves = [sum(range(100)) for _ in range(1000)]\nfinished = True\n")
    with pytest.raises(KeyboardInterrupt):
        import interrupted_before  # noqa: F401
    assert "interrupted_before" not in sys.modules  # cut off half-way
    installed()
    with pytest.raises(KeyboardInterrupt):
        import interrupted_after  # noqa: F401
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            time.sleep(0.01)
    assert sys.modules["interrupted_after"].finished


def test_ctrl_c_while_a_command_starts_and_waits_is_one_line_and_130(tmp_path):
    """SIGINT while `search` imports JAX (where the callback runs most) or waits for its
    corpus (a FIFO no one writes): status 130 and one line, whenever it lands."""
    corpus = tmp_path / "corpus.fifo"
    os.mkfifo(corpus)
    for delay in (0.8, 2.0):
        process = subprocess.Popen(
            [sys.executable, "-m", "bert_jax.cli", "search", "--model", str(tmp_path),
             "--corpus", str(corpus), "--query", "a", "--index", str(tmp_path / "index.npz")],
            cwd=os.path.dirname(TESTS), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True)  # SIGINT not ignored there: conftest.py handles it in this process
        time.sleep(delay)
        process.send_signal(signal.SIGINT)
        try:
            out, error = process.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            # The kernel may hand the signal to another of its threads, which cannot wake
            # the main one from open(); the flag it set is acted on when open() returns.
            with open(corpus, "w"):
                pass
            out, error = process.communicate(timeout=60)
        # On a CPU with AMX the command first says which library runs its matrix products.
        error = error.replace(cpu_matmul.ANNOUNCEMENT + "\n", "", 1)
        assert (process.returncode, out, error) == (130, "", "bert-jax search: interrupted\n")


def _run_directory(root) -> str:
    """A training work directory as `source_kind` knows one: finished steps 3 and 7."""
    run = root / "run"
    for step in (3, 7):
        (run / "checkpoints" / str(step) / "params").mkdir(parents=True)
    (run / "model_config.json").write_text("{}")
    return str(run)


def test_predict_on_a_run_says_its_step_and_whether_the_run_is_still_going(tmp_path, capsys):
    run = _run_directory(tmp_path)
    source = model_source.resolve(run)
    assert running_holder(run) is None
    say_which_checkpoint(source)
    assert capsys.readouterr().err == (
        f"--model {run}: a training run; using its newest finished checkpoint, step 7\n")
    with RunLock(run):
        holder = running_holder(run)
        assert holder["pid"] == os.getpid()
        say_which_checkpoint(source)
    assert capsys.readouterr().err == (
        f"--model {run}: a training run; using its newest finished checkpoint, step 7; the run "
        f"is still going (pid {os.getpid()} on {holder['host']}, started {holder['started']}), "
        "so a later checkpoint may predict otherwise\n")
    assert running_holder(run) is None  # released with the run, and not kept by the query
    with RunLock(run):  # nor does the query keep a run from starting
        pass


def test_predict_on_a_step_the_user_chose_says_nothing(tmp_path, capsys):
    run = _run_directory(tmp_path)
    say_which_checkpoint(model_source.resolve(os.path.join(run, "checkpoints", "3")))
    assert capsys.readouterr().err == ""
