"""Scanned layer stacks: the compiler sees one block of layers, not every layer.

An unrolled stack of N layers is N copies of the layer in the program: compile time and the
compiler's memory grow with depth. `scan_blocks` runs the stack as one `jax.lax.scan` over a
block (BERT's: one layer; ModernBERT's: one global and two sliding layers), its weights stacked
on a leading layer axis, so the layer is traced, optimised and compiled once.

The parameter tree stays per layer (`layer_0`, `layer_1`, ...) everywhere outside the model:
checkpoints, the optimizer state, conversions, layer freezing and partial loading see what they
always saw, and a run saved unrolled continues scanned unchanged. The stacking is at the
model's own boundary, inside the jitted step: `stack_layers` joins the per-layer trees
(`unstack_layers` is its inverse), and the gradient flows back through it to each layer's
leaf. Sharding is unchanged: each stacked leaf keeps its per-layer leaf's split, the layer axis
whole.

Initialisation and the paths that collect intermediates (attention maps, hidden states for
`features`, the probe) run the layers unrolled: the same parameters, the same per-layer
results, and a seed gives the same initial weights scanned or not.
"""

from collections.abc import Callable, Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from bert_jax.models.config import Precision

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


def scan_blocks(block: Sequence[nn.Module], block_params: Sequence[Sequence[Any]], x: Array,
                arguments: tuple, key: Array | None, precision: Precision) -> Array:
    """Applies len(block_params) blocks in order: block b runs `block[j]` (unbound modules,
    `parent=None`) with the parameters `block_params[b][j]`, for j in order, on x (B, T, H).

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
    keys = None if key is None else jax.random.split(key, len(block_params))
    stacked = stack_layers([tuple(params) for params in block_params])
    x, _ = jax.lax.scan(body, x, (stacked, keys))
    return x


def layer_params(module: nn.Module, first: int, count: int) -> list[Any]:
    """The unboxed parameters of `module`'s children layer_{first} .. layer_{first+count-1}."""
    params = nn.meta.unbox(module.variables["params"])
    return [params[f"layer_{index}"] for index in range(first, first + count)]
