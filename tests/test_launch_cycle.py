"""`bert-jax launch` driven end to end against a fake `gcloud` that records its calls.

The fake keeps the slice's state in a file (create -> READY, delete -> gone), answers
`describe` from it, and can be told to fail one verb with a given message, so the whole
create -> setup -> run -> logs -> status -> delete cycle, a quota error and a preemption
run without a cloud.
"""

import json
import os
import sys

import pytest

from bert_jax import cli
from test_launch import REPO_ROOT, write_job

FAKE_GCLOUD = """\
#!{python}
import json, os, sys
root = {root!r}
argv = sys.argv[1:]
with open(os.path.join(root, "calls.jsonl"), "a") as file:
    file.write(json.dumps(argv) + "\\n")
failure_path = os.path.join(root, "fail.json")
if os.path.exists(failure_path):
    failure = json.load(open(failure_path))
    if failure["when"] in argv:
        sys.stderr.write(failure["stderr"] + "\\n")
        sys.exit(failure["exit"])
state_path = os.path.join(root, "state.json")
state = json.load(open(state_path)) if os.path.exists(state_path) else None
if argv[0] == "storage":
    print("  1234  2026-11-22T10:00:00Z  " + argv[-1] + "t1v-n-1234-w-0.log")
    sys.exit(0)
group, verb = argv[2], argv[3]
if verb == "create":
    state = {{"node": "READY", "queued": "ACTIVE" if group == "queued-resources" else None}}
elif verb == "delete":
    state = None
elif verb == "describe":
    if state is None:
        sys.stderr.write("ERROR: (gcloud) NOT_FOUND: Resource was not found\\n")
        sys.exit(1)
    print(state["queued"] if group == "queued-resources" else state["node"])
elif verb == "ssh":
    print("worker output: step 100 loss 7.5")
json.dump(state, open(state_path, "w"))
"""

QUOTA_ERROR = (
    "ERROR: (gcloud.compute.tpus.tpu-vm.create) {\"code\": 429, \"message\": \"Quota limit "
    "'TPUV4sPodPerProjectPerZoneForTPUAPI' has been exceeded.\", \"status\": "
    "\"RESOURCE_EXHAUSTED\"}")


class FakeGcloud:
    def __init__(self, root):
        self.root = root
        bin_dir = root / "bin"
        bin_dir.mkdir()
        script = bin_dir / "gcloud"
        script.write_text(FAKE_GCLOUD.format(python=sys.executable, root=str(root)))
        script.chmod(0o755)
        self.bin_dir = str(bin_dir)

    def calls(self) -> list[list[str]]:
        path = self.root / "calls.jsonl"
        calls = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
        path.unlink(missing_ok=True)
        return calls

    def verbs(self) -> list[str]:
        """Each call as "group verb [--worker=...]", e.g. "tpu-vm ssh --worker=all"."""
        return [" ".join(call[:2] if call[0] == "storage" else
                         [call[2], call[3]] + [a for a in call if a.startswith("--worker")])
                for call in self.calls()]

    def set_state(self, node: str, queued: str | None = None) -> None:
        (self.root / "state.json").write_text(json.dumps({"node": node, "queued": queued}))

    def fail(self, when: str, stderr: str, exit_code: int = 1) -> None:
        (self.root / "fail.json").write_text(
            json.dumps({"when": when, "stderr": stderr, "exit": exit_code}))


@pytest.fixture
def fake_gcloud(tmp_path, monkeypatch):
    fake = FakeGcloud(tmp_path)
    monkeypatch.chdir(REPO_ROOT)  # job files name configs/... relative to the repository root
    monkeypatch.setenv("PATH", f"{fake.bin_dir}{os.pathsep}{os.environ['PATH']}")
    return fake


def launch(action: str, job: str, *extra: str) -> int:
    # The job's gs:// data does not exist here: `launch check` has its own tests.
    skip = ["--skip-check"] if action in ("create", "run") else []
    return cli.main(["launch", action, job, *skip, *extra])


