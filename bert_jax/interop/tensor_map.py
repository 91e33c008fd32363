"""Table-driven conversion between the bert-jax parameter tree and flat dicts of named tensors.

Each foreign format (`hf_bert.py`, `hf_modernbert.py`, `tf_checkpoint.py`) lists one `Entry` per tensor: where
it sits in our tree, its foreign name and how its layout differs. This module applies such a
table in either direction, and names every tensor that is missing, unknown or misshapen, so
the formats' own files hold names and nothing else.

A model is made of parts that a file holds whole or not at all: the encoder (always), the
pooler, the masked-LM head, the next-sentence head, ModernBERT's prediction `head` (shared
by its masked-LM and task models) and a task head such as the sequence classifier
(`bert_jax/models/bert_heads.py`, `modernbert_heads.py`).
"""

import dataclasses
import math
from collections.abc import Iterable, Mapping

import numpy as np

from bert_jax.errors import UserError

PARTS = ("encoder", "pooler", "head", "mlm_head", "nsp_head", "classifier", "qa_outputs")
HEADS = ("head", "mlm_head", "nsp_head", "classifier", "qa_outputs")  # top-level keys of params

# How a tensor's layout differs from ours.
COPY = "copy"  # same shape (embedding tables, LayerNorm vectors)
VECTOR = "vector"  # a flat vector: our attention biases are (heads, head_dim)
KERNEL = "kernel"  # a dense kernel: foreign (in, out) matrix, ours (in dims..., out dims...)


@dataclasses.dataclass(frozen=True)
class Entry:
    path: tuple[str, ...]  # keys into the params tree
    name: str  # the tensor's name in the foreign format
    part: str  # one of PARTS
    kind: str = COPY  # COPY, VECTOR or KERNEL
    input_rank: int = 1  # KERNEL: how many of our leading dims are inputs (2 for (heads, kv, H))
    transposed: bool = False  # KERNEL: stored (out, in), as torch.nn.Linear keeps its weight


def dense_entries(path: tuple[str, ...], kernel_name: str, bias_name: str, part: str,
                  input_rank: int = 1, transposed: bool = False) -> list[Entry]:
    """The kernel and bias entries of one dense layer."""
    return [Entry((*path, "kernel"), kernel_name, part, KERNEL, input_rank, transposed),
            Entry((*path, "bias"), bias_name, part, VECTOR)]


def norm_entries(path: tuple[str, ...], scale_name: str, bias_name: str, part: str
                 ) -> list[Entry]:
    """The scale and bias entries of one LayerNorm."""
    return [Entry((*path, "scale"), scale_name, part), Entry((*path, "bias"), bias_name, part)]


