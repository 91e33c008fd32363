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
(`instance_starts`), NSP label and weight (1 = the slot holds an instance). The row's
masked positions are its instances' in turn, shifted into the row, in
`row_predictions(P, N)` = P + N slots: an instance predicts at most
round(masked_lm_prob x length), and at least 1, so when masked_lm_prob x seq_len <= P (the
usual setting: 20 at 128, 80 at 512) the instances of any full row fit; in any other
setting the packer never lets a row's predictions overflow (it opens another row). Slots
for N x P predictions would triple the masked-LM head's work, most of it on empty slots.

Masked-LM-only sequences (`create-data --objective mlm`, `mlm_sequences.py`) pack the same
way with their tokens alone: no masks (the reader draws them) and no per-instance slots.
"""

import numpy as np

BUFFER_INSTANCES = 4096  # instances packed together: enough for a high fill, small to bound memory


def row_predictions(max_predictions: int, max_per_row: int) -> int:
    """Masked-position slots of a packed row, from the per-instance count (see above)."""
    return max_predictions + max_per_row


def pack_lengths(lengths: np.ndarray, seq_len: int, max_per_row: int,
                 predictions: np.ndarray | None = None,
                 max_row_predictions: int | None = None) -> list[list[int]]:
    """Rows of instance indices, in the order rows were opened: each row's lengths sum to at
    most `seq_len`, its `predictions` (per instance) to at most `max_row_predictions`, and
    it holds at most `max_per_row` instances."""
    if predictions is None:
        predictions, max_row_predictions = np.zeros(len(lengths), np.int64), 0
    order = np.argsort(-np.asarray(lengths), kind="stable")  # longest first, ties in order
    open_rows = [[] for _ in range(seq_len + 1)]  # room left -> rows with that room
    has_room = np.zeros(seq_len + 1, bool)  # which entries of open_rows are non-empty
    rows, predicted = [], []
    for index in order.tolist():
        length, wanted = int(lengths[index]), int(predictions[index])
        row = None
        for room in (length + np.flatnonzero(has_room[length:])).tolist():  # fullest first
            candidates = [row for row in open_rows[room]
                          if predicted[row] + wanted <= max_row_predictions]
            if candidates:  # the latest opened of the fullest open rows that hold it
                row = candidates[-1]
                open_rows[room].remove(row)
                has_room[room] = bool(open_rows[room])
                break
        if row is None:
            row, room = len(rows), seq_len
            rows.append([])
            predicted.append(0)
        rows[row].append(index)
        predicted[row] += wanted
        room -= length
        if room > 0 and len(rows[row]) < max_per_row:
            open_rows[room].append(row)
            has_room[room] = True
    return rows


def pack_features(features: dict[str, np.ndarray], rows: list[list[int]], seq_len: int,
                  max_per_row: int) -> dict[str, np.ndarray]:
    """Packed rows (R, ...) of unpacked instance features (n, ...), `rows` from
    `pack_lengths`. Every row's instances keep their tokens, segments and masks; features
    without masks (masked-LM-only sequences) give the token features alone."""
    num_rows = len(rows)
    lengths = features["input_mask"].sum(axis=1)
    instance = np.fromiter((index for row in rows for index in row), np.int64)
    row_of = np.repeat(np.arange(num_rows), [len(row) for row in rows])
    slot = np.concatenate([np.arange(len(row)) for row in rows])

    def starts(sizes):  # where each instance's part begins in its row: the sizes before it
        return np.concatenate([np.cumsum([0] + [int(sizes[i]) for i in row[:-1]])
                               for row in rows]).astype(np.int64)

    offset = starts(lengths)
    token_names = [name for name in ("input_ids", "input_mask", "segment_ids")
                   if name in features]
    packed = {name: np.zeros((num_rows, seq_len), np.int32)
              for name in token_names + ["instance_ids", "position_ids"]}
    which, column = np.nonzero(np.arange(seq_len)[None, :] < lengths[instance][:, None])
    destination = (row_of[which], offset[which] + column)
    for name in token_names:
        packed[name][destination] = features[name][instance[which], column]
    packed["instance_ids"][destination] = slot[which] + 1
    packed["position_ids"][destination] = column
    if "masked_lm_positions" not in features:
        return packed

    max_predictions = features["masked_lm_positions"].shape[1]
    counts = (features["masked_lm_weights"] > 0).sum(axis=1)  # each instance's predictions
    prediction_offset = starts(counts)
    slots = row_predictions(max_predictions, max_per_row)
    if (prediction_offset + counts[instance]).max(initial=0) > slots:
        raise ValueError(f"a packed row holds more than {slots} predictions; pack_lengths "
                         "was not given the instances' prediction counts")
    # A weighted prediction is a prefix of its instance's P slots (padding comes last).
    which, column = np.nonzero(np.arange(max_predictions)[None, :] < counts[instance][:, None])
    destination = (row_of[which], prediction_offset[which] + column)
    for name, dtype, shift in (("masked_lm_positions", np.int32, offset[which]),
                               ("masked_lm_ids", np.int32, 0),
                               ("masked_lm_weights", np.float32, 0)):
        packed[name] = np.zeros((num_rows, slots), dtype)
        packed[name][destination] = features[name][instance[which], column] + shift

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
    masked = "masked_lm_positions" in features  # masked-LM-only sequences have no masks yet
    slots = (row_predictions(features["masked_lm_positions"].shape[1], max_per_row)
             if masked else None)
    parts = []
    for start in range(0, total, BUFFER_INSTANCES):
        part = {name: value[start:start + BUFFER_INSTANCES] for name, value in features.items()}
        rows = pack_lengths(part["input_mask"].sum(axis=1), seq_len, max_per_row,
                            (part["masked_lm_weights"] > 0).sum(axis=1) if masked else None,
                            slots)
        rows = [rows[index] for index in rng.permutation(len(rows))]
        parts.append(pack_features(part, rows, seq_len, max_per_row))
    return {name: np.concatenate([part[name] for part in parts]) for name in parts[0]}
