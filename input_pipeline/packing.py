"""Packed pre-training rows: up to N instances per row, so little of a row is padding.

Which instances share a row is chosen by shortest-pack-first histogram packing (Krell et
al. 2021, "Efficient Sequence Packing without Cross-contamination"): instances are taken
longest first, and each goes into the open row with the least room that still holds it
(best fit) and has fewer than N instances, else it opens a row. Longest first places the
instances that need a row of their own before the short ones that fill the gaps; best fit
keeps the large gaps for the instances that need them.

It packs a bounded buffer of instances at a time (`BUFFER_INSTANCES` of a work unit, in
the unit's shuffled order), so memory stays flat and a unit's rows depend only on that
unit: the shards stay independent of the worker count and identical between runners.
On War and Peace at 512 tokens a buffer of 1,000 instances fills as well as one of
20,000 (the gaps left are short instances that only fit three to a row).

A packed row keeps every instance as it was made ([CLS] A [SEP] B [SEP], its own segment
ids and masks) and adds, per token, `instance_ids` (1..N, 0 = padding) and `position_ids`
(restarting at 0 at each instance's [CLS]); per instance slot, its [CLS] position
(`instance_starts`), NSP label and weight (1 = the slot holds an instance); and each
instance's `max_predictions` masked positions, shifted into the row, in its own slot
of the row's N x max_predictions.
"""

import numpy as np

BUFFER_INSTANCES = 4096  # instances packed together: enough for a high fill, small to bound memory


def pack_lengths(lengths: np.ndarray, seq_len: int, max_per_row: int) -> list[list[int]]:
    """Rows of instance indices (each row's lengths sum to at most `seq_len`, at most
    `max_per_row` of them), in the order rows were opened."""
    order = np.argsort(-np.asarray(lengths), kind="stable")  # longest first, ties in order
    open_rows = [[] for _ in range(seq_len + 1)]  # room left -> rows with that room
    has_room = np.zeros(seq_len + 1, bool)  # which entries of open_rows are non-empty
    rows = []
    for index in order.tolist():
        length = int(lengths[index])
        fitting = np.flatnonzero(has_room[length:])
        if len(fitting):  # the fullest open row that holds it
            room = length + int(fitting[0])
            row = open_rows[room].pop()
            has_room[room] = bool(open_rows[room])
            rows[row].append(index)
        else:
            row, room = len(rows), seq_len
            rows.append([index])
        room -= length
        if room > 0 and len(rows[row]) < max_per_row:
            open_rows[room].append(row)
            has_room[room] = True
    return rows


def pack_features(features: dict[str, np.ndarray], rows: list[list[int]], seq_len: int,
                  max_per_row: int) -> dict[str, np.ndarray]:
    """Packed rows (R, ...) of unpacked instance features (N, ...), `rows` from
    `pack_lengths`. Every row's instances keep their tokens, segments and masks."""
    num_rows = len(rows)
    max_predictions = features["masked_lm_positions"].shape[1]
    lengths = features["input_mask"].sum(axis=1)
    instance = np.fromiter((index for row in rows for index in row), np.int64)
    row_of = np.repeat(np.arange(num_rows), [len(row) for row in rows])
    slot = np.concatenate([np.arange(len(row)) for row in rows])
    # An instance's first token in its row: the lengths of the instances before it.
    offset = np.concatenate([np.cumsum([0] + [int(lengths[i]) for i in row[:-1]])
                             for row in rows]).astype(np.int64)

    packed = {name: np.zeros((num_rows, seq_len), np.int32)
              for name in ("input_ids", "input_mask", "segment_ids", "instance_ids",
                           "position_ids")}
    position = np.arange(seq_len)[None, :]
    real = position < lengths[instance][:, None]  # (n, T)
    which, column = np.nonzero(real)
    destination = (row_of[which], offset[which] + column)
    for name in ("input_ids", "input_mask", "segment_ids"):
        packed[name][destination] = features[name][instance[which], column]
    packed["instance_ids"][destination] = slot[which] + 1
    packed["position_ids"][destination] = column

    prediction_columns = slot[:, None] * max_predictions + np.arange(max_predictions)
    shape = (num_rows, max_per_row * max_predictions)
    weights = features["masked_lm_weights"][instance]
    packed["masked_lm_positions"] = np.zeros(shape, np.int32)
    packed["masked_lm_positions"][row_of[:, None], prediction_columns] = np.where(
        weights > 0, features["masked_lm_positions"][instance] + offset[:, None], 0)
    packed["masked_lm_ids"] = np.zeros(shape, np.int32)
    packed["masked_lm_ids"][row_of[:, None], prediction_columns] = \
        features["masked_lm_ids"][instance]
    packed["masked_lm_weights"] = np.zeros(shape, np.float32)
    packed["masked_lm_weights"][row_of[:, None], prediction_columns] = weights

    for name, value, dtype in (("instance_starts", offset, np.int32),
                               ("next_sentence_labels",
                                features["next_sentence_labels"].reshape(-1)[instance], np.int32),
                               ("next_sentence_weights", 1.0, np.float32)):
        packed[name] = np.zeros((num_rows, max_per_row), dtype)
        packed[name][row_of, slot] = value
    return packed


def pack_unit(features: dict[str, np.ndarray], seq_len: int, max_per_row: int,
              rng: np.random.Generator) -> dict[str, np.ndarray]:
    """A work unit's instances (in its shuffled order) as packed rows, buffer by buffer;
    the rows of each buffer are shuffled so that full and mixed rows interleave."""
    total = len(features["input_ids"])
    parts = []
    for start in range(0, total, BUFFER_INSTANCES):
        part = {name: value[start:start + BUFFER_INSTANCES] for name, value in features.items()}
        rows = pack_lengths(part["input_mask"].sum(axis=1), seq_len, max_per_row)
        rows = [rows[index] for index in rng.permutation(len(rows))]
        parts.append(pack_features(part, rows, seq_len, max_per_row))
    return {name: np.concatenate([part[name] for part in parts]) for name in parts[0]}
