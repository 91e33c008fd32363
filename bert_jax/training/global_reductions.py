"""Reductions over every element of a parameter tree (the gradient norm, the finite check),
written so a GPU runs them in few kernels, and the global-norm clip that shares the norm.

A reduction to one number per leaf makes XLA launch a kernel per leaf, and two for a
large one (a two-stage reduction): BERT-Base has 206 leaves, and the step's gradient norm
and finite check took 283 kernels each (issue 43). Here a matrix is reduced along its last
axis only, where it is produced (the update writes the parameters it checks), a small leaf
(a bias, a LayerNorm's scale: 130 of the 206, a few thousand elements each, and the small
matrices among them: a (heads, head_dim) bias, the segment embeddings) not at all, and all
of it is joined and reduced once. (Reduced along their last axis, the 36 (12, 64) biases of
BERT-Base's attention took a kernel each in the gradient norm; raveled they are operands of
the join, 3 kernels a layer fewer for an H100.) The optimization barrier keeps XLA from
rewriting that last reduction of the joined pieces back into one per leaf. Where the step
splits parameters over devices (FSDP, tensor parallelism), a leaf's rows live on several
devices and joining them would gather them (9 more all-gathers in a 2-layer FSDP step on
v5e:2x2): there each leaf is reduced whole, and its devices' parts summed in the one
all-reduce XLA combines them into, as before.
"""

from typing import Any, Callable

import jax
import jax.numpy as jnp
import optax

from bert_jax import sharding

Array = jax.Array
SMALL_LEAF = 8192  # elements: a matrix this small is joined as it is, not reduced first


def reduce_leaves(tree: Any, reduction: Callable[..., Array]) -> Array:
    """`reduction` (jnp.sum, jnp.all, ...) over every element of every leaf of `tree`."""
    if sharding.parameters_split():
        return reduction(jnp.stack([reduction(leaf) for leaf in jax.tree.leaves(tree)]))
    rows = [reduction(leaf, axis=-1).ravel() if leaf.ndim > 1 and leaf.size > SMALL_LEAF
            else leaf.ravel() for leaf in jax.tree.leaves(tree)]
    if not rows:
        return reduction(jnp.zeros((0,)))
    return reduction(jax.lax.optimization_barrier(jnp.concatenate(rows)))


def global_norm(tree: Any) -> Array:
    """The L2 norm of all of `tree`'s elements (what `optax.tree.norm` computes, summed in
    another order)."""
    return jnp.sqrt(reduce_leaves(jax.tree.map(jnp.square, tree), jnp.sum))


def all_finite(tree: Any) -> Array:
    """Whether every element of every leaf is finite."""
    return reduce_leaves(jax.tree.map(jnp.isfinite, tree), jnp.all)


def clip_by_global_norm(max_norm: float) -> optax.GradientTransformation:
    """`optax.clip_by_global_norm` with `global_norm`: the same clip, its norm the one the
    train step reports, so XLA computes it once."""
    def update(updates, state, params=None):
        del params
        norm = global_norm(updates)
        keep = norm < max_norm
        return jax.tree.map(lambda t: jax.lax.select(keep, t, (t / norm.astype(t.dtype))
                                                     * max_norm), updates), state
    return optax.GradientTransformation(optax.init_empty_state, update)
