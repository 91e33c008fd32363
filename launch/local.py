"""A pod run rehearsed on one machine: N `bert-jax pretrain` processes, M CPU devices each.

Each process is one "host" of a multi-host run: it joins jax.distributed through a
coordinator on a free 127.0.0.1 port, sees M simulated CPU devices of its own
(`--xla_force_host_platform_device_count`), exchanges gradients with the others over
gloo, reads its own share of the data and writes its part of each checkpoint. So the
code paths a TPU pod exercises (process ids, global arrays from per-host batches,
multi-process checkpoints, resume) run here first, where a mistake costs seconds.
"""

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import TextIO

from bert_jax.errors import UserError

# Seconds a process gets to exit after SIGTERM before it is killed.
TERMINATE_GRACE_SECONDS = 10.0
_DEVICE_COUNT_FLAG = re.compile(r"--xla_force_host_platform_device_count=\S*")


def free_port() -> int:
    """A TCP port that nothing listens on now (the coordinator binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def process_environment(devices_per_process: int) -> dict[str, str]:
    """The environment of one simulated host: CPU only, M devices, gloo collectives."""
    env = dict(os.environ)
    inherited = _DEVICE_COUNT_FLAG.sub("", env.get("XLA_FLAGS", "")).strip()
    env["XLA_FLAGS"] = (
        f"{inherited} --xla_force_host_platform_device_count={devices_per_process}").strip()
    # CPU only: an installed libtpu would otherwise be probed (and its lock file taken).
    env["JAX_PLATFORMS"] = "cpu"
    env["JAX_CPU_COLLECTIVES_IMPLEMENTATION"] = "gloo"
    env["PYTHONUNBUFFERED"] = "1"
    return env


def pretrain_argv(config: str, workdir: str, overrides: list[str], coordinator: str,
                  num_processes: int, process_id: int) -> list[str]:
    """The command of process `process_id`: the same pretrain command a pod worker runs,
    with the coordinator spelled out (a TPU VM finds it in its metadata instead)."""
    return [sys.executable, "-m", "bert_jax.cli", "pretrain", "--config", config,
            "--workdir", workdir, "--coordinator-address", coordinator,
            "--num-processes", str(num_processes), "--process-id", str(process_id),
            "--no-progress", *overrides]  # a progress bar's redraws garble prefixed lines


# Run once, before the N processes start: builds configs/demo.py's data (vocabulary and
# shards). Built by N processes at once, the same directory would be written N times over.
_PREPARE_DATA = """
import sys
from bert_jax.errors import UserError
from bert_jax.run_config import load_run_config
from bert_jax.tasks.pretraining_data import prepare_data
try:
    prepare_data(load_run_config(sys.argv[1], sys.argv[2:]))
except UserError as error:
    sys.exit(f"bert-jax launch local: error: {error}")
"""


def _prepare_demo_data(config: str, overrides: list[str], env: dict, out: TextIO) -> int:
    """Checks the config and its overrides (UserError naming a bad key), then builds the
    demo data in one process if the config asks for it; returns that process's status."""
    from bert_jax.run_config import load_run_config  # ml_collections only, no JAX

    if not load_run_config(config, overrides).data.demo_dir:
        return 0
    out.write("bert-jax launch local: preparing the demo data in one process first\n")
    result = subprocess.run([sys.executable, "-c", _PREPARE_DATA, config, *overrides],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out.write(result.stdout)
    return result.returncode


def _copy_output(process: subprocess.Popen, prefix: str, out: TextIO, lock: threading.Lock):
    for line in process.stdout:
        with lock:
            out.write(f"{prefix}{line}")
            out.flush()


def _signal_group(process: subprocess.Popen, signum: int) -> None:
    try:
        os.killpg(process.pid, signum)
    except ProcessLookupError:  # it has just exited by itself
        pass


def _terminate(processes: list[subprocess.Popen]) -> None:
    """SIGTERM to every live process group (pretrain checkpoints on it), then SIGKILL."""
    for process in processes:
        if process.poll() is None:
            _signal_group(process, signal.SIGTERM)
    deadline = time.monotonic() + TERMINATE_GRACE_SECONDS
    for process in processes:
        try:
            process.wait(timeout=max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            _signal_group(process, signal.SIGKILL)
            process.wait()


def _wait_all(processes: list[subprocess.Popen], out: TextIO) -> int:
    """Waits for every process; the first one to fail takes the others down with it."""
    while True:
        codes = [process.poll() for process in processes]
        failed = [(index, code) for index, code in enumerate(codes) if code not in (None, 0)]
        if failed:
            index, code = failed[0]
            out.write(f"bert-jax launch local: process {index} exited with status {code}; "
                      "stopping the others\n")
            _terminate(processes)
            return code if code > 0 else 1
        if all(code == 0 for code in codes):
            return 0
        time.sleep(0.2)


def run_local(config: str, workdir: str, overrides: list[str], num_processes: int = 2,
              devices_per_process: int = 4, out: TextIO | None = None) -> int:
    """Runs the rehearsal; returns 0 when every process finished, else a failing status."""
    out = out or sys.stdout
    if num_processes < 1 or devices_per_process < 1:
        raise UserError(f"--processes ({num_processes}) and --devices-per-process "
                        f"({devices_per_process}) must be at least 1")
    env = process_environment(devices_per_process)
    status = _prepare_demo_data(config, overrides, env, out)
    if status:
        return status
    coordinator = f"127.0.0.1:{free_port()}"
    out.write(f"bert-jax launch local: {num_processes} processes x {devices_per_process} CPU "
              f"devices, coordinator {coordinator}, workdir {workdir}\n")
    processes, copiers, lock = [], [], threading.Lock()
    try:
        for process_id in range(num_processes):
            argv = pretrain_argv(config, workdir, overrides, coordinator, num_processes,
                                 process_id)
            process = subprocess.Popen(
                argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                start_new_session=True)  # its own process group, so it can be stopped whole
            processes.append(process)
            copier = threading.Thread(target=_copy_output, daemon=True,
                                      args=(process, f"[process {process_id}] ", out, lock))
            copier.start()
            copiers.append(copier)
        status = _wait_all(processes, out)
    except BaseException:  # Ctrl-C or a failed start: leave no orphaned trainer behind
        _terminate(processes)
        raise
    for copier in copiers:
        copier.join(timeout=5)
    return status
