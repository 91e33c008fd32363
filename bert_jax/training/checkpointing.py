"""Training checkpoints: an orbax CheckpointManager with one directory per step.

Layout (other tools read it): `checkpoints/<step>/params` is the unboxed parameter tree as a
plain orbax PyTree checkpoint (restorable alone with `ocp.StandardCheckpointer`),
`checkpoints/<step>/opt_state` the optimizer state, `checkpoints/<step>/meta` a JSON dict
(step, rng, data position per process, the data it was read from). Orbax writes each
step to a temporary name and renames it when complete, so a kill -9 at any moment leaves
only whole checkpoints; saves run in the background while training goes on.

A checkpoint damaged afterwards (a file deleted or cut short by a copy, a full disk on
another machine) is named with the file and what is wrong with it
(`bert_jax/storage/checkpoint_damage.py`); a resume sets it aside as `<step>.damaged` and
continues from the newest intact one (`restore_newest_intact`), or stops in one line where
none is intact.
"""

import contextlib
import copy
import functools
import logging
import os
import shutil
from typing import Any

import jax
import orbax.checkpoint as ocp
from etils import epath

from bert_jax.storage import files  # also routes orbax's epath through the one file layer
from bert_jax.errors import UserError
from bert_jax.storage.checkpoint_damage import damage, quiet_failed_restore
from bert_jax.storage.storage_errors import storage_failure

ITEMS = ("params", "opt_state", "meta")


class Checkpoints:
    """Saves and restores (params, opt_state, meta) by step under `directory` (local or gs://)."""

    def __init__(self, directory: str, keep: int = 3, async_save: bool = True,
                 keep_period: int | None = None):
        """`keep` the newest checkpoints, and besides them every step that is a multiple of
        `keep_period` (those a suite at checkpoints scores: run_config/checkpoint_suite.py)."""
        # Orbax wants absolute paths; gs:// and other URLs already are.
        self.directory = epath.Path(files.absolute(directory))
        options = ocp.CheckpointManagerOptions(
            max_to_keep=keep, keep_period=keep_period, enable_async_checkpointing=async_save,
            create=True)
        self._manager = ocp.CheckpointManager(self.directory, item_names=ITEMS, options=options)
        self._needed, self._saving = 0, None  # the last checkpoint started: bytes, step

    def latest_step(self) -> int | None:
        return self._manager.latest_step()

    def all_steps(self) -> list[int]:
        return list(self._manager.all_steps())

    def save(self, step: int, params: Any, opt_state: Any, meta: dict) -> None:
        """Starts saving `step` (asynchronously unless async_save=False); returns at once.

        A local disk without room for it is a `UserError` before anything is written."""
        needed = sum(getattr(leaf, "nbytes", 0) for leaf in jax.tree.leaves((params, opt_state)))
        self._check_free_space(step, needed)
        self._needed, self._saving = needed, step
        _register_array_writer()
        with self._storage_errors(step):
            self._manager.save(step, force=True, args=ocp.args.Composite(
                params=ocp.args.StandardSave(params),
                opt_state=ocp.args.StandardSave(opt_state),
                meta=ocp.args.JsonSave(meta)))

    def _check_free_space(self, step: int, needed: int) -> None:
        if "://" in str(self.directory):
            return  # object storage: no free space to ask about
        existing = str(self.directory)
        while not os.path.exists(existing):
            existing = os.path.dirname(existing)
        free = shutil.disk_usage(existing).free
        if free < needed:
            raise UserError(
                f"{self.directory}: the checkpoint of step {step} needs about "
                f"{_gib(needed)} (parameters and optimizer state) but the disk has "
                f"{_gib(free)} free; free some space (checkpoint.keep keeps fewer) or use "
                "another --workdir, then rerun to resume from the last checkpoint")

    @contextlib.contextmanager
    def _storage_errors(self, step: int | None):
        """One clear error for a full disk, a file-size limit or a read-only directory
        (bert_jax/storage/storage_errors.py), not a traceback per thread."""
        try:
            yield
        except Exception as error:  # orbax re-raises background-thread errors, wrapped
            reason = storage_failure(error)
            if reason is None:
                raise
            size = f" (a checkpoint needs about {_gib(self._needed)})" if self._needed else ""
            raise UserError(
                f"{self.directory}: saving checkpoint{'' if step is None else f' {step}'} "
                f"failed: {reason}{size}. Earlier checkpoints are intact (each is written under "
                "a temporary name first); make room (or lift the limit) or use another "
                "--workdir, then rerun to resume") from None

    def restore(self, step: int, abstract_params: Any, abstract_opt_state: Any
                ) -> tuple[Any, Any, dict]:
        """(params, opt_state, meta) of `step`, placed in the shardings of the abstract trees."""
        restored = self._manager.restore(step, args=ocp.args.Composite(
            params=ocp.args.StandardRestore(abstract_params),
            opt_state=ocp.args.StandardRestore(abstract_opt_state),
            meta=ocp.args.JsonRestore()))
        return restored["params"], restored["opt_state"], restored["meta"]

    def restore_newest_intact(self, abstract_params: Any, abstract_opt_state: Any, log
                              ) -> tuple[int, tuple[Any, Any, dict]]:
        """(step, `restore(step)`) of the newest checkpoint that restores. Each damaged newer
        one is named (`damage`) and set aside as `<step>.damaged`, so that the run saves
        that step anew; where none is intact, a UserError naming each."""
        damaged = []
        for step in sorted(self.all_steps(), reverse=True):
            try:
                with quiet_failed_restore():
                    restored = self.restore(step, abstract_params, abstract_opt_state)
            except Exception as error:  # orbax wraps tensorstore's errors in plain Exception
                reason = damage(error, f"{self.directory}/{step}")
                if reason is None:
                    raise
                damaged.append((step, reason))
                continue
            for damaged_step, reason in damaged:
                log(f"checkpoint {damaged_step} in {self.directory} is damaged: {reason}")
            if damaged:
                names = self._set_aside([damaged_step for damaged_step, _ in damaged])
                log(f"set aside as {names}; step {step} is the newest intact checkpoint")
            return step, restored
        raise UserError(
            f"{self.directory}: no intact checkpoint to resume from (" + "; ".join(
                f"{step}: {reason}" for step, reason in damaged) + "); put the damaged files "
            "back from a copy, or give another --workdir to start a new run")

    def _set_aside(self, steps: list[int]) -> str:
        """Renames damaged step directories out of orbax's view (to names that are not
        steps); returns their new names."""
        names = []
        for step in steps:
            source = f"{self.directory}/{step}"
            target, number = f"{source}.damaged", 1
            while files.exists(target):
                number += 1
                target = f"{source}.damaged-{number}"
            if jax.process_index() == 0:
                files.move(source, target)
            names.append(files.basename(target))
        if jax.process_count() > 1:
            from bert_jax.training.distributed import gather_json

            gather_json(None)  # every process waits for the rename before it looks again
        self._manager.reload()
        return ", ".join(names)

    def wait(self) -> None:
        """Blocks until every pending background save is on disk."""
        with self._storage_errors(self._saving):
            self._manager.wait_until_finished()

    def close(self) -> None:
        with self._storage_errors(self._saving):
            try:
                self._manager.wait_until_finished()
            finally:
                self._manager.close()


