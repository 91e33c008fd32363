"""Progress that tracks real work: a bar's rate is the finished steps' rate, long compiles show
their elapsed time, and a signal during a compile ends it with one line."""

import importlib.util
import io
import os
import re
import signal
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import pytest

from bert_jax import progress

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@jax.jit
def _slow_step(state):
    """Tens of milliseconds of matrix products; JAX returns before they run (async dispatch)."""
    return jax.lax.fori_loop(0, 60, lambda _, value: jnp.tanh(value @ value), state)


def _measured_step_seconds(state, steps=5) -> float:
    _slow_step(state).block_until_ready()  # compiled
    began = time.monotonic()
    for _ in range(steps):
        state = _slow_step(state)
    state.block_until_ready()
    return (time.monotonic() - began) / steps


def _run_steps(bar, advance, state, steps) -> list[float]:
    """The rate the bar would print after each dispatched step, once it has counted three."""
    rates = []
    for step in range(1, steps + 1):
        state = _slow_step(state)
        advance(step, state)
        if bar.n >= 3:
            rates.append(bar.format_dict["rate"])
    state.block_until_ready()
    return rates


def test_bar_rate_is_the_finished_steps_rate():
    from tqdm import tqdm

    state = jnp.full((256, 256), 0.01, jnp.float32)
    step_seconds = _measured_step_seconds(state)
    steps = max(12, int(2.0 / step_seconds))  # long enough for several of the bar's looks

    # What the trainer did before: advance at every dispatch. While JAX queues the steps its
    # rate is the host's, far above the device's (which also shows that dispatch is
    # asynchronous here, so the check below is not trivially true).
    dispatched = tqdm(total=steps, file=io.StringIO(), mininterval=0)
    naive = _run_steps(dispatched, lambda step, result: dispatched.update(1), state, steps)
    assert naive[0] * step_seconds > 4, (naive[:3], step_seconds)

    bar = progress.StepProgress(steps, 0, "slow", file=io.StringIO(), mininterval=0,
                                sync_seconds=0.05)
    began = time.monotonic()
    rates = _run_steps(bar.bar, bar.advance, state, steps)
    bar.close()
    # The device's real rate in this same run (the machine's load moves from run to run).
    finished_rate = steps / (time.monotonic() - began)
    median = sorted(rates)[len(rates) // 2]
    print(f"step time {step_seconds * 1000:.1f} ms before, {1000 / finished_rate:.1f} ms in the "
          f"run ({finished_rate:.1f} step/s); the bar showed {median:.1f} step/s (median; "
          f"{min(rates):.1f}-{max(rates):.1f} over {len(rates)} steps, last {rates[-1]:.1f}); "
          f"a bar counting dispatches showed {naive[0]:.0f} step/s")
    for rate in (median, rates[-1]):
        assert 0.5 <= rate / finished_rate <= 2.0, (rates, finished_rate)
    assert bar.bar.n == steps


def test_work_that_raises_is_said_stopped_not_done(monkeypatch):
    monkeypatch.setattr(progress, "FIRST_LINE_SECONDS", 0.05)
    lines = []
    with pytest.raises(ValueError):
        with progress.elapsed("compiling the training step", lines.append):
            time.sleep(0.2)
            raise ValueError("refused")
    assert lines[-1].startswith("  compiling the training step: stopped after ")
    lines.clear()

    def refused():
        time.sleep(1.2)
        raise ValueError("refused")

    stream = io.StringIO()
    with pytest.raises(ValueError):
        progress.interruptible(refused, "compiling", "aot", log=lines.append, stream=stream)
    assert lines[-1].startswith("  compiling: stopped after ")


def test_elapsed_logs_while_a_compile_runs(monkeypatch):
    monkeypatch.setattr(progress, "FIRST_LINE_SECONDS", 0.05)
    monkeypatch.setattr(progress, "LOG_EVERY_SECONDS", 0.05)
    lines = []
    with progress.elapsed("compiling the training step", lines.append):
        time.sleep(0.4)
    # Said at once (a pipe or log file saw nothing for the first 30 s before), then kept up.
    assert lines[0] == "compiling the training step ..."
    assert len(lines) >= 4 and lines[1].startswith("  still compiling the training step: ")
    assert lines[-1].startswith("  compiling the training step: done in ")
    quick = []
    with progress.elapsed("compiling the training step", quick.append):
        pass
    assert quick == []  # a compile read from the persistent cache says nothing


def test_a_compile_inside_a_bar_is_said_and_kept_out_of_its_clock(monkeypatch):
    from tqdm import tqdm

    import numpy as np

    monkeypatch.setattr(progress, "FIRST_LINE_SECONDS", 0.05)
    lines = []
    watch = progress.CompileWatch("the training step", log=lines.append)
    bar = tqdm(total=4, file=io.StringIO(), mininterval=0)
    short, long = ({"input_ids": np.zeros((8, length), np.int32), "label": np.zeros(8)}
                   for length in (16, 32))
    # A new shape: the call compiles (a sleep stands in), said, off the bar's clock.
    watch(short, bar, lambda: time.sleep(0.3))
    bar.update(1)
    assert lines[0] == "compiling the training step for 8 x 16 ..."
    assert bar.format_dict["elapsed"] < 0.2, bar.format_dict
    # The same shape again runs the compiled program: its time is the step's, and counts.
    watch(short, bar, lambda: time.sleep(0.3))
    bar.update(1)
    assert len(lines) == 2 and bar.format_dict["elapsed"] >= 0.3
    watch(long, bar, lambda: "result")  # a quick new shape (a cache hit): nothing said
    assert len(lines) == 2 and watch(long, bar, lambda: "result") == "result"


def test_elapsed_redraws_one_terminal_line():
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    terminal = Terminal()
    with progress.elapsed("compiling for v4:4x4x2", stream=terminal):
        time.sleep(1.2)
    text = terminal.getvalue()
    assert text.startswith("\rcompiling for v4:4x4x2 ... 1 s")
    assert re.search(r" \.\.\. done in 1 s, peak resident memory \d+\.\d\d GiB\n$", text), text
    assert text.count("\n") == 1
    quick = Terminal()
    with progress.elapsed("writing", stream=quick):
        pass
    assert quick.getvalue() == ""  # nothing for work done within a second


_SLOW_WORK = """
import sys, time
from bert_jax.progress import interruptible
print("started", flush=True)
interruptible(lambda: time.sleep(60), "compiling for v5e:2x2", "aot")
"""


@pytest.mark.parametrize("signal_number, name", [(signal.SIGINT, "Ctrl-C"),
                                                 (signal.SIGTERM, "SIGTERM")])
def test_a_signal_during_interruptible_work_exits_with_one_line(signal_number, name):
    process = subprocess.Popen([sys.executable, "-c", _SLOW_WORK], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, cwd=REPO_ROOT,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert process.stdout.readline() == "started\n"
    time.sleep(0.5)
    process.send_signal(signal_number)
    _, stderr = process.communicate(timeout=20)
    assert process.returncode == 128 + signal_number
    (line,) = stderr.strip().splitlines()
    assert re.fullmatch(rf"bert-jax aot: stopped by {name} while compiling for v5e:2x2 "
                        r"\(after \d+ s\)", line), stderr


def test_interruptible_returns_and_raises_as_the_function_does():
    assert progress.interruptible(lambda: 42, "working", "test") == 42
    with pytest.raises(ZeroDivisionError):
        progress.interruptible(lambda: 1 / 0, "working", "test")


def test_aot_compile_stops_on_ctrl_c_with_one_line():
    if importlib.util.find_spec("libtpu") is None:
        pytest.skip("libtpu is not installed (pip install -r requirements-tpu.txt)")
    env = dict(os.environ, TPU_SKIP_MDS_QUERY="1", ALLOW_MULTIPLE_LIBTPU_LOAD="1")
    env.pop("XLA_FLAGS", None)
    process = subprocess.Popen(
        [sys.executable, "-m", "bert_jax.cli", "aot", "--config", "bert_base", "--topology",
         "v5e:2x2"], cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    for line in process.stderr:  # BERT-Base for 4 chips compiles for tens of seconds
        if line.startswith("compiling for"):  # said after a second (stderr is no terminal)
            break
    time.sleep(2)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=30)
    assert process.returncode == 130, stderr
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("bert-jax aot: stopped by Ctrl-C while compiling for v5e:2x2"), stderr
    assert "Traceback" not in stderr and "Stack" not in stderr, stderr


def test_elapsed_says_the_peak_resident_memory_of_its_block(monkeypatch):
    import numpy as np

    monkeypatch.setattr(progress, "FIRST_LINE_SECONDS", 0.05)
    lines = []
    with progress.elapsed("compiling", lines.append):
        block = np.ones(256 * 2**20 // 8)  # 256 MiB, touched, then freed before the block ends
        del block
        time.sleep(0.2)
    peak = float(lines[-1].split("peak resident memory ")[1].split(" GiB")[0])
    assert lines[-1].startswith("  compiling: done in ") and peak >= 0.25, lines[-1]
