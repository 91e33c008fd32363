"""Why each collective of a compiled train step is there, or that the design does not call for it.

The layouts of `bert_jax.sharding` call for few kinds of communication, each for one reason:

  data    the gradients are summed over the batch: all-reduces.
  fsdp    each parameter is gathered before its use (all-gathers, in the forward and again
          in the backward) and each gradient summed and split back to its shard
          (reduce-scatters; libtpu runs most of them as a ring of collective-permutes beside
          the weight-gradient matmul, and sums some whole with an all-reduce, then slices:
          BERT-Large at one sequence per chip on v5e, 1.10 GiB of all-reduces per chip).
          The word-embedding table is split along `embed`: its lookup and gradient move rows
          between that layout and the batch's (all-to-alls), after an all-gather of the
          batch's token ids, which is cheaper than gathering the table (B/n x T x H
          activations against V x H parameters).
  tensor  Megatron's row-split matmuls end in partial sums: all-reduces in the forward.

Anything else, such as a gathered activation resharded between layouts (all-to-alls or
collective-permutes where the model expects the batch layout), is a sharding bug to fix. Each
collective is told apart by the JAX operation it was made for (its HLO `op_name`): the
model's forward (`jvp(Model)/...`), its backward (`transpose(jvp(Model))/...`), or the rest
of the step (loss sums, the gradient norm, the optimizer; "" where XLA combined several).
"""

import re

from bert_jax.compiler.aot_hlo import Collective

WHY = {
    "all-reduce": "sums over the batch: gradients over data, loss terms and counts, gradient "
                  "norm, finite flag, FSDP gradients XLA sums whole before slicing",
    "all-gather": "FSDP: parameters gathered before use (forward, and again in the backward); "
                  "the batch's token ids for the word-embedding lookup",
    "reduce-scatter": "FSDP: weight gradients summed over the batch and split to their shards",
    "collective-permute": "FSDP: weight-gradient reduce-scatters, run by libtpu as a ring of "
                          "permutes beside the gradient matmul",
    "all-to-all": "FSDP: the word-embedding lookup and its gradient on a table split along "
                  "embed, rows moved to and from the batch layout",
}
TENSOR_WHY = "; tensor: partial sums of row-split matmuls"
_FORWARD = re.compile(r"(?<!transpose\()jvp\(\w+\)/")
_BACKWARD = re.compile(r"transpose\(jvp\(\w+\)\)/")


def role(op_name: str) -> str:
    """"forward", "backward" (of the model) or "step" (everything else in the step)."""
    if _BACKWARD.search(op_name):
        return "backward"
    return "forward" if _FORWARD.search(op_name) else "step"


def is_explained(collective: Collective, mesh_shape: dict) -> bool:
    """Whether the layout `mesh_shape` ({"data": 4, "fsdp": 1, ...}) calls for `collective`."""
    fsdp, tensor = mesh_shape.get("fsdp", 1) > 1, mesh_shape.get("tensor", 1) > 1
    where, name = role(collective.op_name), collective.op_name
    if collective.kind == "all-reduce":
        return where != "forward" or tensor
    if collective.kind == "all-gather":
        return (fsdp or tensor) and where != "step"
    if collective.kind == "reduce-scatter":
        return (fsdp or tensor) and where != "forward"
    if collective.kind == "collective-permute":
        return fsdp and where == "backward" and name.endswith("dot_general")
    if collective.kind == "all-to-all":
        return fsdp and ("word_embeddings" in name or "token_embeddings" in name)  # BERT's, ModernBERT's
    return False


def unexplained(collectives: list[Collective], mesh_shape: dict) -> list[str]:
    """"KIND xN at OP_NAME" for each group of collectives the layout does not call for."""
    counts: dict[tuple[str, str], int] = {}
    for collective in collectives:
        if not is_explained(collective, mesh_shape):
            key = (collective.kind, collective.op_name or "(combined)")
            counts[key] = counts.get(key, 0) + 1
    return [f"{kind} x{count} at {name}" for (kind, name), count in counts.items()]


def why(kind: str, mesh_shape: dict) -> str:
    """One line: what the design needs this kind of collective for."""
    if kind == "all-reduce" and mesh_shape.get("tensor", 1) > 1:
        return WHY[kind] + TENSOR_WHY
    return WHY[kind]
