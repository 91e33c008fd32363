"""One training run per work directory: an exclusive lock that names its holder.

Two runs on one work directory would both resume from, and save into, the same
checkpoints, leaving a silent mix of the two. So process 0 of a run takes the lock before
it writes anything there, and a second run is refused with a message naming the first.

- A local directory: the `filelock` package's flock on WORKDIR/.run_lock, which the kernel
  releases when the holder exits however it exits (kill -9 included); the file names the
  holder.
- Object storage (`gs://`) has no locks: a lease object WORKDIR/run_lease.json names the
  holder and is renewed every RENEW_SECONDS by a background thread. Another run is refused
  while the lease is fresh and takes over one that has not been renewed for LEASE_SECONDS
  (its holder died without releasing it, e.g. a preempted slice).
"""

import datetime
import fcntl
import json
import os
import socket
import threading
import time
import uuid

import filelock

from bert_jax.storage import files
from bert_jax.errors import UserError
from bert_jax.storage.storage_errors import reported

LOCK_NAME = ".run_lock"
LEASE_NAME = "run_lease.json"
LEASE_SECONDS = 300.0  # a lease not renewed for this long is a dead run's
RENEW_SECONDS = 60.0


def _holder() -> dict:
    return dict(host=socket.gethostname(), pid=os.getpid(), token=uuid.uuid4().hex,
                started=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                renewed=time.time())


def _refusal(workdir: str, holder: dict, where: str, extra: str = "") -> UserError:
    return UserError(
        f"{workdir} is in use by another training run: pid {holder.get('pid', '?')} on host "
        f"{holder.get('host', '?')}, started {holder.get('started', '?')} ({where}{extra}). "
        "Two runs on one work directory would mix their checkpoints: wait for it to finish, "
        "stop it, or use another --workdir")


def running_holder(workdir: str) -> dict | None:
    """Who holds `workdir` now (the holder a refusal would name: pid, host, started), or
    None when no run does: for a reader of a run's checkpoints, to say the run is still going.

    Locally a shared, non-blocking flock on the lock file, which fails exactly while a run
    holds its exclusive one (held for microseconds; flock has no query without taking it);
    on object storage a lease renewed within LEASE_SECONDS."""
    if files.is_remote(workdir):
        lease = RunLock(workdir)._read_lease()
        fresh = lease is not None and time.time() - float(lease.get("renewed", 0)) < LEASE_SECONDS
        return lease if fresh else None
    path = os.path.join(workdir, LOCK_NAME)
    try:
        descriptor = os.open(path, os.O_RDONLY)
    except OSError:
        return None  # no run has ever taken it (or it cannot be read: say nothing)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        text = os.pread(descriptor, 4096, 0).decode("utf-8", "replace")
        try:
            return json.loads(text) if text.strip() else {}
        except ValueError:
            return {}
    finally:
        os.close(descriptor)  # releases the shared lock, if it was taken
    return None


class RunLock:
    """`with RunLock(workdir):` holds the work directory for one run (see module doc)."""

    def __init__(self, workdir: str, lease: bool | None = None,
                 lease_seconds: float = LEASE_SECONDS, renew_seconds: float = RENEW_SECONDS):
        self.workdir = workdir
        self.lease = files.is_remote(workdir) if lease is None else lease
        self.lease_seconds, self.renew_seconds = lease_seconds, renew_seconds
        self._local_lock = None
        self._stop = threading.Event()
        self._renewer = None
        self._holder = _holder()

    # -- a local directory: flock --------------------------------------------------------
    def _acquire_local(self) -> None:
        path = os.path.join(self.workdir, LOCK_NAME)
        # The lock file stays after release (as a plain flock's would) and is never replaced
        # by a soft lock: a filesystem without flock is an error, not a silent weaker lock.
        lock = filelock.FileLock(path, blocking=False, thread_local=False, is_singleton=False,
                                 preserve_lock_file=True, fallback_to_soft=False,
                                 on_acquired=self._write_holder)
        # The run's first write into the work directory: a read-only or full one is named here.
        with reported(path, "taking the run lock", "use a writable --workdir"):
            os.makedirs(self.workdir, exist_ok=True)
            try:
                lock.acquire()
            except filelock.Timeout:
                with open(path, encoding="utf-8") as file:
                    text = file.read()
                raise _refusal(self.workdir, json.loads(text) if text.strip() else {}, path) \
                    from None
        self._local_lock = lock

    def _write_holder(self, descriptor: int) -> None:
        """Names this run in the lock file it has just locked (filelock's on_acquired)."""
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, json.dumps(self._holder).encode(), 0)

    # -- object storage: a renewed lease -------------------------------------------------
    def _lease_path(self) -> str:
        return files.join(self.workdir, LEASE_NAME)

    def _read_lease(self) -> dict | None:
        path = self._lease_path()
        try:
            return json.loads(files.read_text(path)) if files.exists(path) else None
        except (ValueError, OSError):
            return None  # half-written by its holder or just deleted: read again later

    def _acquire_lease(self) -> None:
        path = self._lease_path()
        current = self._read_lease()
        if current is not None:
            age = time.time() - float(current.get("renewed", 0))
            if age < self.lease_seconds:
                raise _refusal(self.workdir, current, path,
                               f"; lease renewed {age:.0f} s ago, taken over after "
                               f"{self.lease_seconds:.0f} s without renewal")
        files.makedirs(self.workdir)
        files.write_text(path, json.dumps(self._holder))
        # Two runs starting together both write; the last write wins, the other run backs off.
        time.sleep(min(1.0, self.renew_seconds / 10))
        current = self._read_lease()
        if current is None or current.get("token") != self._holder["token"]:
            raise _refusal(self.workdir, current or {}, path, "; it started at the same time")
        self._renewer = threading.Thread(target=self._renew, daemon=True)
        self._renewer.start()

    def _renew(self) -> None:
        while not self._stop.wait(self.renew_seconds):
            self._holder["renewed"] = time.time()
            try:
                files.write_text(self._lease_path(), json.dumps(self._holder))
            except OSError:
                pass  # a transient storage error; the next renewal tries again

    def __enter__(self) -> "RunLock":
        if self.lease:
            self._acquire_lease()
        else:
            self._acquire_local()
        return self

    def __exit__(self, *exc) -> None:
        if self._local_lock is not None:
            self._local_lock.release()
            self._local_lock = None
        if self._renewer is not None:
            self._stop.set()
            self._renewer.join()
            self._renewer = None
            current = self._read_lease()
            if current is not None and current.get("token") == self._holder["token"]:
                files.remove(self._lease_path())
