"""`aot`'s compile memory: the program's size as the compiler will hold it, the least memory a
compile of that size takes, the one-line refusal before compiling where this machine has
less, and the watch that stops a compile running the machine out of memory."""

import jax
import jax.numpy as jnp
import pytest

from bert_jax.compiler import aot, compile_memory
from bert_jax.errors import UserError
from bert_jax.run_config import base_config

MODULE = """module @jit_step attributes {mhlo.num_partitions = 1 : i32} {
  func.func public @main(%arg0: tensor<4xf32>) -> (tensor<4xf32>) {
    %0 = func.call @layer(%arg0) : (tensor<4xf32>) -> tensor<4xf32>
    %1 = call @layer(%0) : (tensor<4xf32>) -> tensor<4xf32>
    %2:2 = stablehlo.while(%iterArg = %1, %iterArg_1 = %c) : tensor<4xf32>, tensor<i32>
    cond {
      %3 = stablehlo.compare LT, %iterArg_1, %c, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %3 : tensor<i1>
    } do {
      %3 = func.call @layer(%iterArg) : (tensor<4xf32>) -> tensor<4xf32>
      stablehlo.return %3, %iterArg_1 : tensor<4xf32>, tensor<i32>
    }
    return %2#0 : tensor<4xf32>
  }
  func.func private @layer(%arg0: tensor<4xf32>) -> tensor<4xf32> {
    %0 = stablehlo.tanh %arg0 : tensor<4xf32>
    %1 = "stablehlo.all_reduce"(%0) ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %2 = stablehlo.add %a, %b : tensor<f32>
      stablehlo.return %2 : tensor<f32>
    }) : (tensor<4xf32>) -> tensor<4xf32>
    return %1 : tensor<4xf32>
  }
}
"""


def test_a_called_function_counts_at_every_call_and_a_loop_body_once():
    # @layer: tanh, all_reduce, its reducer's add and return, return = 5 operations.
    # main: 2 calls, while, compare and return in cond, call and return in the body, return
    # = 8, plus @layer at each of its 3 call sites.
    assert compile_memory.expanded_operations(MODULE) == 8 + 3 * 5


def test_a_scanned_stack_counts_one_layer_at_any_depth_and_an_unrolled_one_every_layer():
    def layer(x):
        return jnp.tanh(x @ x + 1.0)

    def unrolled(depth):
        def stack(x):
            for _ in range(depth):
                x = layer(x)
            return x.sum()
        return stack

    def scanned(depth):
        return lambda x: jax.lax.scan(lambda carry, _: (layer(carry), None), x, None,
                                      length=depth)[0].sum()

    def size(function):
        return compile_memory.program_operations(
            jax.jit(jax.grad(function)).lower(jnp.ones((8, 8))))

    assert size(scanned(48)) == size(scanned(12))
    per_layer = (size(unrolled(48)) - size(unrolled(12))) / 36
    assert per_layer >= 8  # forward: dot, add, tanh; backward: its gradient's ops
    assert size(unrolled(12)) == pytest.approx(size(unrolled(1)) + 11 * per_layer)


def test_the_lower_bound_grows_with_the_program_beyond_its_free_operations():
    bound = compile_memory.LowerBound(fixed_bytes=2e8, per_operation_bytes=5e4,
                                      free_operations=1_000)
    assert bound.bytes(0) == bound.bytes(1_000) == 200_000_000
    assert bound.bytes(11_000) == 700_000_000


# bench/compile_memory.py's measurements (AMD EPYC, 2026-12-02): operations, GiB the
# compile took; the bounds must stay under every one (re-measured there when they change).
MEASURED = {"tpu": [(8_289, 0.72), (7_814, 0.71), (2_834, 0.67), (2_890, 0.61),
                    (39_610, 4.79), (29_927, 3.36), (76_780, 5.81), (17_730, 5.17)],
            "gpu": [(8_289, 0.40), (38_587, 1.10)]}


@pytest.mark.parametrize("platform", ["tpu", "gpu"])
def test_every_measured_compile_took_at_least_its_bound(platform):
    for operations, gib in MEASURED[platform]:
        assert compile_memory.LOWER_BOUNDS[platform].bytes(operations) <= gib * compile_memory.GIB


def test_a_compile_that_cannot_fit_is_refused_in_one_line_with_both_figures():
    gib = compile_memory.GIB
    compile_memory.check(2 * gib, "the step", available=3 * gib)  # fits: nothing said
    with pytest.raises(UserError) as refused:
        compile_memory.check(int(6.5 * gib), "the train step for v5e:2x2", available=3 * gib)
    message = str(refused.value)
    assert "\n" not in message
    assert "compiling the train step for v5e:2x2 needs at least 6.5 GiB more memory" in message
    assert "this machine has 3.0 GiB available" in message and "--no-memory-check" in message


def test_what_lowering_already_took_is_not_asked_for_twice():
    # The process grew by at least what it holds now over 0 bytes: all of it counts as taken.
    import psutil

    resident = psutil.Process().memory_info().rss
    compile_memory.check(resident + 2**20, "the step", resident_before=1, available=2**21)


def test_available_memory_is_at_most_what_the_kernel_says_is_available():
    import psutil

    assert 0 < compile_memory.available_bytes() <= psutil.virtual_memory().total


def test_aot_refuses_before_compiling_and_compiles_with_the_check_off(monkeypatch):
    config = base_config("tiny")
    config.model.vocab_size = 128
    config.batch_size = 8
    config.data.seq_len, config.data.max_predictions = 16, 2
    compiled = []
    monkeypatch.setattr(aot, "_compile", lambda lowered: compiled.append(lowered) or (None, "x"))
    monkeypatch.setattr(compile_memory, "available_bytes", lambda: 1)
    monkeypatch.setattr(aot, "devices_per_chip", lambda device: 1)  # a CPU stands in
    with pytest.raises(UserError, match=r"needs at least .* GiB more memory .* 0\.0 GiB available"):
        aot.compile_train_step(config, jax.devices()[:1], topology="v5e:2x2")
    assert not compiled
    report = aot.compile_train_step(config, jax.devices()[:1], topology="v5e:2x2",
                                    memory_check=False)
    assert len(compiled) == 1 and report.program_operations > 100
    assert report.compile_bytes_lower_bound == compile_memory.LOWER_BOUNDS["tpu"].bytes(
        report.program_operations)


def test_the_watch_says_nothing_while_memory_is_kept_free_and_stops_below_it():
    available = compile_memory.available_bytes()
    assert compile_memory.watch("compiling", keep_free=1)() is None
    line = compile_memory.watch("compiling for v5e:2x2", keep_free=available * 4)()
    assert line.startswith("stopped compiling for v5e:2x2: it had taken ")
    assert "GiB left (under the " in line and "--no-memory-check" in line and "\n" not in line


GUARDED = """
import sys, time
from bert_jax.progress import interruptible
looks = []
def guard():
    looks.append(1)
    return "stopped compiling: out of room" if len(looks) == 3 else None
interruptible(lambda: time.sleep(30), "compiling", "aot", guard=guard)
print("not reached")
"""


def test_a_guard_that_speaks_ends_the_work_with_its_line():
    import subprocess
    import sys
    import time

    start = time.monotonic()
    run = subprocess.run([sys.executable, "-c", GUARDED], capture_output=True, text=True,
                         timeout=60)
    assert time.monotonic() - start < 20  # stopped at the third look, not after the 30 s
    assert run.returncode == 2 and "not reached" not in run.stdout
    assert "bert-jax aot: error: stopped compiling: out of room (after " in run.stderr
