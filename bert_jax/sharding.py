"""The device mesh and the one rule table from logical axis names to mesh axes.

The model names logical axes (`vocab`, `embed`, `heads`, `mlp`, ... for parameters;
`batch`, `seq`, `embed` for activations); this module alone names the mesh axes:

  data    pure data parallelism: parameters replicated, the batch split (the original's
          layout on 64 TPU chips).
  fsdp    data parallelism that also splits every parameter and optimizer slot along
          `embed` (ZeRO-3 / fully sharded data parallel): memory per device falls with
          the axis size, at the cost of an all-gather per layer.
  tensor  Megatron-style tensor parallelism: attention heads and the MLP's inner
          dimension are split; activations stay whole between blocks.

One rule table serves every layout: an axis of size 1 costs nothing, so "pure data
parallel", "FSDP" and "FSDP + tensor" are just mesh sizes in the run config.
"""

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import flax.linen as nn
import jax
from jax.experimental import mesh_utils
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from bert_jax.errors import UserError

MESH_AXES = ("data", "fsdp", "tensor")
# The batch is split over every data-parallel axis.
BATCH_AXES = ("data", "fsdp")

# Logical axis -> mesh axis, tried in order; flax skips a rule whose mesh axis an earlier
# dimension of the same array already uses. So an activation (batch, seq, embed) keeps
# `embed` whole (fsdp is taken by batch) while a parameter (vocab, embed) splits it.
LOGICAL_AXIS_RULES = (
    ("batch", BATCH_AXES),
    ("seq", None),
    # Not split: with the table split on vocab over `tensor` and the batch over data x fsdp
    # (a 2x2x2 mesh), XLA's SPMD partitioner (jax 0.10.2) replicates the embedding gather
    # ("involuntary full rematerialization") and the gradients come out wrong (0.2% in the
    # global norm; caught by tests/test_sharding.py). The table is still split along embed.
    ("vocab", None),
    ("heads", "tensor"),
    ("mlp", "tensor"),
    ("embed_out", "tensor"),
    ("embed", "fsdp"),
    ("kv", None),
    ("positions", None),
    ("segments", None),
    ("classes", None),
)


def make_mesh(data: int = -1, fsdp: int = 1, tensor: int = 1,
              devices: Sequence[Any] | None = None) -> Mesh:
    """A (data, fsdp, tensor) mesh over `devices` (default: all); one size may be -1 = the rest.

    `devices` may be an explicit list, e.g. TPU topology devices for AOT compilation.
    """
    devices = list(jax.devices() if devices is None else devices)
    sizes = {"data": data, "fsdp": fsdp, "tensor": tensor}
    unknown = [name for name, size in sizes.items() if size == -1]
    if len(unknown) > 1:
        raise UserError(f"mesh: at most one axis may be -1 (the rest), got {unknown}")
    if any(size == 0 or size < -1 for size in sizes.values()):
        raise UserError(f"mesh: axis sizes must be positive or -1, got {sizes}")
    known = int(np.prod([size for size in sizes.values() if size != -1]))
    if unknown:
        if len(devices) % known:
            raise UserError(f"mesh: {len(devices)} devices do not divide into {sizes}")
        sizes[unknown[0]] = len(devices) // known
    if int(np.prod(list(sizes.values()))) != len(devices):
        raise UserError(f"mesh: sizes {sizes} need {int(np.prod(list(sizes.values())))} "
                        f"devices, but there are {len(devices)}")
    shape = tuple(sizes[name] for name in MESH_AXES)
    try:
        # Places `tensor` on the fastest interconnect when the devices know their topology.
        device_array = mesh_utils.create_device_mesh(shape, devices)
    except (ValueError, NotImplementedError, AssertionError):
        device_array = np.asarray(devices, dtype=object).reshape(shape)
    return Mesh(device_array, MESH_AXES)


def mesh_from_config(mesh_config, devices: Sequence[Any] | None = None) -> Mesh:
    """The mesh of a run config's `mesh` section (fields data, fsdp, tensor)."""
    return make_mesh(mesh_config.data, mesh_config.fsdp, mesh_config.tensor, devices)


