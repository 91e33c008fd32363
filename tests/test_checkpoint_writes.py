"""A checkpoint save in one process writes each replicated array once, from one device, and
compiles nothing (bert_jax/training/checkpointing.py, `_register_array_writer`)."""

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from bert_jax import sharding
from bert_jax.training import checkpointing


def test_a_save_on_eight_devices_compiles_nothing_and_restores_the_arrays(tmp_path):
    mesh = sharding.make_mesh(2, 2, 2)
    # Shapes no other test saves, so that a compile could not have been cached earlier.
    values = {"replicated": np.arange(7 * 13, dtype=np.float32).reshape(7, 13),
              "split": np.arange(8 * 11, dtype=np.float32).reshape(8, 11)}
    layouts = {"replicated": PartitionSpec(), "split": PartitionSpec(("data", "fsdp"))}
    arrays = {name: jax.device_put(jnp.asarray(value), NamedSharding(mesh, layouts[name]))
              for name, value in values.items()}
    opt_state = {"count": jax.device_put(jnp.int32(3), NamedSharding(mesh, PartitionSpec()))}
    compiles = []
    listener = lambda event, duration, **_: compiles.append(event)  # noqa: E731
    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        checkpoints = checkpointing.Checkpoints(str(tmp_path / "checkpoints"))
        checkpoints.save(1, arrays, opt_state, {"step": 1})
        checkpoints.close()
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
    # Orbax's replica-parallel writer sliced each array once per replica, eagerly: one
    # compile per slice shape, 2.4 s before a tiny model's first save.
    assert [event for event in compiles if "backend_compile" in event] == []
    restored = checkpointing.restore_params(str(tmp_path / "checkpoints" / "1" / "params"))
    for name, value in values.items():
        np.testing.assert_array_equal(np.asarray(restored[name]), value)
