"""glibc's huge-page tunable for CPU steps (bert_jax/cpu_memory.py): when a process is
re-executed with it, and that it does what it is there for, fewer page faults a step."""

import os
import subprocess
import sys

import pytest

from bert_jax import cpu_memory

REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QUALIFIES = dict(glibc=(2, 36), huge_pages="madvise", accelerator=False)
HOST_REASON = cpu_memory.reason_to_leave_alone(
    {"JAX_PLATFORMS": "cpu"}, cpu_memory.glibc_version(), cpu_memory.huge_page_mode(),
    accelerator=False)


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
    ({}, {"glibc": (2, 34)}, "not glibc 2.35 or later"),
    ({}, {"glibc": None}, "not glibc 2.35 or later"),  # musl, macOS
    ({}, {"huge_pages": "never"}, "the kernel's transparent huge pages are never"),
    ({}, {"huge_pages": None}, "the kernel's transparent huge pages are absent"),
    ({"GLIBC_TUNABLES": cpu_memory.TUNABLE}, {}, None),  # already running with it
])
def test_the_tunable_is_set_only_where_it_helps_and_the_user_chose_nothing(environ, changes,
                                                                          expected):
    assert cpu_memory.reason_to_leave_alone(environ, **{**QUALIFIES, **changes}) == expected


def test_the_kernels_huge_page_mode_is_the_bracketed_word(tmp_path):
    (tmp_path / "enabled").write_text("always [madvise] never\n")
    assert cpu_memory.huge_page_mode(str(tmp_path / "enabled")) == "madvise"
    assert cpu_memory.huge_page_mode(str(tmp_path / "absent")) is None


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
    assert lines[2].startswith(f"{cpu_memory.TUNABLE} malloc: GLIBC_TUNABLES="), lines
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
def test_the_tunable_takes_a_freed_buffers_pages_in_huge_pages():
    """8 rounds of a 256 MiB buffer: glibc maps and unmaps it each time. In 4 KiB pages
    that is 65,536 faults a round (524k in all); in 2 MiB huge pages 128 a round, and the
    kernel falls back to small pages only where it has no free huge page, so the bound is
    a factor of 16, far from both."""
    plain = int(_run(_FAULTS, **{cpu_memory.OPT_OUT: "system"}).stdout)
    tuned = int(_run(_FAULTS, GLIBC_TUNABLES=cpu_memory.TUNABLE).stdout)
    assert plain >= 8 * 65_536 * 0.9, plain
    assert tuned * 16 < plain, (tuned, plain)