# A dimension the mesh does not divide is replicated when the whole array is this small
# (biases, LayerNorm scales, a tiny test model): a copy per device costs nothing. Larger
# ones are an error, since silently replicating them surfaces later as out-of-memory.
REPLICATE_LIMIT_ELEMENTS = 1 << 20


def _fit_to_shape(spec: PartitionSpec, shape: tuple[int, ...], mesh: Mesh,
                  name: str = "an array") -> PartitionSpec:
    """Drops the mesh axes that do not divide a dimension of a small array; for a large one
    raises `UserError` naming it, its shape and the mesh."""
    fitted = []
    for index, (dim, axes) in enumerate(
            zip(shape, tuple(spec) + (None,) * (len(shape) - len(spec)))):
        names = (axes,) if isinstance(axes, str) else tuple(axes or ())
        size = int(np.prod([mesh.shape[axis] for axis in names])) if names else 1
        divides = size > 1 and dim % size == 0
        if size > 1 and not divides and int(np.prod(shape)) >= REPLICATE_LIMIT_ELEMENTS:
            raise UserError(
                f"{name} {tuple(shape)}: dimension {index} ({dim}) cannot be split over mesh "
                f"axes {names} of size {size} (mesh {dict(mesh.shape)}); it would be copied "
                "whole to every device. Choose mesh sizes that divide it")
        fitted.append(axes if divides else None)
    return PartitionSpec(*fitted)


def logical_to_sharding(logical_axes: tuple[str | None, ...], shape: tuple[int, ...],
                        mesh: Mesh, name: str = "an array") -> NamedSharding:
    """The NamedSharding of one array whose dimensions carry these logical names."""
    spec = nn.logical_to_mesh_axes(logical_axes, LOGICAL_AXIS_RULES)
    return NamedSharding(mesh, _fit_to_shape(spec, shape, mesh, name))


def tree_shardings(boxed_tree: Any, mesh: Mesh) -> Any:
    """NamedShardings for a tree of (abstract) arrays, some boxed with logical axis names.

    Unboxed leaves (step counters, optimizer scalars) are replicated.
    """
    def sharding_of(path, leaf):
        if isinstance(leaf, nn.Partitioned) and not hasattr(leaf.value, "shape"):
            return leaf.value  # an empty node (optax's MaskedNode for a frozen parameter)
        if isinstance(leaf, nn.Partitioned):
            return logical_to_sharding(leaf.names, leaf.value.shape, mesh,
                                       name=jax.tree_util.keystr(path, simple=True, separator="/"))
        return NamedSharding(mesh, PartitionSpec())
    return jax.tree_util.tree_map_with_path(
        sharding_of, boxed_tree, is_leaf=lambda leaf: isinstance(leaf, nn.Partitioned))


def batch_sharding(mesh: Mesh, ndim: int) -> NamedSharding:
    """Batch arrays (B, ...) split along B over the data-parallel axes."""
    return NamedSharding(mesh, PartitionSpec(BATCH_AXES, *([None] * (ndim - 1))))


def micro_batch_sharding(mesh: Mesh, ndim: int) -> NamedSharding:
    """Micro-batched arrays (k, B/k, ...): the micro-batch axis whole, B/k split as a batch."""
    return NamedSharding(mesh, PartitionSpec(None, BATCH_AXES, *([None] * (ndim - 2))))


def data_parallel_size(mesh: Mesh) -> int:
    return int(np.prod([mesh.shape[name] for name in BATCH_AXES]))


def parameters_split() -> bool:
    """Whether the step being traced (under `activation_sharding`) splits parameters over
    devices: an fsdp or tensor axis of more than one device."""
    mesh = jax.sharding.get_abstract_mesh()
    return not mesh.empty and any(mesh.shape.get(name, 1) > 1 for name in ("fsdp", "tensor"))


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, PartitionSpec())


@contextlib.contextmanager
def activation_sharding(mesh: Mesh) -> Iterator[None]:
    """Binds the model's logical activation constraints to `mesh` while a step is traced.

    Without it `nn.with_logical_constraint` is a no-op and XLA alone decides how activations
    are laid out, which under FSDP can split them along `embed` instead of the batch.
    """
    with jax.sharding.use_abstract_mesh(mesh.abstract_mesh), \
            nn.logical_axis_rules(LOGICAL_AXIS_RULES):
        yield
