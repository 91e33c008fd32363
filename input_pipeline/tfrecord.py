"""TFRecord framing, read in plain Python: find a shard's first record, or where it is cut short.

A record is `length (uint64 LE) | crc of length (uint32) | data | crc of data (uint32)`.
The reader uses these to check a shard's schema before training, to name the file when
tf.data reports lost data, and to stream remote (`gs://`) shards through the one file layer
(`bert_jax/files.py`); none of it needs TensorFlow.
"""

import struct

from bert_jax.errors import UserError
from bert_jax import files

_HEADER = struct.Struct("<QI")  # length, masked crc32c of the length
_FOOTER_SIZE = 4  # masked crc32c of the data


def _next_record(file, path: str, count: int, offset: int) -> bytes | None:
    """The data of the record at `offset`, None at the end; `UserError` if it is cut short."""
    header = file.read(_HEADER.size)
    if not header:
        return None
    if len(header) < _HEADER.size:
        raise UserError(f"{path}: truncated shard: record {count} at byte {offset} has a cut "
                        "header; was it still being written?")
    length, _ = _HEADER.unpack(header)
    data = file.read(length)
    if len(data) < length or len(file.read(_FOOTER_SIZE)) < _FOOTER_SIZE:
        raise UserError(f"{path}: truncated shard: record {count} at byte {offset} is cut "
                        "short; was it still being written?")
    return data


def first_records(path: str, limit: int) -> list[bytes]:
    """The data of a shard's first `limit` records (fewer if it has fewer); `UserError` if
    the file is missing or one of them is cut short."""
    records, offset = [], 0
    try:
        with files.open_file(path, "rb") as file:
            while len(records) < limit:
                data = _next_record(file, path, len(records), offset)
                if data is None:
                    break
                records.append(data)
                offset += _HEADER.size + len(data) + _FOOTER_SIZE
    except FileNotFoundError:
        raise UserError(f"{path}: shard not found") from None
    except IsADirectoryError:
        raise UserError(f"{path}: is a directory, expected a TFRecord shard") from None
    return records


def first_record(path: str) -> bytes | None:
    """The data of a shard's first record, None if it has none; `UserError` if missing or cut."""
    records = first_records(path, 1)
    return records[0] if records else None


def count_records(path: str) -> int:
    """The number of records, walking headers only; `UserError` naming the byte offset if cut."""
    size = files.size(path)
    count = offset = 0
    with files.open_file(path, "rb") as file:
        while offset < size:
            header = file.read(_HEADER.size)
            if len(header) < _HEADER.size:
                raise UserError(f"{path}: truncated shard: record {count} at byte {offset} has "
                                f"a cut header ({size} bytes in the file)")
            length, _ = _HEADER.unpack(header)
            end = offset + _HEADER.size + length + _FOOTER_SIZE
            if end > size:
                raise UserError(f"{path}: truncated shard: record {count} at byte {offset} "
                                f"needs {end} bytes, the file has {size}")
            file.seek(end)
            offset = end
            count += 1
    return count


def read_records(path: str | bytes):
    """Yields the data of every record; `UserError` naming the byte offset if one is cut.

    Used for remote shards (tf.data's own reader reaches `gs://` only through TensorFlow's
    GCS client); integrity in transit is GCS's checksums, so the record CRCs are not checked.
    """
    path = path.decode() if isinstance(path, bytes) else path
    count = offset = 0
    with files.open_file(path, "rb") as file:
        while (data := _next_record(file, path, count, offset)) is not None:
            yield data
            offset += _HEADER.size + len(data) + _FOOTER_SIZE
            count += 1
