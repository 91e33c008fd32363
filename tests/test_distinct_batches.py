"""mnrl's batches never hold a text twice: checked on a file full of repeated premises."""

import numpy as np

from bert_jax.training.distinct_batches import DistinctTextBatches, separate_duplicates, text_ids
from bert_jax.training.batching import BucketedBatches


def _features(rows: int, distinct_anchors: int, seed: int = 0) -> dict:
    """Pairs whose anchors repeat (an NLI premise with several entailed hypotheses)."""
    rng = np.random.default_rng(seed)
    anchors = rng.integers(5, 90, (distinct_anchors, 12))
    anchor_ids = anchors[rng.integers(0, distinct_anchors, rows)]
    positive_ids = rng.integers(5, 90, (rows, 12))
    lengths = rng.integers(3, 13, rows)
    mask = (np.arange(12)[None] < lengths[:, None]).astype(np.int32)
    return dict(input_ids_a=(anchor_ids * mask).astype(np.int32), input_mask_a=mask,
                input_ids_b=(positive_ids * mask).astype(np.int32), input_mask_b=mask,
                input_mask=mask, labels=np.zeros(rows, np.float32),
                weights=np.ones(rows, np.float32))


def _clashes(batches, ids) -> int:
    return sum(len(np.concatenate([np.unique(ids[row]) for row in batch]))
               - len(np.unique(ids[batch])) for batch in batches)


def test_text_ids_are_equal_exactly_for_equal_token_ids_across_sides():
    features = dict(input_ids_a=np.array([[1, 2], [3, 4], [1, 2]]),
                    input_ids_b=np.array([[3, 4], [5, 6], [7, 0]]))
    ids = text_ids(features)
    assert ids[0, 0] == ids[2, 0] and ids[0, 1] == ids[1, 0]  # a's [1 2]; b's [3 4] = a's
    assert len(np.unique(ids)) == 4


def test_no_batch_holds_a_text_twice_and_the_plan_keeps_its_shape():
    features = _features(rows=400, distinct_anchors=150)
    sequence = {"input_ids_a", "input_mask_a", "input_ids_b", "input_mask_b", "input_mask"}
    plain = BucketedBatches(features, sequence, 16, 12, seed=3, window_batches=5)
    distinct = DistinctTextBatches(features, sequence, 16, 12, seed=3, window_batches=5)
    ids = distinct.text_ids
    for epoch in range(3):
        before, after = plain.plan(epoch), distinct.plan(epoch)
        assert _clashes(before, ids) > 0  # the plain plan does put repeats together
        assert _clashes(after, ids) == 0
        assert [len(batch) for batch in after] == [len(batch) for batch in before]
        assert sorted(np.concatenate(after)) == list(range(400))  # every row once
        # Reproducible from (seed, epoch), so a resumed run sees the same batches.
        assert all(np.array_equal(a, b) for a, b in zip(after, distinct.plan(epoch)))


def test_rows_that_cannot_be_separated_stay_in_place():
    ids = np.array([[0, 1], [0, 2], [0, 3]])  # one anchor in three rows, two batches
    batches = separate_duplicates([np.array([0, 1]), np.array([2])], ids)
    assert sorted(np.concatenate(batches)) == [0, 1, 2]
    assert [len(batch) for batch in batches] == [2, 1]


def test_evaluation_order_is_untouched():
    features = _features(rows=50, distinct_anchors=10)
    sequence = {"input_ids_a", "input_mask_a", "input_ids_b", "input_mask_b", "input_mask"}
    plain = BucketedBatches(features, sequence, 8, 12, shuffle=False)
    distinct = DistinctTextBatches(features, sequence, 8, 12, shuffle=False)
    assert all(np.array_equal(a, b) for a, b in zip(plain.plan(0), distinct.plan(0)))
