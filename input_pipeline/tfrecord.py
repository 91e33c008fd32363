"""TFRecord framing, read in plain Python: find a shard's first record, or where it is cut short.

A record is `length (uint64 LE) | crc of length (uint32) | data | crc of data (uint32)`.
The reader uses these to check a shard's schema before training, to name the file when
tf.data reports lost data, and to stream remote (`gs://`) shards through the one file layer
(`bert_jax/storage/files.py`); none of it needs TensorFlow.
"""

import struct

from bert_jax.errors import UserError
from bert_jax.storage import files

_HEADER = struct.Struct("<QI")  # length, masked crc32c of the length
_FOOTER_SIZE = 4  # masked crc32c of the data


def _crc32c_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)  # Castagnoli, reflected
        table.append(crc)
    return table


_CRC32C_TABLE = _crc32c_table()


def masked_crc32c(data: bytes) -> int:
    """TFRecord's checksum: CRC-32C, rotated right by 15 and offset (TensorFlow's `Mask`).
    In Python, for the 8-byte length fields only: a damaged length would otherwise read as a
    record of some 10^18 bytes, a truncated shard, rather than as corruption."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _CRC32C_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    crc ^= 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _length(header: bytes, path: str, count: int, offset: int) -> int:
    """The record length a header holds; `UserError` if its checksum shows it is damaged."""
    length, length_crc = _HEADER.unpack(header)
    if masked_crc32c(header[:8]) != length_crc:
        raise UserError(f"{path}: corrupt shard: record {count} at byte {offset} has a damaged "
                        "length field (its checksum does not match); make or copy the shard "
                        "again")
    return length


def _next_record(file, path: str, count: int, offset: int) -> bytes | None:
    """The data of the record at `offset`, None at the end; `UserError` if it is cut short."""
    header = file.read(_HEADER.size)
    if not header:
        return None
    if len(header) < _HEADER.size:
        raise UserError(f"{path}: truncated shard: record {count} at byte {offset} has a cut "
                        "header; was it still being written?")
    length = _length(header, path, count, offset)
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
            length = _length(header, path, count, offset)
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