def foreign_shape(entry: Entry, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The shape the foreign format stores for our parameter of `shape`."""
    if entry.kind == VECTOR:
        return (math.prod(shape),)
    if entry.kind == KERNEL:
        matrix = (math.prod(shape[:entry.input_rank]), math.prod(shape[entry.input_rank:]))
        return matrix[::-1] if entry.transposed else matrix
    return tuple(shape)


def to_foreign(array: np.ndarray, entry: Entry) -> np.ndarray:
    """Our parameter in the foreign layout (a contiguous array, as safetensors needs)."""
    array = np.asarray(array)
    if entry.kind == VECTOR:
        return np.ascontiguousarray(array.reshape(-1))
    if entry.kind == KERNEL:
        matrix = array.reshape(math.prod(array.shape[:entry.input_rank]), -1)  # (in, out)
        return np.ascontiguousarray(matrix.T if entry.transposed else matrix)
    return np.ascontiguousarray(array)


def from_foreign(tensor: np.ndarray, entry: Entry, shape: tuple[int, ...], source: str
                 ) -> np.ndarray:
    """A foreign tensor reshaped into our parameter of `shape`, its shape checked first."""
    expected = foreign_shape(entry, shape)
    if tuple(tensor.shape) != expected:
        raise UserError(f"{source}: tensor {entry.name!r} has shape {tuple(tensor.shape)}; "
                        f"the model config implies {expected}")
    matrix = tensor.T if entry.transposed else tensor  # (in, out) for a kernel
    return np.ascontiguousarray(matrix.reshape(shape), dtype=np.float32)


def parameter_shapes(config) -> dict[tuple[str, ...], tuple[int, ...]]:
    """Every parameter's path and shape in the config's richest model without a task head
    (BERT: BertForPreTraining; ModernBERT: its masked-LM model), traced without allocating."""
    import flax
    import jax
    import jax.numpy as jnp

    from bert_jax.models.families import family_of

    family = family_of(config)
    model = (family.pretraining_model(config) if family.pretraining_class
             else family.masked_lm_model(config))
    ids = jnp.zeros((1, 1), jnp.int32)
    abstract = jax.eval_shape(lambda: model.init(jax.random.key(0), ids, ids, ids, ids))
    flat = flax.traverse_util.flatten_dict(flax.linen.meta.unbox(abstract["params"]))
    return {path: tuple(leaf.shape) for path, leaf in flat.items()}


def present_parts(params: Mapping, encoder: str = "bert") -> set[str]:
    """Which parts a params tree holds (its encoder under the family's key `encoder`)."""
    parts = {"encoder"}
    if "pooler" in params.get(encoder, {}):
        parts.add("pooler")
    return parts | {part for part in HEADS if part in params}


def refuse_unknown_heads(params: Mapping, known: Iterable[str], target: str,
                         token_classifier: bool = False, encoder: str = "bert") -> None:
    """A clear error for a head (a top-level params key) that `target` has no names for.

    Without it the head would be dropped silently and the export would look complete.
    """
    unknown = sorted(set(params) - {encoder, *known})
    if unknown:
        raise UserError(f"the model's head(s) {unknown} have no counterpart in {target}; "
                        f"it can hold only the encoder and {sorted(known)}")
    # heads.py's BertForTokenClassification also names its head `classifier`, on an encoder
    # without the pooler; only the sequence classifier (on the pooled output) is `classifier`.
    if not token_classifier and "classifier" in params and "pooler" not in params[encoder]:
        raise UserError(f"the model's head 'classifier' scores every position (token "
                        f"classification, no pooler): it has no counterpart in {target}, "
                        "which holds only a sequence classifier on the pooled output")


def params_to_tensors(params: Mapping, entries: Iterable[Entry], parts: Iterable[str],
                      encoder: str = "bert") -> dict[str, np.ndarray]:
    """The foreign tensors of the given parts; every part must be in `params`."""
    missing = set(parts) - present_parts(params, encoder)
    if missing:
        raise UserError(f"the model has no {sorted(missing)}, so this format cannot be written")
    tensors = {}
    for entry in entries:
        if entry.part in parts:
            value = params
            for key in entry.path:
                value = value[key]
            tensors[entry.name] = to_foreign(np.asarray(value, np.float32), entry)
    return tensors


def tensors_to_params(tensors: Mapping[str, np.ndarray], entries: Iterable[Entry],
                      shapes: Mapping[tuple[str, ...], tuple[int, ...]], source: str) -> dict:
    """Our nested params tree from foreign tensors.

    Parts are all-or-nothing: a part with some tensors must have all of them, and the
    encoder must always be there. Any name outside the table is an error, so a file for
    another architecture never loads half-way.
    """
    entries = list(entries)
    known = {entry.name for entry in entries}
    unknown = sorted(set(tensors) - known)
    if unknown:
        raise UserError(f"{source}: unknown tensor(s) {_shorten(unknown)}; expected the "
                        "tensors of the architecture its config names")
    parts = {"encoder"} | {entry.part for entry in entries if entry.name in tensors}
    missing = [entry.name for entry in entries if entry.part in parts and entry.name not in tensors]
    if missing:
        raise UserError(f"{source}: missing tensor(s) {_shorten(missing)}")
    params: dict = {}
    for entry in entries:
        if entry.part in parts:
            node = params
            for key in entry.path[:-1]:
                node = node.setdefault(key, {})
            shape = shapes.get(entry.path) or _head_shape(tensors[entry.name], entry)
            node[entry.path[-1]] = from_foreign(tensors[entry.name], entry, shape, source)
    return params


def _head_shape(tensor: np.ndarray, entry: Entry) -> tuple[int, ...]:
    """Our shape for a task head's tensor, whose size (the number of labels) the model config
    does not fix: a plain dense layer or vector, so only a transposition can differ."""
    shape = tuple(tensor.shape)
    return shape[::-1] if entry.kind == KERNEL and entry.transposed else shape


def _shorten(names: list[str], limit: int = 8) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")
