"""`tf.train.Example` protobuf bytes for a whole batch of instances at once, with numpy.

Building one Example proto per instance in Python is the slowest step of the original tool.
The wire format is simple enough to write directly: every instance is
`Example{features: Features{feature: map<string, Feature>}}`, each map entry a
`{key, Feature{int64_list | float_list{packed values}}}`. We compute every length prefix
for all rows together, then scatter the pieces into one byte buffer. Integers are
canonical varints and the features come in the original writer's order, so the bytes
parse with `tf.io.parse_single_example` and equal what protobuf itself writes (tested).
"""

import numpy as np

from input_pipeline import schema

_MAX_VARINT_BYTES = 5  # enough for any uint32


def varint_bytes(values: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """Protobuf varints of values in [0, 2**32): bytes (..., K) uint8 and lengths (...,).

    K is the most bytes any value needs, so small values (masks, labels) cost one column;
    then every length is 1 and None is returned for the lengths.
    """
    values = np.asarray(values)
    lowest, largest = int(values.min(initial=0)), int(values.max(initial=0))
    if lowest < 0 or largest >= 1 << 32:
        raise ValueError("varint_bytes takes values in [0, 2**32)")
    width = 1 + sum(largest >= 1 << (7 * k) for k in range(1, _MAX_VARINT_BYTES))
    if width == 1:
        return values.astype(np.uint8)[..., None], None
    values = values.astype(np.uint32)
    lengths = np.ones(values.shape, np.int64)
    for k in range(1, width):
        lengths += values >= (1 << (7 * k))
    data = np.empty(values.shape + (width,), np.uint8)
    for k in range(width):
        group = ((values >> (7 * k)) & 0x7F).astype(np.uint8)
        if k < width - 1:
            group |= (lengths > k + 1).astype(np.uint8) << 7  # "more bytes follow"
        data[..., k] = group
    return data, lengths


class _Pieces:
    """Byte pieces of every row, each a padded block (rows, width) plus which bytes are real.

    Each row's record is its real bytes, piece after piece; `join` keeps exactly those with
    one boolean compaction over the padded (rows, total width) matrix. Pieces equal in
    every row (keys, and the length prefixes of fixed-length features) are folded into one
    constant block, so a batch has few blocks.
    """

    def __init__(self, rows: int):
        self.rows = rows
        self.blocks, self.masks = [], []
        self.pending = b""  # constant bytes not yet added as a block

    def _add(self, block: np.ndarray, valid: np.ndarray | None) -> None:
        self._flush()
        self.blocks.append(block)
        self.masks.append(np.broadcast_to(True, block.shape) if valid is None else valid)

    def _flush(self) -> None:
        if self.pending:
            row = np.frombuffer(self.pending, np.uint8)
            self.pending = b""
            self._add(np.broadcast_to(row, (self.rows, len(row))), None)

    def constant(self, data: bytes) -> None:
        self.pending += data

    def varint(self, values: np.ndarray) -> None:
        if values.min() == values.max():
            self.constant(_one_varint(int(values[0])))
            return
        data, lengths = varint_bytes(values)  # (rows, K), (rows,) or None
        self._add(data, None if lengths is None
                  else np.arange(data.shape[-1])[None, :] < lengths[:, None])

    def packed_varints(self, data: np.ndarray, lengths: np.ndarray | None) -> None:
        """Adds packed varints: `varint_bytes` of values (rows, L)."""
        valid = None if lengths is None else np.arange(data.shape[-1]) < lengths[..., None]
        self._add(data.reshape(self.rows, -1),
                  None if valid is None else valid.reshape(self.rows, -1))

    def raw(self, rows_of_bytes: np.ndarray) -> None:
        """Adds fixed-width rows (rows, W) uint8."""
        self._add(rows_of_bytes, None)

    def join(self) -> tuple[np.ndarray, np.ndarray]:
        """One buffer holding every row's bytes, and the row offsets (rows + 1,)."""
        self._flush()
        valid = np.concatenate(self.masks, axis=1)  # (rows, total width)
        buffer = np.concatenate(self.blocks, axis=1)[valid]
        row_offsets = np.zeros(self.rows + 1, np.int64)
        np.cumsum(valid.sum(axis=1), out=row_offsets[1:])
        return buffer, row_offsets


def _one_varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _varint_length(values: np.ndarray) -> np.ndarray:
    """How many bytes each value's varint takes."""
    lengths = np.ones(np.shape(values), np.int64)
    for k in range(1, _MAX_VARINT_BYTES):
        lengths += values >= (1 << (7 * k))
    return lengths


def serialize_examples(features: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Serialized Examples of a batch: (buffer uint8, row offsets (N + 1,)).

    `features` holds every name of `schema.FEATURES` as (N, L) arrays (next_sentence_labels
    may be (N,)), or of `schema.PACKED_FEATURES` for packed rows (told apart by
    `instance_ids`), or of `schema.MLM_FEATURES` for masked-LM-only rows (no masks);
    int64 features must be non-negative.
    """
    objective = schema.objective_of_features(features)
    kinds = schema.features(2 if "instance_ids" in features else 1, objective)
    payloads, payload_lengths = {}, {}
    rows = len(features["input_ids"])
    for name, (kind, _) in kinds.items():
        values = np.asarray(features[name]).reshape(rows, -1)
        if kind == "float":
            payloads[name] = values.astype("<f4").view(np.uint8)  # (N, 4L), little-endian
            payload_lengths[name] = np.full(rows, payloads[name].shape[1])
        else:
            payloads[name] = data, lengths = varint_bytes(values)  # (N, L, K), (N, L)
            payload_lengths[name] = (np.full(rows, values.shape[1]) if lengths is None
                                     else lengths.sum(axis=1))
    # Length prefixes, innermost first: list <- Feature <- map entry <- Features.
    sizes = {}
    for name, (kind, _) in kinds.items():
        list_len = 1 + _varint_length(payload_lengths[name]) + payload_lengths[name]
        feature_len = 1 + _varint_length(list_len) + list_len
        entry_len = 2 + len(name) + 1 + _varint_length(feature_len) + feature_len
        sizes[name] = (list_len, feature_len, entry_len)
    features_len = sum(1 + _varint_length(entry) + entry for _, _, entry in sizes.values())

    pieces = _Pieces(rows)
    pieces.constant(b"\x0a")  # Example.features (field 1, length-delimited)
    pieces.varint(features_len)
    for name, (kind, _) in kinds.items():
        list_len, feature_len, entry_len = sizes[name]
        pieces.constant(b"\x0a")  # Features.feature map entry
        pieces.varint(entry_len)
        pieces.constant(b"\x0a" + bytes([len(name)]) + name.encode() + b"\x12")  # key, value
        pieces.varint(feature_len)
        pieces.constant(b"\x12" if kind == "float" else b"\x1a")  # float_list=2, int64_list=3
        pieces.varint(list_len)
        pieces.constant(b"\x0a")  # the packed `value` field
        pieces.varint(payload_lengths[name])
        if kind == "float":
            pieces.raw(payloads[name])
        else:
            pieces.packed_varints(*payloads[name])
    return pieces.join()
