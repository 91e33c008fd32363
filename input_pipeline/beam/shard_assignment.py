"""Which shard each record goes to, from its work unit and position alone (no Beam needed).

The local writer deals records round-robin in unit order: record g of the whole run (g
counted over every unit before it) goes to shard g % num_shards, and within a shard the
records keep that order. Given the record count of every unit before it (`first_record`),
a worker can place a unit's records without seeing any other unit: record p of unit u is
record first_record[u] + p of the run. Each shard is then the units' pieces for it in unit
order, so a distributed writer gets the very same shards, byte for byte, and the shard
sizes still differ by at most one.
"""

import itertools

import numpy as np


def first_records(counts: dict[int, int]) -> dict[int, int]:
    """Unit index -> the run-wide index of its first record, from each unit's record count."""
    units = sorted(counts)
    if units != list(range(len(units))):
        raise ValueError(f"work units are not numbered 0..{len(units) - 1}: {units[:10]}...")
    starts = itertools.accumulate((counts[unit] for unit in units[:-1]), initial=0)
    return dict(zip(units, starts))


def pieces_by_shard(first_record: int, offsets: np.ndarray, num_shards: int):
    """(shard, record positions) of one unit's records, for each shard that gets any.

    `offsets` (records + 1,) are the unit's row offsets; positions are in unit order.
    """
    count = len(offsets) - 1
    for step in range(min(count, num_shards)):
        shard = (first_record + step) % num_shards
        yield shard, np.arange(step, count, num_shards)
