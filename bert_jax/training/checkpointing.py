"""Training checkpoints: an orbax CheckpointManager with one directory per step.

Layout (other tools read it): `checkpoints/<step>/params` is the unboxed parameter tree as a
plain orbax PyTree checkpoint (restorable alone with `ocp.StandardCheckpointer`),
`checkpoints/<step>/opt_state` the optimizer state, `checkpoints/<step>/meta` a JSON dict
(step, rng, data position per process, the data it was read from). Orbax writes each
step to a temporary name and renames it when complete, so a kill -9 at any moment leaves
only whole checkpoints; saves run in the background while training goes on.
"""

import os
from typing import Any

import jax
import orbax.checkpoint as ocp
from etils import epath

from bert_jax import files  # also routes orbax's epath through the one file layer
from bert_jax.errors import UserError

ITEMS = ("params", "opt_state", "meta")


class Checkpoints:
    """Saves and restores (params, opt_state, meta) by step under `directory` (local or gs://)."""

    def __init__(self, directory: str, keep: int = 3, async_save: bool = True):
        # Orbax wants absolute paths; gs:// and other URLs already are.
        self.directory = epath.Path(files.absolute(directory))
        options = ocp.CheckpointManagerOptions(
            max_to_keep=keep, enable_async_checkpointing=async_save, create=True)
        self._manager = ocp.CheckpointManager(self.directory, item_names=ITEMS, options=options)

    def latest_step(self) -> int | None:
        return self._manager.latest_step()

    def all_steps(self) -> list[int]:
        return list(self._manager.all_steps())

    def save(self, step: int, params: Any, opt_state: Any, meta: dict) -> None:
        """Starts saving `step` (asynchronously unless async_save=False); returns at once."""
        self._manager.save(step, force=True, args=ocp.args.Composite(
            params=ocp.args.StandardSave(params),
            opt_state=ocp.args.StandardSave(opt_state),
            meta=ocp.args.JsonSave(meta)))

    def restore(self, step: int, abstract_params: Any, abstract_opt_state: Any
                ) -> tuple[Any, Any, dict]:
        """(params, opt_state, meta) of `step`, placed in the shardings of the abstract trees."""
        restored = self._manager.restore(step, args=ocp.args.Composite(
            params=ocp.args.StandardRestore(abstract_params),
            opt_state=ocp.args.StandardRestore(abstract_opt_state),
            meta=ocp.args.JsonRestore()))
        return restored["params"], restored["opt_state"], restored["meta"]

    def restore_meta(self, step: int) -> dict:
        restored = self._manager.restore(step, args=ocp.args.Composite(
            meta=ocp.args.JsonRestore()))
        return restored["meta"]

    def wait(self) -> None:
        """Blocks until every pending background save is on disk."""
        self._manager.wait_until_finished()

    def close(self) -> None:
        self._manager.wait_until_finished()
        self._manager.close()


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


def abstract_of(tree: Any) -> Any:
    """ShapeDtypeStructs (with shardings) of a tree of arrays, as restore targets."""
    return jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=getattr(x, "sharding", None)),
        tree)
