"""Scanned layer stacks: the compiler sees one block of layers, not every layer.

An unrolled stack of N layers is N copies of the layer in the program: compile time and the
compiler's memory grow with depth. `scan_blocks` runs the stack as one `jax.lax.scan` over a
block (BERT's: one layer; ModernBERT's: one global and two sliding layers; the config's
`scan_plan` says which), its weights stacked on a leading layer axis, so the layer is traced,
optimised and compiled once.

The parameters a scanned stack reads come in either of two layouts:
  per layer  `layer_0`, `layer_1`, ...: what checkpoints, conversions, layer freezing, partial
             loading and the unrolled stack use. The scan stacks them inside the step, and
             the gradient flows back through the stacking to each layer's leaf.
  stacked    one tree a position of the block, `layers_{first}_every_{period}` holding
             layers first, first + period, ... on a leading axis (`store_stacked`;
             `per_layer` is its inverse). What a training run keeps on its devices while it
             scans (bert_jax/training/layer_storage.py): the loop reads each block's slice of
             the stored weights and writes its slice of their gradient, so nothing is stacked
             or sliced per layer in the step, and the optimizer updates one array where there
             were `blocks`.
Sharding is unchanged: each stacked leaf keeps its per-layer leaf's split, the layer axis
whole.

Initialisation and the paths that collect intermediates (attention maps, hidden states for
`features`, the probe) run the layers unrolled on per-layer parameters: the same parameters,
the same per-layer results, and a seed gives the same initial weights scanned or not.
"""

import re
from collections.abc import Callable, Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from bert_jax.models.config import Precision, ScanPlan

Array = jax.Array

# Precision.remat_policy's choices: what a rematerialised block keeps from its forward pass.
REMAT_POLICIES = {
    "full": jax.checkpoint_policies.nothing_saveable,  # recompute the whole block
    # Keep the projections' outputs (matmuls without batch dimensions, i.e. not attention's
    # scores): the backward recomputes only the cheap elementwise work between them.
    "matmul_outputs": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
}


def scanned(module: nn.Module, precision: Precision) -> bool:
    """Whether `module`'s layer stack runs scanned in this call.

    Unrolled when scanning is off, while initialising (the per-layer tree is created as
    always), when intermediates are collected (each layer sows its own), and with cuDNN's own
    attention dropout, whose seed is fixed per layer at compile time (attention_kernels)."""
    return (precision.scan_layers and not module.is_initializing()
            and not module.is_mutable_collection("intermediates")
            and not precision.fused_attention_dropout)


def remat_layer(layer_class: type, precision: Precision, static_argnums: tuple[int, ...]):
    """The unrolled stack's layer class, rematerialised by `precision.remat_policy` when
    `precision.remat` is on."""
    if not precision.remat:
        return layer_class
    return nn.remat(layer_class, static_argnums=static_argnums,
                    policy=REMAT_POLICIES[precision.remat_policy])


def stack_layers(per_layer: Sequence[Any]) -> Any:
    """One tree from equally shaped per-layer trees, each leaf (L, ...) on a new leading axis."""
    return jax.tree.map(lambda *leaves: jnp.stack(leaves), *per_layer)


def unstack_layers(stacked: Any) -> list[Any]:
    """The per-layer trees of a `stack_layers` tree (its inverse)."""
    count = len(jax.tree.leaves(stacked)[0])
    return [jax.tree.map(lambda leaf, index=index: leaf[index], stacked)
            for index in range(count)]


def dropout_key(module: nn.Module, train: bool) -> Array | None:
    """The stack's dropout key, split per block inside `scan_blocks` (None: no dropout)."""
    return module.make_rng("dropout") if train and module.has_rng("dropout") else None


