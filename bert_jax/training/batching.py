"""In-memory batches for fine-tuning: padded only to a few bucketed lengths, resumable, per host.

Fine-tuning data is small (SST-2's 67k sentences are 4 MB of token ids), so it lives in
numpy. Real sentences are short, so each batch is padded only to the bucket of its longest
row (`inference.bucket_length`: 8, 12, 16, 24, 32, ... up to max_seq_len; jit compiles a
handful of programs, not one per batch). Training batches come from length-sorted windows of `window_batches` global
batches: rows of similar length share a batch and padding all but disappears, while the
window, the rows in it and the order of the batches are shuffled anew every epoch from
(seed, epoch), so the order is reproducible and the resume position is just (epoch, batch).

Every process holds the whole (small) data set and takes its own rows of each global
batch, so the bucket (which depends on the global batch) is the same on every process.
A last partial batch is filled with all-zero rows: every weight feature is 0 there, so
they count for nothing (their input_mask keeps one token, so attention stays defined).
"""

import numpy as np

from bert_jax.inference import bucket_length


def sequence_features(schema: dict) -> set[str]:
    """The features with a sequence axis (those whose shape depends on seq_len)."""
    probe = -7919  # a seq_len no real shape contains
    return {name for name, (_, shape_of) in schema.items() if probe in shape_of(1, probe)}


def lengths_of(features: dict) -> np.ndarray:
    """(N,) real tokens per row."""
    return features["input_mask"].sum(axis=1)


class BucketedBatches:
    """An endless iterator over epochs of `global_batch_size` batches (this process's rows).

    `features`: name -> (N, T) or (N, ...) numpy arrays, `sequence` the names of those with a
    sequence axis. With `shuffle=False` (evaluation) one pass in length order, then
    StopIteration; `order` then gives each batch's row indices.
    """

    def __init__(self, features: dict, sequence: set[str], global_batch_size: int,
                 max_seq_len: int, *, shuffle: bool = True, seed: int = 0,
                 process_index: int = 0, process_count: int = 1, window_batches: int = 50):
        self.features, self.sequence = features, sequence
        self.global_batch_size, self.max_seq_len = global_batch_size, max_seq_len
        self.shuffle, self.seed, self.window_batches = shuffle, seed, window_batches
        self.local_size = global_batch_size // process_count
        self.process_index = process_index
        self.lengths = lengths_of(features)
        self.epoch, self.position = 0, 0
        self._plan = self.plan(0)

    @property
    def num_examples(self) -> int:
        return len(self.lengths)

    @property
    def batches_per_epoch(self) -> int:
        return -(-self.num_examples // self.global_batch_size)

    def plan(self, epoch: int) -> list[np.ndarray]:
        """Each global batch's row indices for this epoch."""
        size = self.global_batch_size
        if not self.shuffle:
            order = np.argsort(self.lengths, kind="stable")
            return [order[start:start + size] for start in range(0, len(order), size)]
        rng = np.random.default_rng([self.seed, epoch])
        order = rng.permutation(self.num_examples)
        window = size * self.window_batches
        batches = []
        for start in range(0, len(order), window):
            rows = order[start:start + window]
            rows = rows[np.argsort(self.lengths[rows], kind="stable")]
            batches += [rows[begin:begin + size] for begin in range(0, len(rows), size)]
        return [batches[index] for index in rng.permutation(len(batches))]

    def state(self) -> dict:
        return {"epoch": self.epoch, "position": self.position}

    def restore(self, state: dict) -> None:
        self.epoch, self.position = int(state["epoch"]), int(state["position"])
        self._plan = self.plan(self.epoch)

    def __iter__(self):
        return self

    def __next__(self) -> dict:
        if self.position == len(self._plan):
            if not self.shuffle:
                raise StopIteration
            self.epoch, self.position = self.epoch + 1, 0
            self._plan = self.plan(self.epoch)
        rows = self._plan[self.position]
        self.position += 1
        return self.batch(rows)

    def batch(self, rows: np.ndarray) -> dict:
        """This process's share of the global batch `rows`, padded to its bucket."""
        seq_len = bucket_length(int(self.lengths[rows].max()), self.max_seq_len)
        mine = slice(self.process_index * self.local_size,
                     (self.process_index + 1) * self.local_size)
        local = np.full(self.global_batch_size, -1)
        local[:len(rows)] = rows
        local = local[mine]
        real = local >= 0
        batch = {}
        for name, values in self.features.items():
            shape = (len(local), seq_len) + values.shape[2:] if name in self.sequence else (
                (len(local),) + values.shape[1:])
            padded = np.zeros(shape, values.dtype)
            if name in self.sequence:
                kept = values[local[real], :seq_len]
                padded[real, :kept.shape[1]] = kept
            else:
                padded[real] = values[local[real]]
            batch[name] = padded
        batch["input_mask"][~real, 0] = 1
        return batch


def global_rows(plan_rows: np.ndarray, global_batch_size: int) -> np.ndarray:
    """The global batch's row indices with -1 for filler rows (for putting outputs back)."""
    rows = np.full(global_batch_size, -1)
    rows[:len(plan_rows)] = plan_rows
    return rows
