"""Losses: the fused pre-training loss (masked LM + next sentence) and the task heads' sums.

Pure functions of (logits, labels, weights), computed in float32 whatever the activation
dtype: a bf16 log-softmax over 30k classes loses the loss's low digits.
"""

import jax
import jax.numpy as jnp

from bert_jax.models.layers.platform import traced_platform

Array = jax.Array

# YNNPACK, which runs XLA's CPU reductions in jaxlib 0.10.2, slows down about nine times when
# the elementwise work fused into a reduction spans rows wider than this: logsumexp over
# 616 x 32,768 logits took 6.8 ms, over 616 x 32,769 62.5 ms (AMX Xeon, 2026-12-04). BERT's
# vocabulary (30,522) is under it; ModernBERT's (50,368) and EuroBERT's (128,256) are not.
# On a CPU a reduction over classes wider than this runs over pieces of at most this many.
YNNPACK_ROW_LIMIT = 32768
# Pieces narrower than this are not worth the split (a prime class count has no others).
NARROWEST_PIECE = 1024


# The scope the losses' operations are named by in a compiled program (aot_bytes, profiles).
SCOPE = "cross_entropy"


def cross_entropy(logits: Array, labels: Array) -> Array:
    """Per-example negative log-likelihood of `labels` under `logits` (..., classes)."""
    with jax.named_scope(SCOPE):
        return _negative_log_likelihood(logits.astype(jnp.float32), labels)


def _label_scores(logits: Array, labels: Array) -> Array:
    return jnp.take_along_axis(logits, labels[..., None], axis=-1)[..., 0]


# The gradient written as softmax minus one-hot, not left to autodiff: autodiff of
# take_along_axis scatters into a zeroed (..., classes) buffer and adds it to the log-softmax's
# gradient, and behind a masked-LM decoder XLA's CPU compiler wrote that sum out a second time,
# transposed, for the weight gradient's product: 3.9 s of a 17 s EuroBERT-210m step (3 layers,
# 2 x 1,024 tokens, 128,256 classes), 0.7 s with this form (bench/eurobert_step.py; docs/eurobert.md).
@jax.custom_vjp
def _negative_log_likelihood(logits: Array, labels: Array) -> Array:
    return _negative_log_likelihood_forward(logits, labels)[0]


def _negative_log_likelihood_forward(logits: Array, labels: Array):
    log_normaliser = _log_normaliser(logits)
    return log_normaliser - _label_scores(logits, labels), (logits, log_normaliser, labels)


def _negative_log_likelihood_backward(residuals, upstream: Array):
    logits, log_normaliser, labels = residuals
    with jax.named_scope(SCOPE):
        one_hot = labels[..., None] == jnp.arange(logits.shape[-1], dtype=labels.dtype)
        probabilities = jnp.exp(logits - log_normaliser[..., None])
        return upstream[..., None] * (probabilities - one_hot), None  # labels: no gradient


_negative_log_likelihood.defvjp(_negative_log_likelihood_forward,
                                _negative_log_likelihood_backward)


def top_class_is(logits: Array, labels: Array) -> Array:
    """Whether `labels` is `argmax(logits, -1)` (the first of tied maxima, as argmax), as
    float32 1.0 / 0.0. Two plain reductions (the maximum, then the first index holding it)
    instead of argmax's (value, index) pair reduction, which XLA's CPU compiler does not
    vectorise: 441 ms of the EuroBERT step above over 128,256 classes."""
    num_classes = logits.shape[-1]
    with jax.named_scope(SCOPE):
        pieces = _pieces(logits)
        classes = jnp.arange(num_classes, dtype=jnp.int32).reshape(pieces.shape[-2:])
        maximum = _joined(jnp.max(pieces, axis=-1), jnp.max)
        at_maximum = pieces == maximum[..., None, None]
        first = _joined(jnp.min(jnp.where(at_maximum, classes, num_classes), axis=-1), jnp.min)
        return (first == labels).astype(jnp.float32)


def _log_normaliser(logits: Array) -> Array:
    """log(sum(exp(logits))) over the last axis, as `jax.nn.logsumexp` computes it (the
    maximum subtracted first, 0 in its place where it is not finite), over `_pieces`."""
    pieces = _pieces(logits)
    maximum = _joined(jnp.max(pieces, axis=-1), jnp.max)
    maximum = jax.lax.stop_gradient(jnp.where(jnp.isfinite(maximum), maximum, 0.0))
    sums = _joined(jnp.sum(jnp.exp(pieces - maximum[..., None, None]), axis=-1), jnp.sum)
    return jnp.log(sums) + maximum


