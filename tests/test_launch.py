"""`launch/`: job files, the exact gcloud argv lists, quoting of remote commands, no JAX."""

import glob
import json
import os
import shlex
import subprocess
import sys
import textwrap

import pytest

from bert_jax import cli
from bert_jax.errors import UserError
from launch import gcloud, remote
from launch.job import load_job
from launch.tpu_types import parse_accelerator_type

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

JOB_TEMPLATE = """\
name = "{name}"
project = "proj"
zone = "{zone}"
accelerator_type = "{accelerator}"
runtime_version = "{runtime}"
spot = {spot}
queued = {queued}
workdir = "gs://bucket/{name}"

[code]
repository = "https://github.com/me/bert-jax.git"
revision = "v1.0"

[train]
config = "configs/bert_large.py"

[train.overrides]
"batch_size" = 256
"data.train_files" = "gs://bucket/shards/*.tfrecord"
"""

JOBS = {
    "v3": dict(name="bert-v3", zone="europe-west4-a", accelerator="v3-64",
               runtime="tpu-ubuntu2204-base", spot="false", queued="false"),
    "v4": dict(name="bert-v4", zone="us-central2-b", accelerator="v4-64",
               runtime="tpu-ubuntu2204-base", spot="true", queued="false"),
    "v5e": dict(name="bert-v5e", zone="us-east5-a", accelerator="v5e-256",
                runtime="v2-alpha-tpuv5-lite", spot="true", queued="true"),
}


def write_job(directory, key: str, extra: str = "", first: str = "", **changes) -> str:
    """A job file from JOBS[key]; `first` goes at the top level, `extra` after every table."""
    values = dict(JOBS[key], **changes)
    path = os.path.join(directory, f"{values['name']}.toml")
    with open(path, "w") as file:
        file.write(first + JOB_TEMPLATE.format(**values) + extra)
    return path


def test_create_argv_for_v3_v4_v5e(tmp_path):
    v3, v4, v5e = (load_job(write_job(tmp_path, key)) for key in ("v3", "v4", "v5e"))
    assert gcloud.create_node(v3) == [
        "gcloud", "compute", "tpus", "tpu-vm", "create", "bert-v3", "--zone=europe-west4-a",
        "--project=proj", "--accelerator-type=v3-64", "--version=tpu-ubuntu2204-base"]
    assert gcloud.create_node(v4) == [
        "gcloud", "compute", "tpus", "tpu-vm", "create", "bert-v4", "--zone=us-central2-b",
        "--project=proj", "--accelerator-type=v4-64", "--version=tpu-ubuntu2204-base", "--spot"]
    assert gcloud.create_queued(v5e) == [
        "gcloud", "compute", "tpus", "queued-resources", "create", "bert-v5e",
        "--zone=us-east5-a", "--project=proj", "--accelerator-type=v5litepod-256",
        "--runtime-version=v2-alpha-tpuv5-lite", "--node-id=bert-v5e", "--spot"]
    assert (v3.num_workers, v4.num_workers, v5e.num_workers) == (8, 8, 64)


def test_other_argv_for_v4_and_v5e(tmp_path):
    v4, v5e = load_job(write_job(tmp_path, "v4")), load_job(write_job(tmp_path, "v5e"))
    assert gcloud.describe_node(v4) == [
        "gcloud", "compute", "tpus", "tpu-vm", "describe", "bert-v4", "--zone=us-central2-b",
        "--project=proj", "--format=value(state)"]
    assert gcloud.describe_queued(v5e) == [
        "gcloud", "compute", "tpus", "queued-resources", "describe", "bert-v5e",
        "--zone=us-east5-a", "--project=proj", "--format=value(state.state)"]
    assert gcloud.delete_node(v4) == [
        "gcloud", "compute", "tpus", "tpu-vm", "delete", "bert-v4", "--zone=us-central2-b",
        "--project=proj", "--quiet"]
    assert gcloud.delete_queued(v5e) == [
        "gcloud", "compute", "tpus", "queued-resources", "delete", "bert-v5e",
        "--zone=us-east5-a", "--project=proj", "--force", "--quiet"]
    assert gcloud.ssh(v4, "uptime") == [
        "gcloud", "compute", "tpus", "tpu-vm", "ssh", "bert-v4", "--zone=us-central2-b",
        "--project=proj", "--worker=all", "--command=uptime"]


@pytest.mark.parametrize("text, chips, workers", [
    ("v2-8", 4, 1), ("v3-8", 4, 1), ("v3-64", 32, 8), ("v3-2048", 1024, 256), ("v4-8", 4, 1),
    ("v4-64", 32, 8), ("v5litepod-8", 8, 1), ("v5litepod-16", 16, 4), ("v5e-256", 256, 64),
    ("v5p-8", 4, 1), ("v5p-128", 64, 16), ("v6e-4", 4, 1), ("v6e-256", 256, 64)])
def test_accelerator_types(text, chips, workers):
    accelerator = parse_accelerator_type(text)
    assert (accelerator.num_chips, accelerator.num_workers) == (chips, workers)


@pytest.mark.parametrize("text", ["v4", "v9-8", "tpu-64", "v5litepod-18", "v3-0", "v4-7"])
def test_bad_accelerator_types(text):
    with pytest.raises(UserError, match="accelerator"):
        parse_accelerator_type(text)


@pytest.mark.parametrize("first, changes, message", [
    ("colour = 'red'\n", {}, r"unknown key\(s\) \['colour'\]"),
    ("", {"spot": "'yes'"}, "key 'spot' must be true or false"),
    ("", {"accelerator": "v4-7"}, "accelerator_type"),
    ("", {"name": "Bert_Large"}, "key 'name'"),
])
def test_bad_job_files_name_file_and_key(tmp_path, first, changes, message):
    path = write_job(tmp_path, "v4", first=first, **changes)
    with pytest.raises(UserError, match=message) as error:
        load_job(path)
    assert path in str(error.value)


