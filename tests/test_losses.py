"""The fused pre-training loss against a naive numpy reference written loop by loop."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tolerances import assert_close

from bert_jax import losses
from bert_jax.losses import cross_entropy, pretraining_loss, top_class_is


def naive_reference(mlm_logits, nsp_logits, masked_lm_ids, masked_lm_weights, labels):
    """Cross-entropies one example at a time, in float64, as a textbook would write them."""
    def negative_log_likelihood(scores, label):
        top = max(scores)
        log_sum = top + math.log(sum(math.exp(s - top) for s in scores))
        return log_sum - scores[label]

    total, weight_sum, correct = 0.0, 0.0, 0.0
    batch, predictions, _ = mlm_logits.shape
    for b in range(batch):
        for p in range(predictions):
            weight = float(masked_lm_weights[b, p])
            scores = [float(s) for s in mlm_logits[b, p]]
            total += weight * negative_log_likelihood(scores, masked_lm_ids[b, p])
            weight_sum += weight
            correct += weight * (int(np.argmax(scores)) == masked_lm_ids[b, p])
    nsp_total, nsp_correct = 0.0, 0
    for b in range(batch):
        scores = [float(s) for s in nsp_logits[b]]
        nsp_total += negative_log_likelihood(scores, labels[b])
        nsp_correct += int(np.argmax(scores)) == labels[b]
    mlm_loss = total / (weight_sum + 1e-5)  # the loss's own guard against 0 (not a tolerance)
    nsp_loss = nsp_total / batch
    return dict(loss=mlm_loss + nsp_loss, mlm_loss=mlm_loss, nsp_loss=nsp_loss,
                mlm_accuracy=correct / (weight_sum + 1e-5), nsp_accuracy=nsp_correct / batch,
                num_predictions=weight_sum)


# Roundings a float32 pre-training loss may take against float64: a log-sum-exp over 50
# logits and a mean over up to 24 slots, with room for XLA's blocking of both sums.
LOSS_STEPS = 2 * (50 + 24)


def make_inputs(seed, batch=4, predictions=6, vocab=50):
    rng = np.random.default_rng(seed)
    mlm_logits = rng.normal(0, 3, (batch, predictions, vocab)).astype(np.float32)
    nsp_logits = rng.normal(0, 2, (batch, 2)).astype(np.float32)
    masked_lm_ids = rng.integers(0, vocab, (batch, predictions))
    # Make some predictions correct, so accuracy is neither 0 nor 1.
    masked_lm_ids[:, :2] = mlm_logits[:, :2].argmax(-1)
    # Padding slots at the end of each row, as the shard writer produces them.
    masked_lm_weights = (np.arange(predictions)[None] < rng.integers(1, predictions + 1, (batch, 1)))
    labels = rng.integers(0, 2, (batch,))
    return mlm_logits, nsp_logits, masked_lm_ids, masked_lm_weights.astype(np.float32), labels


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_loss_and_metrics_match_numpy_reference(seed):
    inputs = make_inputs(seed)
    _, metrics = pretraining_loss(*(jnp.asarray(x) for x in inputs))
    expected = naive_reference(*inputs)
    for name, value in expected.items():
        # float32 against float64: a log-sum-exp over 50 logits (~50 roundings relative to
        # the result) averaged over up to 24 slots (24 more): LOSS_STEPS of the value.
        assert_close(float(metrics[name]), value, LOSS_STEPS, err_msg=name)


def test_padding_slots_do_not_count():
    mlm_logits, nsp_logits, ids, weights, labels = make_inputs(3)
    _, before = pretraining_loss(mlm_logits, nsp_logits, ids, weights, labels)
    # Change the logits and labels of every padding slot: nothing may move.
    mlm_logits = np.where(weights[..., None] > 0, mlm_logits, 100.0 * mlm_logits)
    ids = np.where(weights > 0, ids, 0)
    _, after = pretraining_loss(mlm_logits, nsp_logits, ids, weights, labels)
    for name in ("mlm_loss", "mlm_accuracy"):
        # Padding slots add exact zeros: equal to the bit (1e-6 relative is 8 steps).
        assert float(before[name]) == pytest.approx(float(after[name]), rel=1e-6)


def test_bfloat16_logits_are_scored_in_float32():
    inputs = list(make_inputs(4))
    as_bfloat16 = [jnp.asarray(inputs[0], jnp.bfloat16), jnp.asarray(inputs[1], jnp.bfloat16)]
    loss, _ = pretraining_loss(*as_bfloat16, *inputs[2:])
    assert loss.dtype == jnp.float32
    # The reference sees the same rounded logits, so only the loss arithmetic is compared.
    rounded = [np.asarray(x.astype(jnp.float32)) for x in as_bfloat16]
    expected = naive_reference(*rounded, *inputs[2:])["loss"]
    assert_close(float(loss), expected, LOSS_STEPS)  # as above, on the rounded logits


def test_batch_without_predictions_gives_zero_not_nan():
    mlm_logits, nsp_logits, ids, weights, labels = make_inputs(5)
    _, metrics = pretraining_loss(mlm_logits, nsp_logits, ids, np.zeros_like(weights), labels)
    assert float(metrics["mlm_loss"]) == 0.0
    assert np.isfinite(float(metrics["loss"]))


def test_cross_entropy_gradient_is_softmax_minus_one_hot_in_float64():
    """The hand-written gradient (losses.py) against the textbook one, computed in float64:
    d/dlogits of sum(w * nll) = w * (softmax - one_hot)."""
    rng = np.random.default_rng(6)
    logits = rng.normal(0, 3, (3, 5, 50)).astype(np.float32)
    labels = rng.integers(0, 50, (3, 5))
    weights = rng.random((3, 5)).astype(np.float32)
    gradient = jax.grad(lambda x: jnp.sum(cross_entropy(x, jnp.asarray(labels)) * weights))(
        jnp.asarray(logits))
    wide = logits.astype(np.float64)
    softmax = np.exp(wide - wide.max(-1, keepdims=True))
    softmax /= softmax.sum(-1, keepdims=True)
    expected = weights[..., None] * (softmax - np.eye(50)[labels])
    # exp(x - lse) in float32: the exponent's argument is off by a few steps of |x| <= ~15,
    # which moves exp by that much relative (so steps of 15 x its value, at most 1): 64 steps.
    assert_close(np.asarray(gradient), expected, 64, scale=1.0)


def test_top_class_is_argmax_with_its_first_of_tied_maxima():
    logits = jnp.asarray([[1.0, 3.0, 3.0, 2.0],  # tied at 1 and 2: argmax says 1
                          [0.5, 0.5, 0.5, 0.5],  # all tied: 0
                          [-1.0, -3.0, -2.0, -0.5]], jnp.bfloat16)
    for label in range(4):
        labels = jnp.full((3,), label)
        expected = (np.argmax(np.asarray(logits, np.float32), -1) == label).astype(np.float32)
        np.testing.assert_array_equal(np.asarray(top_class_is(logits, labels)), expected)
    many = jnp.asarray(np.random.default_rng(7).normal(size=(4, 6, 1000)), jnp.bfloat16)
    labels = jnp.asarray(np.random.default_rng(8).integers(0, 1000, (4, 6)))
    labels = labels.at[:, :3].set(jnp.argmax(many, -1)[:, :3])
    np.testing.assert_array_equal(np.asarray(top_class_is(many, labels)),
                                  np.asarray(jnp.argmax(many, -1) == labels, np.float32))


@pytest.mark.parametrize("classes, pieces", [
    (30522, 1), (32768, 1),  # BERT's vocabulary, and the widest row in one piece
    (50368, 2), (128256, 4),  # ModernBERT's and EuroBERT's: 25,184 and 32,064 wide
    (250002, 9),  # XLM-R's: 2 x 3 x 3 x 13,889, so 9 pieces of 27,778
    (32771, 1),  # a prime: only pieces of one class would divide it
])
def test_a_cpu_reduces_a_wide_row_of_classes_in_pieces(classes, pieces):
    split = losses._pieces(jnp.zeros((2, classes)))
    assert split.shape == (2, pieces, classes // pieces)


def test_other_platforms_reduce_the_whole_row(monkeypatch):
    monkeypatch.setattr(losses, "traced_platform", lambda: "tpu")
    assert losses._pieces(jnp.zeros((2, 50368))).shape == (2, 1, 50368)


def test_wide_rows_in_pieces_give_the_loss_its_gradient_and_the_first_tied_maximum():
    """40,000 classes, so a CPU reduces each row in 2 pieces of 20,000 (losses._pieces):
    the loss and its gradient against float64, and the first of maxima tied across pieces."""
    rng = np.random.default_rng(9)
    logits = rng.normal(0, 3, (4, 40000)).astype(np.float32)
    logits[0, [5, 25000]] = 20.0  # tied: one in each piece
    logits[1, [21000, 39999]] = 20.0  # tied, both in the second piece
    logits[2, 30000] = 20.0
    labels = np.array([25000, 21000, 30000, 7])
    nll, gradient = jax.value_and_grad(lambda x: jnp.sum(cross_entropy(x, labels)))(
        jnp.asarray(logits))
    wide = logits.astype(np.float64)
    top = wide.max(-1, keepdims=True)
    log_sum = top[:, 0] + np.log(np.exp(wide - top).sum(-1))
    # Each of XLA's 16 lanes adds up to 20,000 / 16 terms <= 1 one after another, and the
    # log-sum-exp is about 20 here: 1,250 roundings of 20. A lost piece moves it by log 2.
    assert_close(nll, np.sum(log_sum - wide[np.arange(4), labels]), 4 * 1250, scale=20.0)
    softmax = np.exp(wide - log_sum[:, None])
    expected = softmax.copy()
    expected[np.arange(4), labels] -= 1.0
    # exp(x - lse): the exponent off by the log-sum-exp's error above, 1,250 steps of 20,
    # relative to exp's value (at most 1).
    assert_close(np.asarray(gradient), expected, 1250 * 20, scale=1.0)
    np.testing.assert_array_equal(np.asarray(top_class_is(jnp.asarray(logits), labels)),
                                  [0.0, 1.0, 1.0, float(np.argmax(logits[3]) == 7)])
    first = np.array([5, 21000, 30000, 7])
    np.testing.assert_array_equal(np.asarray(top_class_is(jnp.asarray(logits), first)),
                                  [1.0, 1.0, 1.0, float(np.argmax(logits[3]) == 7)])