def scan_blocks(block: Sequence[nn.Module], stacked: Sequence[Any], x: Array, arguments: tuple,
                key: Array | None, precision: Precision) -> Array:
    """Applies the blocks in order: block b runs `block[j]` (unbound modules, `parent=None`)
    with the parameters `stacked[j][b]` (`block_params`' trees, one a position), for j in
    order, on x (B, T, H).

    `arguments` follow x in every layer's call (arrays and static values alike: the scan
    closes over them); `key` is split into one dropout key per block and folded per layer.
    With `precision.remat` each block is rematerialised by `precision.remat_policy`."""
    def run_block(x: Array, step: tuple) -> tuple[Array, None]:
        params, block_key = step
        for position, (layer, layer_params) in enumerate(zip(block, params)):
            rngs = ({} if block_key is None
                    else {"dropout": jax.random.fold_in(block_key, position)})
            x = layer.apply({"params": layer_params}, x, *arguments, rngs=rngs)
        return x, None

    body: Callable = run_block
    if precision.remat:
        body = jax.checkpoint(run_block, policy=REMAT_POLICIES[precision.remat_policy],
                              prevent_cse=False)  # a scan's body needs no CSE barrier
    blocks = len(jax.tree.leaves(stacked)[0])
    keys = None if key is None else jax.random.split(key, blocks)
    x, _ = jax.lax.scan(body, x, (tuple(stacked), keys))
    return x


def block_params(module: nn.Module, plan: ScanPlan) -> list[Any]:
    """The unboxed parameters of `module`'s scanned layers, one tree a position of the block,
    each leaf (blocks, ...): read as stored where the run keeps them stacked, else stacked
    here from the per-layer trees."""
    params = nn.meta.unbox(module.variables["params"])
    if stored_key(plan, 0) in params:
        return [params[stored_key(plan, position)] for position in range(plan.period)]
    return [stack_layers([params[f"layer_{index}"] for index in plan.layers(position)])
            for position in range(plan.period)]


# The stacked layout's keys: layers_{first}_every_{period} holds layers first, first + period, ...
_STORED_KEY = re.compile(r"layers_(\d+)_every_(\d+)")


def stored_key(plan: ScanPlan, position: int) -> str:
    """The key of the stacked tree of the layers at `position` of `plan`'s blocks."""
    return f"layers_{plan.first + position}_every_{plan.period}"


def is_stored_key(name: str) -> bool:
    """Whether a parameter tree's key names a stacked tree (its leaves' first axis: layers)."""
    return _STORED_KEY.fullmatch(name) is not None


def _holds_stacked(node: Any) -> bool:
    return isinstance(node, dict) and any(is_stored_key(str(key)) for key in node)


def store_stacked(tree: Any, plan: ScanPlan) -> Any:
    """`tree` (parameters, or anything holding parameter trees: optimizer moments, a train
    state) with the layers of `plan` as stacked trees (module docstring), the others as they
    were. A leaf boxed with logical axis names keeps them, the layer axis unsplit."""
    scanned_layers = {f"layer_{index}" for position in range(plan.period)
                      for index in plan.layers(position)}

    def stack(node: Any) -> Any:
        if not (isinstance(node, dict) and f"layer_{plan.first}" in node) or not plan.blocks:
            return node
        stored = {key: value for key, value in node.items() if key not in scanned_layers}
        for position in range(plan.period):
            stored[stored_key(plan, position)] = jax.tree.map(
                _stack_leaves, *[node[f"layer_{index}"] for index in plan.layers(position)],
                is_leaf=lambda leaf: isinstance(leaf, nn.Partitioned))
        return stored

    return jax.tree.map(stack, tree, is_leaf=lambda node: isinstance(node, dict)
                        and f"layer_{plan.first}" in node)


def _stack_leaves(*leaves: Any) -> Any:
    if isinstance(leaves[0], nn.Partitioned):
        return leaves[0].replace(value=jnp.stack([leaf.value for leaf in leaves]),
                                 names=(None, *leaves[0].names))
    return jnp.stack(leaves)


def per_layer(tree: Any) -> Any:
    """`store_stacked`'s inverse: every stacked tree in `tree` back to `layer_{i}` trees.
    Works on device arrays (inside or outside jit) and on host numpy arrays alike."""
    def unstack(node: Any) -> Any:
        if not _holds_stacked(node):
            return node
        layers = {key: value for key, value in node.items() if not is_stored_key(str(key))}
        for key, stacked in node.items():
            match = _STORED_KEY.fullmatch(str(key))
            if match:
                first, period = int(match[1]), int(match[2])
                for block, layer in enumerate(unstack_layers(stacked)):
                    layers[f"layer_{first + block * period}"] = layer
        return layers

    return jax.tree.map(unstack, tree, is_leaf=_holds_stacked)