def test_job_needs_gs_workdir_and_known_section_keys(tmp_path):
    path = write_job(tmp_path, "v4")
    text = open(path).read()
    for old, new, message in [('workdir = "gs://bucket/', 'workdir = "/tmp/', "gs://"),
                              ('revision = "v1.0"', 'branch = "v1.0"', r"\[code\].*'branch'")]:
        with open(path, "w") as file:
            file.write(text.replace(old, new))
        with pytest.raises(UserError, match=message):
            load_job(path)


def test_shipped_job_files_load():
    paths = sorted(glob.glob(os.path.join(REPO_ROOT, "launch", "jobs", "*.toml")))
    assert paths
    for path in paths:
        job = load_job(path)
        assert job.workdir.startswith("gs://") and job.num_workers >= 1


def test_dry_run_prints_pasteable_commands(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # configs/bert_large.py is found as pretrain finds it
    path = write_job(tmp_path, "v5e")
    assert cli.main(["launch", "create", path, "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == [shlex.join(gcloud.create_queued(load_job(path)))]
    assert shlex.split(lines[0])[:5] == ["gcloud", "compute", "tpus", "queued-resources", "create"]
    assert cli.main(["launch", "run", path, "--dry-run"]) == 0
    captured = capsys.readouterr()
    assert "nothing was started" in captured.err and "started on" not in captured.err
    # The remote script is printed as a here-document; bash turns it back into the argv.
    printed = captured.out.replace("gcloud", shlex.join(
        [sys.executable, "-c", "import json, sys; print(json.dumps(sys.argv[1:]))"]), 1)
    argv = ["gcloud"] + json.loads(subprocess.run(["bash", "-c", printed], check=True,
                                                  capture_output=True, text=True).stdout)
    assert argv[:6] == ["gcloud", "compute", "tpus", "tpu-vm", "ssh", "bert-v5e"]
    assert argv[8:] == ["--worker=all", "--command=" + remote.start_script(load_job(path))]
    missing = tmp_path / "missing.toml"
    missing.write_text(open(path).read().replace("configs/bert_large.py", "mine/large.py"))
    assert cli.main(["launch", "create", str(missing), "--dry-run"]) == 2
    assert capsys.readouterr().err.startswith(f"bert-jax launch: error: {missing}: [train] "
                                              "config: mine/large.py: run config file not found")


FAKE_TRAINER = """\
#!{python}
import json, os, sys, time
with open(os.path.join(os.environ["HOME"], "trainer_argv.json"), "w") as file:
    json.dump({{"argv": sys.argv[1:], "env": os.environ.get("SECRET_MODE")}}, file)
print("step 1 loss 10.0", flush=True)
"""


def test_start_script_runs_detached_with_exact_argv(tmp_path):
    """The start script, run by a real bash as a worker would, hands the pretrain command
    exactly the job's values, however hostile their characters."""
    hostile = "it's $(touch pwned) `id` ; rm -rf ~ \"x\""
    extra = f"\n[env]\nSECRET_MODE = {json.dumps(hostile)}\n"
    path = write_job(tmp_path, "v4", extra=extra)
    text = open(path).read().replace('"batch_size" = 256',
                                     f'"batch_size" = 256\n"data.note" = {json.dumps(hostile)}')
    with open(path, "w") as file:
        file.write(text)
    job = load_job(path)
    home = tmp_path / "home"
    trainer = home / "bert-jax" / ".venv" / "bin" / "bert-jax"
    trainer.parent.mkdir(parents=True)
    trainer.write_text(FAKE_TRAINER.format(python=sys.executable))
    trainer.chmod(0o755)
    bin_dir = tmp_path / "bin"  # `gcloud storage cp` of the log: a no-op here
    bin_dir.mkdir()
    (bin_dir / "gcloud").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "gcloud").chmod(0o755)
    env = dict(os.environ, HOME=str(home), PATH=f"{bin_dir}:{os.environ['PATH']}")
    command = gcloud.ssh(job, remote.start_script(job))[-1].removeprefix("--command=")
    result = subprocess.run(["bash", "-c", command], env=env, cwd=tmp_path, text=True,
                            capture_output=True, timeout=30)
    assert result.returncode == 0, result.stderr
    assert "started bert-v4" in result.stdout
    record = home / "trainer_argv.json"
    log = home / "bert-jax-logs" / "bert-v4.log"
    for _ in range(100):  # the job runs detached: wait for it to finish
        if record.exists() and "exited with status 0" in (log.read_text() if log.exists() else ""):
            break
        subprocess.run(["sleep", "0.1"])
    recorded = json.loads(record.read_text())
    assert recorded["argv"] == [
        "pretrain", "--config", "configs/bert_large.py", "--workdir", "gs://bucket/bert-v4",
        "--no-progress", "--config.batch_size=256", f"--config.data.note={hostile}",
        "--config.data.train_files=gs://bucket/shards/*.tfrecord"]
    assert recorded["env"] == hostile
    assert "step 1 loss 10.0" in log.read_text()
    assert not (tmp_path / "pwned").exists() and not (home / "pwned").exists()


def test_launch_imports_no_jax():
    code = textwrap.dedent("""
        import sys
        import bert_jax.commands.launch, launch.actions, launch.local, launch.job
        heavy = sorted(name for name in ("jax", "flax", "tensorflow", "torch") if name in sys.modules)
        print(heavy)
    """)
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