def test_whole_cycle(tmp_path, fake_gcloud, capfd):
    job = write_job(tmp_path, "v4")
    assert launch("create", job) == 0
    assert fake_gcloud.verbs() == ["tpu-vm create"]
    assert launch("setup", job) == 0
    assert fake_gcloud.verbs() == ["tpu-vm ssh --worker=all"]
    assert launch("run", job) == 0
    assert fake_gcloud.verbs() == ["tpu-vm describe", "tpu-vm ssh --worker=all"]
    assert launch("logs", job, "--worker", "3") == 0
    assert fake_gcloud.verbs() == ["tpu-vm describe", "tpu-vm ssh --worker=3"]
    assert "step 100 loss 7.5" in capfd.readouterr().out
    assert launch("status", job) == 0
    assert capfd.readouterr().out.startswith("bert-v4: READY (v4-64, 8 workers")
    assert launch("stop", job) == 0
    assert fake_gcloud.verbs() == ["tpu-vm describe", "tpu-vm ssh --worker=all"]
    assert launch("delete", job) == 0
    assert fake_gcloud.calls()[-1] == [
        "compute", "tpus", "tpu-vm", "delete", "bert-v4", "--zone=us-central2-b",
        "--project=proj", "--quiet"]
    assert launch("status", job) == 0
    assert "bert-v4: NOT_FOUND" in capfd.readouterr().out
    fake_gcloud.calls()
    assert launch("logs", job) == 0  # the slice is gone: the copies in the workdir remain
    assert fake_gcloud.verbs() == ["tpu-vm describe", "storage ls"]
    assert "gs://bucket/bert-v4/logs/t1v-n-1234-w-0.log" in capfd.readouterr().out


def test_quota_error_exits_nonzero_with_advice(tmp_path, fake_gcloud, capfd):
    job = write_job(tmp_path, "v4")
    fake_gcloud.fail("create", QUOTA_ERROR)
    assert launch("create", job) == 2
    error = capfd.readouterr().err
    assert "exit code 1" in error and "RESOURCE_EXHAUSTED" in error
    for advice in ("spot = true", "queued = true", "another zone"):
        assert advice in error
    assert fake_gcloud.verbs() == ["tpu-vm create"]  # nothing else was attempted


def test_run_after_preemption_recreates_and_resumes(tmp_path, fake_gcloud, capfd):
    job = write_job(tmp_path, "v4")
    fake_gcloud.set_state("PREEMPTED")
    assert launch("status", job) == 0
    assert "bert-v4: PREEMPTED" in capfd.readouterr().out
    fake_gcloud.calls()
    assert launch("run", job) == 0
    # The same start command as a first run: pretrain resumes from the gs:// workdir.
    assert fake_gcloud.verbs() == ["tpu-vm describe", "tpu-vm delete", "tpu-vm create",
                                   "tpu-vm ssh --worker=all", "tpu-vm ssh --worker=all"]
    assert "resuming from gs://bucket/bert-v4" in capfd.readouterr().err
    assert launch("status", job) == 0
    assert "bert-v4: READY" in capfd.readouterr().out


def test_queued_spot_preemption_requeues(tmp_path, fake_gcloud):
    job = write_job(tmp_path, "v5e")
    assert launch("create", job) == 0
    assert fake_gcloud.verbs() == ["queued-resources create", "queued-resources describe"]
    fake_gcloud.set_state("PREEMPTED", queued="SUSPENDED")
    assert launch("run", job) == 0
    assert fake_gcloud.verbs() == [
        "queued-resources describe", "queued-resources delete", "queued-resources create",
        "queued-resources describe", "tpu-vm ssh --worker=all", "tpu-vm ssh --worker=all"]


def test_run_never_rents_a_slice_that_was_not_created(tmp_path, fake_gcloud, capfd):
    job = write_job(tmp_path, "v4")
    assert launch("run", job) == 2
    assert "launch create" in capfd.readouterr().err
    assert fake_gcloud.verbs() == ["tpu-vm describe"]


def test_missing_gcloud_is_a_clear_error(tmp_path, monkeypatch, capfd):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert launch("create", write_job(tmp_path, "v4")) == 2
    assert "gcloud was not found on PATH" in capfd.readouterr().err


def test_unknown_override_fails_before_any_gcloud_call(tmp_path, fake_gcloud, capfd):
    job = write_job(tmp_path, "v4", extra='"optimizer.learning_rat" = 1e-4\n')
    assert launch("create", job) == 2
    assert "unknown config key 'optimizer.learning_rat'" in capfd.readouterr().err
    assert fake_gcloud.verbs() == []
