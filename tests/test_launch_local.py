"""`bert-jax launch local`: a multi-host run rehearsed with N processes on this machine."""

import io
import os
import re
import subprocess
import sys
import time

from launch import local

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEMO_CONFIG = os.path.join(REPO_ROOT, "configs", "demo.py")


def fake_pretrain(script: str):
    """A pretrain_argv stand-in: runs `script` with PROCESS_ID set to the process id."""
    def argv(config, workdir, overrides, coordinator, num_processes, process_id):
        return [sys.executable, "-c", f"PROCESS_ID = {process_id}\n{script}"]
    return argv


def test_one_failing_process_stops_the_others(monkeypatch, tmp_path):
    # Each process says it is ready; process 1 fails once all three are up.
    (tmp_path / "markers").mkdir()
    script = (f"import os, sys, time\nmarkers = {str(tmp_path / 'markers')!r}\n"
              "print('ready', flush=True)\n"
              "open(os.path.join(markers, f'ready-{PROCESS_ID}'), 'w').close()\n"
              "while PROCESS_ID == 1 and len(os.listdir(markers)) < 3: time.sleep(0.05)\n"
              "if PROCESS_ID == 1: sys.exit(3)\n"
              "time.sleep(60)\n")
    monkeypatch.setattr(local, "pretrain_argv", fake_pretrain(script))
    config = tmp_path / "no_demo_data.py"  # no data.demo_dir: nothing to prepare first
    config.write_text("from bert_jax.run_config import base_config\n"
                      "def get_config():\n    return base_config('tiny')\n")
    out = io.StringIO()
    start = time.monotonic()
    status = local.run_local(str(config), str(tmp_path), [], num_processes=3, out=out)
    assert status == 3
    assert time.monotonic() - start < 40  # not the 60 s the survivors would sleep
    text = out.getvalue()
    assert "[process 0] ready" in text and "[process 2] ready" in text
    assert "process 1 exited with status 3; stopping the others" in text


def test_each_process_gets_its_own_devices_and_the_coordinator(monkeypatch, tmp_path):
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=8 --xla_dump_to=x")
    environment = local.process_environment(devices_per_process=4)
    assert environment["XLA_FLAGS"] == "--xla_dump_to=x --xla_force_host_platform_device_count=4"
    assert environment["JAX_PLATFORMS"] == "cpu"
    assert environment["JAX_CPU_COLLECTIVES_IMPLEMENTATION"] == "gloo"
    argv = local.pretrain_argv("configs/demo.py", "runs/x", ["--config.seed=1"],
                               "127.0.0.1:1234", 2, 1)
    assert argv[1:] == ["-m", "bert_jax.cli", "pretrain", "--config", "configs/demo.py",
                        "--workdir", "runs/x", "--coordinator-address", "127.0.0.1:1234",
                        "--num-processes", "2", "--process-id", "1", "--no-progress",
                        "--config.seed=1"]


def _launch_local(workdir, *overrides) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bert_jax.cli", "launch", "local", "--processes", "2",
         "--devices-per-process", "4", "--config", DEMO_CONFIG, "--workdir", str(workdir),
         *overrides],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=240)


def _checkpoint_steps(workdir) -> list[int]:
    directory = os.path.join(workdir, "checkpoints")
    return sorted(int(name) for name in os.listdir(directory) if name.isdigit())


def test_two_processes_train_to_a_checkpoint_and_resume(tmp_path):
    workdir = tmp_path / "run"
    small = ["--config.checkpoint.every_steps=2", "--config.log_every_steps=1",
             "--config.model.num_layers=1",
             "--config.eval.every_steps=1000", "--config.eval.num_batches=1",
             "--config.eval.batch_size=8", f"--config.data.demo_dir={tmp_path / 'demo_data'}"]
    first = _launch_local(workdir, "--config.num_train_steps=2", *small)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    for process_id in (0, 1):
        assert f"[process {process_id}] " in first.stdout
    assert "preparing the demo data in one process first" in first.stdout
    assert _checkpoint_steps(workdir) == [2]
    second = _launch_local(workdir, "--config.num_train_steps=4", *small)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert _checkpoint_steps(workdir)[-1] == 4
    assert re.search(r"resum\w* .*step 2", second.stdout, re.IGNORECASE), second.stdout[-3000:]
