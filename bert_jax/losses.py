"""Losses: the fused pre-training loss (masked LM + next sentence) and the task heads' sums.

Pure functions of (logits, labels, weights), computed in float32 whatever the activation
dtype: a bf16 log-softmax over 30k classes loses the loss's low digits.
"""

import jax
import jax.numpy as jnp

Array = jax.Array


def cross_entropy(logits: Array, labels: Array) -> Array:
    """Per-example negative log-likelihood of `labels` under `logits` (..., classes)."""
    log_probabilities = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    return -jnp.take_along_axis(log_probabilities, labels[..., None], axis=-1)[..., 0]


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
    mlm_correct = (jnp.argmax(mlm_logits, axis=-1) == masked_lm_ids).astype(jnp.float32)
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
