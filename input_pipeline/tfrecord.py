"""TFRecord framing, read in plain Python: find a shard's first record, or where it is cut short.

A record is `length (uint64 LE) | crc of length (uint32) | data | crc of data (uint32)`.
The reader uses these to check a shard's schema before training and to name the file when
tf.data reports lost data; neither needs TensorFlow.
"""

import struct

from bert_jax.errors import UserError
from input_pipeline import files

_HEADER = struct.Struct("<QI")  # length, masked crc32c of the length
_FOOTER_SIZE = 4  # masked crc32c of the data


def first_records(path: str, limit: int) -> list[bytes]:
    """The data of a shard's first `limit` records (fewer if it has fewer); `UserError` if
    the file is missing or one of them is cut short."""
    records = []
    try:
        with files.open_file(path, "rb") as file:
            while len(records) < limit:
                header = file.read(_HEADER.size)
                if not header:
                    break
                if len(header) < _HEADER.size:
                    raise UserError(f"{path}: truncated shard (record {len(records)} has a "
                                    f"{len(header)}-byte header)")
                length, _ = _HEADER.unpack(header)
                data = file.read(length)
                if len(data) < length or len(file.read(_FOOTER_SIZE)) < _FOOTER_SIZE:
                    raise UserError(f"{path}: truncated shard (record {len(records)} is cut "
                                    "short); was it still being written?")
                records.append(data)
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
