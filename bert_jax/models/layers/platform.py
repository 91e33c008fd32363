"""The platform a program is traced for, which the layers ask when the fastest form of an
operation differs by backend (the attention core's chunks and bands, a wide bias's
gradient)."""

import jax

GPU_PLATFORMS = ("gpu", "cuda")  # what jax calls a GPU's platform, by version


def traced_platform() -> str:
    """The platform the step is traced for: the mesh's devices where there is a mesh (an AOT
    check compiles for a TPU on a CPU host), else the default backend."""
    mesh = jax.sharding.get_abstract_mesh()
    device = None if mesh.empty else mesh.abstract_device
    return device.platform if device is not None else jax.default_backend()
