"""Several processes as one JAX program: start-up, global batches, gathering host state.

`initialize` joins the processes of a multi-host run: explicit coordinator flags (any
platform, including several local CPU processes talking over gloo), or with no flags on a
Cloud TPU VM, where `jax.distributed.initialize()` discovers its peers by itself. A single
process needs neither. Each process then reads its own shards, and `global_batch`
assembles the per-process batches into one array sharded over the whole mesh.
"""

import glob
import json

from bert_jax.errors import UserError

# Cloud TPU VMs expose their chips as /dev/accel* or /dev/vfio/<number> devices.
TPU_DEVICE_NODES = ("/dev/accel*", "/dev/vfio/[0-9]*")
GPU_DEVICE_NODES = ("/dev/nvidia[0-9]*",)


def accelerator_present(device_nodes=TPU_DEVICE_NODES + GPU_DEVICE_NODES) -> bool:
    """Whether this machine has a device node of an accelerator; imports no JAX."""
    return any(glob.glob(pattern) for pattern in device_nodes)


def accelerator_runs_steps(environ, accelerator: bool) -> bool:
    """Whether JAX will run the steps on an accelerator: JAX_PLATFORMS names another platform
    than the CPU, or it is unset and `accelerator` (accelerator_present()) says one is here."""
    platforms = environ.get("JAX_PLATFORMS", "")
    return platforms != "cpu" and bool(platforms or accelerator)


def _on_tpu_vm() -> bool:
    return accelerator_present(TPU_DEVICE_NODES)


def initialize(coordinator_address: str | None = None, num_processes: int | None = None,
               process_id: int | None = None) -> None:
    """Calls `jax.distributed.initialize` when this is one process of several.

    Must run before anything touches a JAX device.
    """
    explicit = (coordinator_address, num_processes, process_id)
    if any(value is not None for value in explicit):
        if any(value is None for value in explicit):
            raise UserError("--coordinator-address, --num-processes and --process-id must be "
                            "given together")
        if not 0 <= process_id < num_processes:
            raise UserError(f"--process-id {process_id} must be in [0, {num_processes})")
    import jax

    if coordinator_address is not None:
        if jax.config.jax_platforms in (None, "", "cpu") and not _on_tpu_vm():
            # CPU processes need a collectives backend to run cross-process all-reduces.
            jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(coordinator_address=coordinator_address,
                                   num_processes=num_processes, process_id=process_id)
    elif _on_tpu_vm():
        jax.distributed.initialize()


def global_batch(local_batch: dict, batch_shardings: dict) -> dict:
    """Per-process numpy batches (B / processes, ...) -> global jax.Arrays (B, ...)."""
    import jax

    return {name: jax.make_array_from_process_local_data(batch_shardings[name], value)
            for name, value in local_batch.items()}


def gather_json(value) -> list:
    """Every process's JSON-serialisable `value`, in process order (a collective call)."""
    import jax
    import numpy as np
    from jax.experimental import multihost_utils

    if jax.process_count() == 1:
        return [value]
    encoded = np.frombuffer(json.dumps(value).encode("utf-8"), dtype=np.uint8)
    lengths = multihost_utils.process_allgather(np.array([encoded.size], np.int32))
    padded = np.zeros(int(lengths.max()), np.uint8)
    padded[:encoded.size] = encoded
    gathered = multihost_utils.process_allgather(padded)  # (processes, max_length)
    return [json.loads(bytes(row[:int(length)]).decode("utf-8"))
            for row, length in zip(gathered, lengths.reshape(-1))]
