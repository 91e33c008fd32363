"""`bert-jax launch check` without network or credentials: one line, in seconds, saying what
to set up (it hung about 60 s and ended in an aiohttp DNS traceback)."""

import socket
import time

import pytest

from bert_jax import cli
from launch import check
from test_launch import REPO_ROOT

JOB = "launch/jobs/bert_large_v4_64.toml"


@pytest.fixture
def no_emulator(monkeypatch, tmp_path):
    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))  # no gcloud login here
    monkeypatch.chdir(REPO_ROOT)


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]  # closed again when the block ends


@pytest.mark.parametrize("endpoint, reason", [
    (None, "ConnectionRefusedError"),  # a closed port: no route to Cloud Storage
    ("https://storage.invalid", "gaierror"),  # a name that does not resolve (no DNS)
])
def test_unreachable_storage_fails_in_one_line_within_seconds(no_emulator, monkeypatch, capsys,
                                                              endpoint, reason):
    monkeypatch.setattr(check, "STORAGE_ENDPOINT",
                        endpoint or f"http://127.0.0.1:{_closed_port()}")
    began = time.monotonic()
    assert cli.main(["launch", "check", JOB]) == 2
    seconds = time.monotonic() - began
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert seconds < check.REACH_SECONDS + 2, seconds
    assert line.startswith("bert-jax launch: error: launch check: cannot reach Cloud Storage at ")
    assert reason in line and "gs://my-bucket/" in line and "network" in line, line


def test_missing_credentials_say_how_to_log_in(no_emulator, monkeypatch, capsys):
    with socket.socket() as server:  # a reachable "Cloud Storage"
        server.bind(("127.0.0.1", 0))
        server.listen()
        monkeypatch.setattr(check, "STORAGE_ENDPOINT",
                            f"http://127.0.0.1:{server.getsockname()[1]}")
        connect = check._connect
        # Off a Cloud VM the metadata server does not answer; this machine may be on one.
        monkeypatch.setattr(check, "_connect", lambda host, port, timeout: (
            "no metadata server" if host == "169.254.169.254" else connect(host, port, timeout)))
        assert cli.main(["launch", "check", JOB]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "no Google Cloud credentials" in line
    assert "gcloud auth application-default login" in line


def test_jobs_with_local_paths_need_no_network(monkeypatch):
    from launch.job import load_job

    job = load_job(f"{REPO_ROOT}/{JOB}")
    local = job.__class__(**{**job.__dict__, "workdir": "/tmp/run", "overrides": (
        ("data.train_files", "/tmp/shards/*.tfrecord"),)})
    monkeypatch.setattr(check, "_connect", lambda *_: pytest.fail("tried the network"))
    check.check_storage_access([local])
