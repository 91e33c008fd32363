"""Training batches in which no text occurs twice, for in-batch-negative (mnrl) training.

Multiple-negatives ranking treats every other row's positive (and hard negative) as a
negative for an anchor. If the same text is in a batch twice (an NLI premise with two
entailed hypotheses, a sentence repeated in the file), the loss pushes a text away from
itself: a false negative. sentence-transformers avoids it with `NoDuplicatesBatchSampler`;
here the length-bucketed plan is kept and only the rows that clash are swapped with rows of
other batches, so the number of batches, each batch's size and (nearly) its length bucket
stay as they were, and the plan still depends only on (seed, epoch), so resume is exact.
"""

from collections import Counter

import numpy as np

from bert_jax.training.batching import BucketedBatches


def text_ids(features: dict) -> np.ndarray:
    """(N, sides) integer ids of the texts of each row: equal ids exactly for equal token ids,
    across sides too (a row's positive may be another row's anchor)."""
    sides = sorted(name for name in features if name.startswith("input_ids_"))
    stacked = np.concatenate([features[name] for name in sides])  # (sides * N, T)
    _, ids = np.unique(stacked, axis=0, return_inverse=True)
    return ids.reshape(len(sides), -1).T


def separate_duplicates(batches: list[np.ndarray], ids: np.ndarray) -> list[np.ndarray]:
    """`batches` with rows swapped between batches so that no batch holds a text twice.

    A row whose text is already in its batch is swapped with the nearest later (then
    earlier) batch's row whose texts clash with neither batch. Rows that no swap can place
    (a text in more rows than there are batches) stay where they are.
    """
    batches = [np.array(batch) for batch in batches]
    texts = [_texts(batch, ids) for batch in batches]  # per batch: rows holding each text
    for index, batch in enumerate(batches):
        for position in range(len(batch)):
            row = batch[position]
            if all(texts[index][text] == 1 for text in set(ids[row])):
                continue
            for other in [*range(index + 1, len(batches)), *range(index)]:
                candidate = _swappable(batches[other], texts[other], texts[index], ids, row)
                if candidate is not None:
                    _swap(batches, texts, ids, (index, position), (other, candidate))
                    break
    return batches


def _texts(batch: np.ndarray, ids: np.ndarray) -> Counter:
    return Counter(text for row in batch for text in set(ids[row]))


def _swappable(batch, batch_texts, clashing_texts, ids, row) -> int | None:
    """A position in `batch` whose row fits the clashing batch, and where `row` fits in."""
    if any(batch_texts[text] for text in set(ids[row])):
        return None
    for position, candidate in enumerate(batch):
        if not any(clashing_texts[text] for text in set(ids[candidate])):
            return position
    return None


def _swap(batches, texts, ids, first, second) -> None:
    (one, one_position), (two, two_position) = first, second
    left, right = batches[one][one_position], batches[two][two_position]
    for batch, removed, added in ((one, left, right), (two, right, left)):
        texts[batch].subtract(set(ids[removed]))
        texts[batch].update(set(ids[added]))
    batches[one][one_position], batches[two][two_position] = right, left


class DistinctTextBatches(BucketedBatches):
    """BucketedBatches whose training batches never hold the same text twice (see above)."""

    def __init__(self, features: dict, *args, **options):
        self.text_ids = text_ids(features)
        # Rows per text, each row counted once; a file without repeats needs no repair.
        per_row = [np.unique(row) for row in self.text_ids]
        self.repeats = bool(np.any(np.bincount(np.concatenate(per_row)) > 1))
        super().__init__(features, *args, **options)

    def plan(self, epoch: int) -> list[np.ndarray]:
        batches = super().plan(epoch)
        if not (self.shuffle and self.repeats):
            return batches
        return separate_duplicates(batches, self.text_ids)