@functools.cache  # once a process: the process count does not change while it runs
def _register_array_writer() -> None:
    """In one process, orbax's jax.Array writer without replica-parallel writing.

    Replica-parallel writing splits each replicated array between its replicas so that every
    host writes a part. In one process every replica is this process's, and the split costs
    an eager slice per array and device, each compiled the first time its shape is seen: a
    tiny model's first save on 8 CPU devices blocked training for 2.4 s, and 0.1 s without
    (AMD EPYC, 2 cores). A pod keeps orbax's writer as it is. The registered writer is
    copied, keeping orbax's other settings (its array metadata store among them); the
    switch is a private attribute, so its absence is an error here, not a silent slow path
    (tests/test_checkpoint_writes.py). Called at each save, when JAX is running and the
    process count is the pod's; the first call decides."""
    if jax.process_count() > 1:
        return
    writer = copy.copy(ocp.type_handlers.get_type_handler(jax.Array))
    if not hasattr(writer, "_use_replica_parallel"):
        raise RuntimeError("orbax's ArrayHandler has no _use_replica_parallel: see "
                           "bert_jax/training/checkpointing.py, _register_array_writer")
    writer._use_replica_parallel = False
    ocp.type_handlers.register_type_handler(jax.Array, writer, override=True)


def restore_params(path: str, abstract_params: Any | None = None) -> Any:
    """A `params` item (or any StandardCheckpointer directory) on its own.

    Without `abstract_params` the arrays come back as they were saved, on the default device.
    """
    if not files.exists(path):
        raise UserError(f"{path}: no parameter checkpoint here")
    checkpointer = ocp.StandardCheckpointer()
    try:
        return checkpointer.restore(os.fspath(path), abstract_params)
    finally:
        checkpointer.close()


class _QuietStorageFailures(logging.Filter):
    """Orbax logs a failed background write once per thread with its traceback (hundreds of
    lines for one full disk); the trainer reports it once, as a UserError."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        return storage_failure(Exception(record.getMessage())) is None and (
            error is None or storage_failure(error) is None)


logging.getLogger("absl").addFilter(_QuietStorageFailures())


def _gib(num_bytes: int) -> str:
    """GiB with two decimals, or MiB below one GiB."""
    if num_bytes >= 2**30:
        return f"{num_bytes / 2**30:.2f} GiB"
    return f"{num_bytes / 2**20:.1f} MiB"