def _pieces(logits: Array) -> Array:
    """`logits` (..., classes) as (..., pieces, classes / pieces): on a CPU, pieces at most
    YNNPACK_ROW_LIMIT wide where the class count divides into some no narrower than
    NARROWEST_PIECE; elsewhere one piece."""
    num_classes = logits.shape[-1]
    count = 1
    if traced_platform() == "cpu" and num_classes > YNNPACK_ROW_LIMIT:
        count = next((candidate for candidate in range(2, num_classes // NARROWEST_PIECE + 1)
                      if num_classes % candidate == 0
                      and num_classes // candidate <= YNNPACK_ROW_LIMIT), 1)
    return logits.reshape(*logits.shape[:-1], count, num_classes // count)


def _joined(per_piece: Array, reduction) -> Array:
    """`reduction` over the pieces' axis of per-piece results (..., pieces). The barrier keeps
    XLA from merging the two reductions back into one over the whole row."""
    if per_piece.shape[-1] == 1:
        return per_piece[..., 0]
    return reduction(jax.lax.optimization_barrier(per_piece), axis=-1)


def pretraining_loss(mlm_logits: Array, nsp_logits: Array, masked_lm_ids: Array,
                     masked_lm_weights: Array, next_sentence_labels: Array
                     ) -> tuple[Array, dict[str, Array]]:
    """BERT's pre-training objective and its metrics.

    Args:
      mlm_logits: (B, P, vocab) scores at the P gathered masked positions.
      nsp_logits: (B, 2) next-sentence scores; label 1 means B is a random segment.
      masked_lm_ids: (B, P) original token ids at the masked positions.
      masked_lm_weights: (B, P) 1.0 for a real prediction, 0.0 for padding slots.
      next_sentence_labels: (B,) or (B, 1) int labels.

    Returns:
      (loss, metrics): loss = weighted-mean MLM cross-entropy + mean NSP cross-entropy.
      The metrics hold both parts, both accuracies and the number of MLM predictions.
    """
    weights = masked_lm_weights.astype(jnp.float32)
    # The original adds 1e-5 to the denominator so that a batch with no predictions is 0, not NaN.
    num_predictions = jnp.sum(weights)
    denominator = num_predictions + 1e-5
    mlm_nll = cross_entropy(mlm_logits, masked_lm_ids)  # (B, P)
    mlm_loss = jnp.sum(mlm_nll * weights) / denominator
    mlm_correct = top_class_is(mlm_logits, masked_lm_ids)
    mlm_accuracy = jnp.sum(mlm_correct * weights) / denominator

    labels = next_sentence_labels.reshape(-1)
    nsp_loss = jnp.mean(cross_entropy(nsp_logits, labels))
    nsp_accuracy = jnp.mean((jnp.argmax(nsp_logits, axis=-1) == labels).astype(jnp.float32))

    loss = mlm_loss + nsp_loss
    metrics = dict(loss=loss, mlm_loss=mlm_loss, nsp_loss=nsp_loss, mlm_accuracy=mlm_accuracy,
                   nsp_accuracy=nsp_accuracy, num_predictions=num_predictions)
    return loss, metrics


def classification_sums(logits: Array, labels: Array, weights: Array) -> dict[str, Array]:
    """Summed cross-entropy and correct predictions of weighted examples.

    Args:
      logits: (..., classes) scores; labels: (...) int classes; weights: (...) 1.0 for an
        example (or token) that counts, 0.0 for padding or an ignored position.

    Returns:
      {'loss': sum(nll * w), 'accuracy': sum(correct * w)}, float32; divide by sum(w).
    """
    weights = weights.astype(jnp.float32)
    safe_labels = jnp.where(weights > 0, labels, 0)  # ignored positions may hold -100
    nll = cross_entropy(logits, safe_labels)
    correct = (jnp.argmax(logits, axis=-1) == safe_labels).astype(jnp.float32)
    return {"loss": jnp.sum(nll * weights), "accuracy": jnp.sum(correct * weights)}


def regression_sums(predictions: Array, targets: Array, weights: Array) -> dict[str, Array]:
    """Summed squared error (MSE as HF's `problem_type=regression`) of weighted examples.

    predictions (B,) or (B, 1), targets (B,), weights (B,) -> {'loss': sum((p - t)^2 * w)}.
    """
    error = predictions.reshape(targets.shape).astype(jnp.float32) - targets.astype(jnp.float32)
    return {"loss": jnp.sum(jnp.square(error) * weights.astype(jnp.float32))}
