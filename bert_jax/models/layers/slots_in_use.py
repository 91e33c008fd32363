"""The masked-LM decoder (hidden states against a (vocabulary, hidden) table, plus a bias), and
on a CPU its product over the slots that count only.

A batch gives each row `max_predictions` slots for its masked tokens, and a row with fewer
masked tokens (a short sequence padded to the row's length) leaves the rest at weight 0:
their logits are computed, then multiplied by 0. The product over the vocabulary is most of
a masked-LM head's work (768 x 50,368 multiply-adds a slot for ModernBERT-base, three
products a step), so where a batch's rows are half empty, so is that work. On a CPU, where a
conditional runs only the branch it takes, the slots in use are gathered first, in their
order across the batch's rows, and scored as one of BUCKETS sizes, the smallest that holds
them (`jax.lax.switch`); the slots past that size get logits of 0, which their weight of 0
cancels (and their gradient is 0 as before: the loss multiplies it by their weight). The backward pass takes
the same branch, so the two gradient products skip the same slots. Written as a custom VJP:
differentiated as written, the conditional would keep every branch's residuals, each
branch's filled with zeros when another is taken. A batch whose slots are all in use (packed
rows) takes the static product's form in place, in its branch.

Measured on the AMX Xeon (2 cores, oneDNN's products; ModernBERT-base's widths, 3 layers,
2 x 1,024 tokens, bench/modernbert_step.py's rows; old / new time in one process):
padded rows, 340 of 616 slots in use, forward 1.110x and train step 1.095x faster
(7 rounds) with eighths; packed rows, 612 in use, 0.996x and 1.001x (9 rounds). The train
step compiled in 4.8 s against 3.9-4.1 s static: the branches' cost. Sixteenths against
eighths (340 slots scored as 347, not 385): train 1.042x (7 rounds, 1.015-1.055), forward
0.998x; packed rows take the same full branch (train 1.023x and 1.007x, two runs of 5
rounds); the step's first call 7.4 s against 6.6 s, compile included.

Accelerators keep the one static product: their batches are split across devices by rows,
and gathering the slots in use across rows would move them between devices.
"""

import jax
import jax.numpy as jnp

from bert_jax.models.layers.dense import add_bias
from bert_jax.models.layers.platform import traced_platform

Array = jax.Array

# The sizes a batch's slots in use are scored as: k/BUCKETS of all slots, k = 1..BUCKETS. At
# most 1/BUCKETS of the slots are scored in vain; each size is a branch compiled (forward and
# backward), so more buckets cost compile time for less saving. Sixteen: each product's time
# is about linear in the slots scored (ModernBERT-base's head alone, 340 to 400 slots: 0.26-0.29
# ms a slot a product, oneDNN, AMX Xeon): on ModernBERT's padded bench eighths score 45 slots
# in vain (385 for 340), sixteenths 7, about 32 ms less of a 1.5 s step at three products (42
# ms measured), for 0.8 s more compile.
BUCKETS = 16
# Below this many slots x vocabulary entries the static product stays: the branches' compile
# time would outweigh what they save (the suite's tiny models), and a small product is cheap.
# BERT-Base's pre-training batch (32 rows x 20 slots, 30,522 words) is 19.5M; ModernBERT's
# CPU bench (2 rows x 308 slots, 50,368 words) 31.0M.
SMALLEST_PRODUCT = 1 << 24


def decoder_logits(x: Array, table: Array, bias: Array | None,
                   weights: Array | None = None) -> Array:
    """Logits (B, P, vocab) in `x`'s dtype: `x` (B, P, H) against `table` (vocab, H), cast to
    `x`'s dtype, plus `bias` (vocab,) if given. With the slots' `weights` (B, P), on a CPU
    and a product of at least SMALLEST_PRODUCT, only the slots of nonzero weight are scored:
    the slots beyond the size scored get logits of 0 (the module docstring). Its operations
    are named `word_logits`, as profiles and `aot`'s byte table find them."""
    with jax.named_scope("word_logits"):
        if weights is None or not _skips(x.shape[0] * x.shape[1], table.shape[0]):
            return _scores(x, table, bias)
        return _scores_in_use(x, table, bias, weights)


def _skips(slots: int, vocabulary: int) -> bool:
    if slots * vocabulary < SMALLEST_PRODUCT or traced_platform() != "cpu":
        return False
    mesh = jax.sharding.get_abstract_mesh()
    return mesh.empty or mesh.size == 1  # one device: rows are not split across devices


