"""Siamese losses against naive numpy, and MNRL's negatives spanning every device."""

import jax
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec
from tolerances import assert_close

from bert_jax.embeddings import losses


def unit(vectors):
    return vectors / np.linalg.norm(vectors, axis=-1, keepdims=True)


def naive_mnrl(anchors, candidates, weights, scale=20.0):
    total = 0.0
    for i in range(len(anchors)):
        if not weights[i]:
            continue
        logits = [scale * unit(anchors[i]) @ unit(candidate) for j, candidate
                  in enumerate(candidates) if weights[j % len(anchors)]]
        position = sum(1 for j in range(i) if weights[j])  # positive i among the real ones
        total += np.log(np.sum(np.exp(logits))) - logits[position]
    return total, weights.sum()


def naive_cosent(first, second, gold, weights, scale=20.0):
    cosines = [unit(a) @ unit(b) for a, b in zip(first, second)]
    terms = [np.exp(scale * (cosines[j] - cosines[i])) for i in range(len(gold))
             for j in range(len(gold)) if gold[i] > gold[j] and weights[i] and weights[j]]
    return np.log(1 + np.sum(terms))


@pytest.fixture
def batch():
    rng = np.random.default_rng(0)
    anchors, positives, negatives = (rng.normal(size=(8, 6)).astype(np.float32)
                                     for _ in range(3))
    gold = rng.uniform(0, 1, size=8).astype(np.float32)
    gold[3] = gold[5]  # a tie: neither pair ranks the other
    weights = np.array([1, 1, 1, 1, 1, 1, 1, 0], np.float32)  # the last row is filler
    return anchors, positives, negatives, gold, weights


# Ours (XLA) and numpy's, both float32, relative to the loss: a cosine sums 12 products, a
# log-softmax sums up to 16 exponentials, the loss sums 8 rows; either side may round each
# step once more: 2 x (12 + 16 + 8).
LOSS_STEPS = 2 * (12 + 16 + 8)


def test_mnrl_matches_numpy_with_and_without_hard_negatives(batch):
    anchors, positives, negatives, _, weights = batch
    total, count = losses.mnrl_loss(anchors, positives, weights)
    expected, expected_count = naive_mnrl(anchors, positives, weights)
    assert_close(total, expected, LOSS_STEPS)
    assert count == expected_count == 7
    total, _ = losses.mnrl_loss(anchors, positives, weights, negatives)
    expected, _ = naive_mnrl(anchors, np.concatenate([positives, negatives]), weights)
    assert_close(total, expected, LOSS_STEPS)


def test_cosent_cosine_and_softmax_losses_match_numpy(batch):
    first, second, _, gold, weights = batch
    loss, count = losses.cosent_loss(first, second, gold, weights)
    assert_close(loss, naive_cosent(first, second, gold, weights), LOSS_STEPS)
    assert count == 1
    total, count = losses.cosine_loss(first, second, gold, weights)
    cosines = (unit(first) * unit(second)).sum(-1)
    assert_close(total, (((cosines - gold) ** 2) * weights).sum(), LOSS_STEPS)
    features = np.asarray(losses.softmax_features(first, second))
    np.testing.assert_array_equal(features[:, 12:], np.abs(first - second))
    logits, labels = first[:, :3], np.array([0, 1, 2, 0, 1, 2, 0, 1])
    total, count = losses.softmax_loss(logits, labels, weights)
    log_softmax = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    expected = -(log_softmax[np.arange(8), labels] * weights).sum()
    assert_close(total, expected, LOSS_STEPS)


def test_mnrl_on_a_sharded_global_batch_equals_one_device(batch):
    anchors, positives, negatives, _, weights = batch
    weights = np.ones_like(weights)

    def loss(anchors, positives, negatives, weights):
        total, count = losses.mnrl_loss(anchors, positives, weights, negatives)
        return total / count

    value_and_grad = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2)))
    single = value_and_grad(anchors, positives, negatives, weights)
    mesh = Mesh(np.array(jax.devices()[:8]), ("data",))
    rows = NamedSharding(mesh, PartitionSpec("data"))
    placed = [jax.device_put(array, rows) for array in (anchors, positives, negatives, weights)]
    assert len(placed[0].sharding.device_set) == 8  # one row per device
    sharded = value_and_grad(*placed)
    # The same function with its rows on 8 devices: the same float32 sums, split otherwise.
    assert_close(sharded[0], single[0], LOSS_STEPS)
    for ours, reference in zip(sharded[1], single[1]):
        assert_close(ours, reference, LOSS_STEPS)
    # Negatives from the own device only would give a different loss: here, with one row per
    # device, a per-device loss would see no negative at all besides its hard negative.
    per_device = np.mean([loss(anchors[i:i + 1], positives[i:i + 1], negatives[i:i + 1],
                               weights[i:i + 1]) for i in range(8)])
    assert abs(per_device - float(single[0])) > 0.1
