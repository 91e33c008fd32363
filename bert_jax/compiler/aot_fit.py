"""When a config's step does not fit: the largest micro-batch that does, and else the
smallest slice that does, each found by compiling.

A step's memory falls as its rows are split into more micro-batches (gradient
accumulation: the same rows a step, fewer held at once), so the counts that divide a
device's rows a step are searched by bisection: `aot --config modernbert_base --topology
v5e:2x2` does not fit at 6 micro-batches of 192 rows a chip and fits at 96, which a user
otherwise finds by hand, one multi-minute compile at a time. With a guess (`aot --recipe
modernbert --topology T` starts from what fitted the generation's stand-in) the search steps
out from it instead, sparing the compiles of many rows at once, the slowest. Where even one
row a device does not fit, the model's weights and optimizer state are what is too big: more
chips, with all of it sharded over them (FSDP), is the way out, so slices of the same
generation are compiled at twice the chips each time, one row a device, up to
MAX_SLICE_CHIPS.
"""

import math

# Beyond this a compile-only slice takes long on a small host; say so rather than go on.
MAX_SLICE_CHIPS = 64


def micro_batch_counts(rows_per_device: int) -> list[int]:
    """Every micro-batch count that splits a device's rows a step into whole rows, fewest
    (largest micro-batches) first."""
    return [count for count in range(1, rows_per_device + 1) if rows_per_device % count == 0]


def fewest_fitting(counts: list[int], fits, first: int | None = None) -> int | None:
    """The smallest count in `counts` (ascending) for which `fits(count)` holds, by
    bisection: a count that fits means every larger count fits too (fewer rows at once).
    None where the largest does not fit. `fits` is called about log2(len(counts)) times, never
    twice for one count. `first`, an index into `counts` (a count that fitted a like slice),
    is tried before the rest, then its neighbours at 1, 2, 4, ... places towards the answer
    (an exponential search: where `first` fits and the count before it does not, two
    compiles), then the bisection between the last two tried; this keeps the search near a
    good guess, off the largest micro-batches, whose compiles are the slowest."""
    low, high = 0, len(counts) - 1
    if first is None:
        if not fits(counts[high]):
            return None
    elif fits(counts[first]):
        high, step = first, 1
        while high - step >= 0 and fits(counts[high - step]):
            high, step = high - step, step * 2
        low = max(high - step + 1, 0)
    else:
        low, step = first + 1, 1
        while True:
            probe = min(first + step, len(counts) - 1)
            if probe < low:  # `first` was the largest count
                return None
            if fits(counts[probe]):
                high = probe
                break
            low, step = probe + 1, step * 2
    while low < high:
        middle = (low + high) // 2
        if fits(counts[middle]):
            high = middle
        else:
            low = middle + 1
    return counts[low]


def larger_slices(topology: str) -> list[str]:
    """The slices of `topology`'s generation with twice the chips, then twice again, up to
    MAX_SLICE_CHIPS: each time the smallest side doubles ("v5e:2x2" -> 2x4 -> 4x4 -> ...;
    "v4:2x2x1" -> 2x2x2 -> 2x2x4 -> 2x4x4 -> 4x4x4)."""
    generation, dims = topology.split(":")
    sides = [int(side) for side in dims.split("x")]
    found = []
    while True:
        smallest = min(sides)
        index = len(sides) - 1 - sides[::-1].index(smallest)  # the last of the smallest
        sides[index] *= 2
        if math.prod(sides) > MAX_SLICE_CHIPS:
            return found
        found.append(f"{generation}:{'x'.join(map(str, sides))}")


def rows_per_device(report) -> int:
    """Rows a device takes a step: the batch split over the mesh's batch axes."""
    shape = report.mesh_shape
    return report.batch_size // (shape.get("data", 1) * shape.get("fsdp", 1))


def micro_batch_overrides(count: int) -> list[str]:
    """`count` micro-batches a step; a batch warm-up starts at one of them (the warm-up runs
    the same compiled program, so it changes nothing here, but its start must divide)."""
    return [f"--config.grad_accum_steps={count}", "--config.batch_warmup.start_batch_size=0"]


def one_row_sharded_overrides(num_devices: int) -> list[str]:
    """One row a device, every parameter and optimizer state sharded over all devices."""
    return ["--config.mesh.data=1", "--config.mesh.fsdp=-1", "--config.mesh.tensor=1",
            f"--config.batch_size={num_devices}", "--config.grad_accum_steps=1",
            "--config.batch_warmup.steps=0", "--config.batch_warmup.start_batch_size=0"]