def _scores(x: Array, table: Array, bias: Array | None) -> Array:
    logits = jnp.einsum("...h,vh->...v", x, table.astype(x.dtype))  # (..., vocab)
    return logits if bias is None else add_bias(logits, bias)


def bucket_sizes(slots: int) -> list[int]:
    """The sizes a batch of `slots` slots is scored as, smallest first."""
    return sorted({-(-slots * k // BUCKETS) for k in range(1, BUCKETS + 1)})


def _in_use(weights: Array) -> tuple[Array, Array]:
    """The flat slot numbers, those in use first (each group in its order), and the branch:
    the smallest bucket that holds the slots in use."""
    flat = weights.reshape(-1)
    order = jnp.argsort(flat == 0, stable=True)
    sizes = jnp.asarray(bucket_sizes(flat.size))
    return order, jnp.minimum(jnp.searchsorted(sizes, jnp.sum(flat != 0)), sizes.size - 1)


@jax.custom_vjp
def _scores_in_use(x: Array, table: Array, bias: Array | None, weights: Array) -> Array:
    return _scored(x, table, bias, *_in_use(weights))


def _scored(x: Array, table: Array, bias: Array | None, order: Array, branch: Array) -> Array:
    slots = x.shape[0] * x.shape[1]

    def scored(size):
        def run(flat):
            if size == slots:  # every slot: in place, as the static product
                return _scores(flat, table, bias)
            rows = order[:size]
            logits = _scores(flat[rows], table, bias)  # (size, vocab)
            return jnp.zeros((slots, logits.shape[-1]), logits.dtype).at[rows].set(
                logits, unique_indices=True)
        return run

    flat = x.reshape(slots, x.shape[2])
    logits = jax.lax.switch(branch, [scored(size) for size in bucket_sizes(slots)], flat)
    return logits.reshape(*x.shape[:2], -1)


def _scores_in_use_forward(x, table, bias, weights):
    order, branch = _in_use(weights)
    return _scored(x, table, bias, order, branch), (x, table, bias, order, branch)


def _scores_in_use_backward(residuals, gradient):
    x, table, bias, order, branch = residuals
    slots = x.shape[0] * x.shape[1]

    def taken(size):
        def run(flat, flat_gradient):
            every = size == slots  # every slot: in place, as the static product's VJP
            rows = order[:size]
            used, used_gradient = (flat, flat_gradient) if every else (flat[rows],
                                                                       flat_gradient[rows])
            # The product's own VJP (XLA drops the forward product jax.vjp traces: nothing
            # reads it), and the bias's sum as ones times the gradient, the ones first.
            _, vjp = jax.vjp(lambda used, table: _scores(used, table, None), used, table)
            x_rows, table_gradient = vjp(used_gradient)
            x_gradient = x_rows if every else jnp.zeros_like(flat).at[rows].set(
                x_rows, unique_indices=True)
            if bias is None:
                return x_gradient, table_gradient
            return x_gradient, table_gradient, _column_sums(used_gradient).astype(bias.dtype)
        return run

    flat, flat_gradient = x.reshape(slots, x.shape[2]), gradient.reshape(slots, -1)
    grads = jax.lax.switch(branch, [taken(size) for size in bucket_sizes(slots)], flat,
                           flat_gradient)
    return grads[0].reshape(x.shape), grads[1], None if bias is None else grads[2], None


def _column_sums(gradient: Array) -> Array:
    """The sum of (rows, vocab) `gradient`'s rows in float32, as a product with a row of ones
    on the left. Inside a branch, with the gradient on the left (add_bias's form), oneDNN read
    it transposed in place, slowly: ModernBERT's 3-layer packed train step, every slot in
    use, ran 0.976x-0.987x the static product's (AMX Xeon; 1.001x this way). Outside a
    conditional XLA writes the gradient out transposed once for the table's and the bias's
    products together."""
    ones = jnp.ones((gradient.shape[0],), gradient.dtype)
    return jax.lax.dot_general(ones, gradient, (((0,), (0,)), ((), ())),
                               precision=jax.lax.Precision.HIGHEST,
                               preferred_element_type=jnp.float32)


_scores_in_use.defvjp(_scores_in_use_forward, _scores_in_use_backward)
