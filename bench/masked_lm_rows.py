"""The rows a masked-LM step bench feeds both sides (bench/modernbert_step.py and
bench/eurobert_step.py): sequences of a length mix laid out padded (one a row) or packed
(first fit), their masked positions, and each side's inputs made of them: bert-jax's
masked-LM batch (`tasks/masked_lm.py`'s schema) and transformers' labels and packed masks.

The length mix: a quarter of the sequences shorter than a `window` (ModernBERT's local
window; a nominal short length for a model without one), the rest between it and the row
length T. Padded: one sequence of T, one shorter than the window, the rest between. Packed:
sequences of the mix packed first-fit, a sequence that fits nowhere cut to the largest room
left (as a document's end is). Token values do not change the work, so ids are random and a
masked token keeps its id.
"""

import dataclasses

import numpy as np

from bench.torch_pretraining import instance_masks

SHORTEST = 16  # tokens: the shortest sequence, and the least room worth filling in a row


@dataclasses.dataclass
class Rows:
    """One layout's batch: per row, its sequences as (start, length); token ids (R, T); and
    per sequence the masked positions within it."""
    ids: np.ndarray  # (R, T) int32, 0 at padding
    sequences: list  # per row: [(start, length), ...]
    masked: list  # per row: per sequence, sorted positions within the sequence

    @property
    def real_tokens(self) -> int:
        return sum(length for row in self.sequences for _, length in row)

    @property
    def num_masked(self) -> int:
        return sum(len(positions) for row in self.masked for positions in row)


def sequence_length(rng, seq_len: int, window: int) -> int:
    """A quarter of the sequences shorter than the `window` (its tokens, both sides), the
    rest between it and T."""
    if rng.random() < 0.25:
        return int(rng.integers(SHORTEST, window))
    return int(rng.integers(window, seq_len + 1))


def layout_lengths(layout: str, rows: int, seq_len: int, window: int, rng) -> list:
    """Per row, the lengths of its sequences (see the module docstring)."""
    if layout == "padded":
        middle = [int(rng.integers(window, seq_len)) for _ in range(rows - 2)]
        return [[seq_len], *[[n] for n in middle], [int(rng.integers(SHORTEST, window))]][:rows]
    packed = [[] for _ in range(rows)]
    while True:
        rooms = [seq_len - sum(row) for row in packed]
        if max(rooms) < SHORTEST:
            return packed
        length = sequence_length(rng, seq_len, window)
        fitting = [index for index, room in enumerate(rooms) if room >= length]
        index = fitting[0] if fitting else int(np.argmax(rooms))
        packed[index].append(min(length, rooms[index]))


def make_rows(layout: str, rows: int, seq_len: int, window: int, vocab_size: int,
              seed: int = 0, *, mask_rate: float) -> Rows:
    """`rows` rows of `layout`, `mask_rate` of each sequence's tokens masked."""
    rng = np.random.default_rng(seed)
    ids = np.zeros((rows, seq_len), np.int32)
    sequences, masked = [], []
    for row, lengths in enumerate(layout_lengths(layout, rows, seq_len, window, rng)):
        starts = np.cumsum([0, *lengths[:-1]])
        ids[row, :sum(lengths)] = rng.integers(5, vocab_size, sum(lengths))
        sequences.append(list(zip(starts.tolist(), lengths)))
        masked.append([np.sort(rng.choice(length, int(mask_rate * length), replace=False))
                       for length in lengths])
    return Rows(ids, sequences, masked)


def instances(rows: Rows) -> tuple[np.ndarray, np.ndarray]:
    """(instance ids, position ids), each (R, T): 1, 2, ... per sequence of a row (0 at
    padding), and positions restarting at 0 at each sequence."""
    instance_ids = np.zeros(rows.ids.shape, np.int32)
    position_ids = np.zeros(rows.ids.shape, np.int32)
    for row, spans in enumerate(rows.sequences):
        for instance, (start, length) in enumerate(spans, 1):
            instance_ids[row, start:start + length] = instance
            position_ids[row, start:start + length] = np.arange(length)
    return instance_ids, position_ids


def jax_batch(rows: Rows, max_predictions: int, every_position: bool = False) -> dict:
    """The masked-LM task's batch (tasks/masked_lm.py's schema) of `rows`: the masked
    positions in the first slots or, with `every_position` (max_predictions = T), slot t at
    position t weighing 1 where t is masked: a head that scores every token."""
    instance_ids, position_ids = instances(rows)
    positions = np.zeros((len(rows.ids), max_predictions), np.int32)
    weights = np.zeros((len(rows.ids), max_predictions), np.float32)
    for row, (spans, masked) in enumerate(zip(rows.sequences, rows.masked)):
        row_positions = np.concatenate([start + m for (start, _), m in zip(spans, masked)])
        if every_position:
            positions[row] = np.arange(max_predictions)
            weights[row, row_positions] = 1.0
        else:
            positions[row, :len(row_positions)] = row_positions
            weights[row, :len(row_positions)] = 1.0
    return dict(input_ids=rows.ids, segment_ids=np.zeros_like(rows.ids),
                input_mask=(instance_ids > 0).astype(np.int32), instance_ids=instance_ids,
                position_ids=position_ids, masked_lm_positions=positions,
                masked_lm_ids=np.take_along_axis(rows.ids, positions, axis=1),
                masked_lm_weights=weights)


def torch_labels(rows: Rows):
    """(R, T) labels: the token at each masked position, -100 elsewhere."""
    import torch
    labels = np.full(rows.ids.shape, -100, np.int64)
    for row, (spans, masked) in enumerate(zip(rows.sequences, rows.masked)):
        for (start, _), positions in zip(spans, masked):
            labels[row, start + positions] = rows.ids[row, start + positions]
    return torch.from_numpy(labels)


def packed_masks(rows: Rows, window: int) -> dict:
    """transformers' per-layer-type attention masks of packed rows (`instance_masks`)."""
    return instance_masks(instances(rows)[0], window)


def unpacked(rows: Rows) -> Rows:
    """The same sequences one a row, padded to the longest."""
    spans = [(row, start, length) for row, row_spans in enumerate(rows.sequences)
             for start, length in row_spans]
    masked = [m for row in rows.masked for m in row]
    longest = max(length for _, _, length in spans)
    ids = np.zeros((len(spans), longest), np.int32)
    for index, (row, start, length) in enumerate(spans):
        ids[index, :length] = rows.ids[row, start:start + length]
    return Rows(ids, [[(0, length)] for _, _, length in spans], [[m] for m in masked])
