"""glibc's tunables for CPU steps (bert_jax/cpu_memory.py): when a process is re-executed
with them, and that they do what they are there for: no page faults for a freed buffer."""

import os
import subprocess
import sys

import pytest

from bert_jax import cpu_memory

REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QUALIFIES = dict(glibc=(2, 36), accelerator=False)
HOST_REASON = cpu_memory.reason_to_leave_alone({"JAX_PLATFORMS": "cpu"},
                                               cpu_memory.glibc_version(), accelerator=False)


@pytest.mark.parametrize("environ, changes, expected", [
    ({}, {}, None),
    ({"JAX_PLATFORMS": "cpu"}, {"accelerator": True}, None),  # the user asked for the CPU
    ({}, {"accelerator": True}, "an accelerator holds the step's memory"),
    ({"JAX_PLATFORMS": "tpu"}, {}, "an accelerator holds the step's memory"),
    ({cpu_memory.OPT_OUT: "system"}, {}, f"{cpu_memory.OPT_OUT}=system"),
    ({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"}, {},
     "the environment chooses: GLIBC_TUNABLES"),
    ({"MALLOC_ARENA_MAX": "1"}, {}, "the environment chooses: MALLOC_ARENA_MAX"),
    ({"LD_PRELOAD": "/usr/lib/libtcmalloc_minimal.so.4"}, {},
     "the environment chooses: LD_PRELOAD=/usr/lib/libtcmalloc_minimal.so.4"),
    ({}, {"glibc": (2, 25)}, "not glibc 2.26 or later"),  # no tunables before 2.26
    ({}, {"glibc": None}, "not glibc 2.26 or later"),  # musl, macOS
    ({"GLIBC_TUNABLES": cpu_memory.TUNABLE}, {}, None),  # already running with it
])
def test_the_tunable_is_set_only_where_it_helps_and_the_user_chose_nothing(environ, changes,
                                                                          expected):
    assert cpu_memory.reason_to_leave_alone(environ, **{**QUALIFIES, **changes}) == expected


def _run(code: str, **environ) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items()
           if key not in ("GLIBC_TUNABLES", cpu_memory.OPT_OUT)}
    env.update(PYTHONPATH=REPOSITORY, JAX_PLATFORMS="cpu", **environ)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.skipif(HOST_REASON is not None, reason=f"this host does not qualify: {HOST_REASON}")
def test_a_process_is_re_executed_once_with_the_tunable_and_keeps_its_arguments():
    code = ("import os, sys\n"
            "print('start', sys.argv[1:], flush=True)\n"
            "from bert_jax import cpu_memory\n"
            "cpu_memory.relaunch_tuned(sys.orig_argv)\n"
            "print(os.environ.get('GLIBC_TUNABLES'), cpu_memory.state())\n")
    result = subprocess.run([sys.executable, "-c", code, "--an", "argument"],
                            env=dict(os.environ, PYTHONPATH=REPOSITORY, JAX_PLATFORMS="cpu"),
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    # Printed twice: once before the re-execution, once in it; then never again.
    assert lines[:2] == ["start ['--an', 'argument']"] * 2, lines
    tuned = dict(os.environ, GLIBC_TUNABLES=cpu_memory.TUNABLE, JAX_PLATFORMS="cpu")
    assert lines[2] == f"{cpu_memory.TUNABLE} {cpu_memory.state(tuned)}", lines
    assert "freed memory kept" in lines[2], lines
    opted_out = _run("import os, sys\nfrom bert_jax import cpu_memory\n"
                     "cpu_memory.relaunch_tuned(sys.orig_argv)\n"
                     "print(os.environ.get('GLIBC_TUNABLES'))\n",
                     **{cpu_memory.OPT_OUT: "system"})
    assert opted_out.stdout.split() == ["None"], opted_out.stderr


# malloc, touch and free 256 MiB as XLA's CPU runtime does a step's temporaries (numpy
# would not do: it asks for huge pages for its own large arrays).
_FAULTS = ("import ctypes, resource\n"
           "libc = ctypes.CDLL(None)\n"
           "libc.malloc.restype = ctypes.c_void_p\n"
           "size = 256 << 20\n"
           "def step():\n"
           "    buffer = libc.malloc(ctypes.c_size_t(size))\n"
           "    ctypes.memset(buffer, 1, size)\n"
           "    libc.free(ctypes.c_void_p(buffer))\n"
           "step()\n"  # a first round: the library and the heap warmed up
           "before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt\n"
           "for _ in range(8):\n"
           "    step()\n"
           "print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)\n")


@pytest.mark.skipif(HOST_REASON is not None, reason=f"this host does not qualify: {HOST_REASON}")
def test_with_the_tunables_a_freed_buffer_is_reused_without_page_faults():
    """8 rounds of a 256 MiB buffer. glibc's defaults map and unmap it each time: 65,536
    faults of 4 KiB pages a round, 524k in all (a little less where the kernel gives huge
    pages). With the tunables the first round's heap is reused: a round takes no fresh page,
    and the few faults left are the interpreter's own (well under one round's 65k)."""
    plain = int(_run(_FAULTS, **{cpu_memory.OPT_OUT: "system"}).stdout)
    tuned = int(_run(_FAULTS, GLIBC_TUNABLES=cpu_memory.TUNABLE).stdout)
    assert plain >= 8 * 65_536 * 0.5, plain
    assert tuned < 1_000, (tuned, plain)
