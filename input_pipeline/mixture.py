"""Several named sources of pre-training shards mixed into one stream, drawn from the seed.

`data.sources` names the sources (name -> files, weight, repeat); each row of a batch comes
from source i with probability p_i: the weights normalised, or with `data.mixture_tau` tau
(> 0) temperature sampling over the sources' sizes, p_i proportional to n_i^tau (XLM-R,
mmBERT: tau < 1 raises the small sources' share). Which source each row comes from is a
seeded numpy choice keyed by (seed, host, batch number), so the same seed gives the same
rows, and a resumed run draws what an uninterrupted one draws.

Why a seeded choice over the existing per-source readers and not tf.data's
`sample_from_datasets` with its checkpointed iterator: measured on this machine (2 cores,
issue 48), the choice over per-source readers gave 58,060 rows/s against
`sample_from_datasets`' 17,309, and the tf.data iterator's checkpoint was 14.8 MB (its
shuffle buffers), where each reader's position is two integers (`reader.PretrainingDataset.
state`, already exact on resume). This module as written, masks drawn at 30% included,
gave 14,949 and 16,250 rows/s of 32 tokens in batches of 256 at load average 9 (the tf.function
around the masks took it from 6,069). So the checkpoint holds, per source, where its reader is
and how many rows of the chunk read there were used; a source whose identity (files,
lengths, seed) is unchanged continues where it was when a later phase re-weights the mix or
adds sources, and a changed or new one starts from its beginning.

Each source reads chunks of `CHUNK_ROWS` rows (`reader.PretrainingDataset`, tagged: rows
unmasked, with their (epoch, index) tags). Objective mlm's masks are drawn here per row,
keyed by the source's seed and the row's tags (`dynamic_masking.row_keys`), at the rate of
the step the batch trains (`seek_step`), so a row's masks never depend on the mixture.

A source with `repeat` false that runs out is dropped, and the others share its probability
from then on (the few rows it had left when a batch's draw asked for more are not used); one that repeats starts its next epoch. The log says both. When every source
has run out the run stops with an error naming them.
"""

import zlib
from typing import Callable

import numpy as np
import tensorflow as tf

from bert_jax.errors import UserError
from input_pipeline import dynamic_masking
from input_pipeline.mixture_config import Source, shares

CHUNK_ROWS = 64  # rows a source's reader hands over at a time


class _SourceRows:
    """One source's rows, taken a few at a time from its reader's chunks; its position is
    the reader's before the first chunk not yet used up, and the rows of it used."""

    def __init__(self, source: Source, reader, identity: dict, seed: int, log):
        self.source, self.reader, self.identity, self.seed = source, reader, identity, seed
        self.log = log
        self.chunks = []  # [(reader position before the chunk, rows)]
        self.position, self.used = reader.state(), 0
        self.exhausted, self.epoch = False, 0

    def state(self) -> dict:
        position = self.chunks[0][0] if self.chunks else self.position
        return dict(identity=self.identity, position=position, used=self.used,
                    exhausted=self.exhausted, epoch=self.epoch)

    def restore(self, state: dict) -> None:
        self.reader.restore(state["position"])
        self.position, self.used = state["position"], int(state["used"])
        self.exhausted, self.epoch, self.chunks = bool(state["exhausted"]), state["epoch"], []

    def available(self, count: int) -> bool:
        """Reads chunks until `count` rows are buffered; False if the source ran out first."""
        while not self.exhausted and self._buffered() < count:
            before = self.reader.state()
            try:
                rows = next(self.reader)
            except StopIteration:
                self.exhausted = True
                self.log(f"data source {self.source.name} ran out (repeat false): the other "
                         "sources share its probability from here")
                break
            self._note_epoch(int(rows["epoch"][-1]))
            self.chunks.append((before, rows))
        return self._buffered() >= count

    def _buffered(self) -> int:
        return sum(len(rows["index"]) for _, rows in self.chunks) - self.used

    def _note_epoch(self, epoch: int) -> None:
        if epoch > self.epoch:
            self.log(f"data source {self.source.name} starts its epoch {epoch + 1} (it repeats)")
            self.epoch = epoch

    def take(self, count: int) -> dict:
        """The next `count` rows (buffered by `available`), with each row's mask key."""
        parts = []
        while count:
            before, rows = self.chunks[0]
            end = min(self.used + count, len(rows["index"]))
            parts.append({name: value[self.used:end] for name, value in rows.items()})
            count -= end - self.used
            self.used = end
            if end == len(rows["index"]):
                self.chunks.pop(0)
                self.used = 0
                self.position = self.chunks[0][0] if self.chunks else self.reader.state()
        taken = {name: np.concatenate([part[name] for part in parts]) for name in parts[0]}
        taken["seed"] = np.full(len(taken["index"]), self.seed, np.int64)  # for the masks
        return taken


def source_seed(seed: int, name: str) -> int:
    """A source's own seed (its order and masks): the run's seed and the source's name, so
    adding a source changes no other source's rows."""
    return zlib.crc32(f"{seed}:{name}".encode())


class MixtureDataset:
    """Batches of `batch_size` rows drawn from `sources` with `probabilities` (sorted by
    name, as `sources_of` gives them). `open_reader(source, seed)` opens a source's tagged
    reader of CHUNK_ROWS rows; `identity(source)` is what it must match to resume.
    `masking` (objective mlm): the run's `MaskingSchedule` and `mask_rows`' keywords."""

    def __init__(self, sources: list[Source], probabilities: np.ndarray, batch_size: int,
                 open_reader: Callable, identity: Callable, *, seed: int = 0,
                 process_index: int = 0, masking: tuple | None = None, log=print):
        self.names = [source.name for source in sources]
        self.probabilities = np.asarray(probabilities, np.float64)
        self.batch_size, self.seed, self.process_index = batch_size, seed, process_index
        self.masking, self.log = masking, log
        if masking is not None:  # one traced program, not op by op
            keywords = masking[1]
            self._mask_rows = tf.function(lambda batch, tags, rate: dynamic_masking.mask_rows(
                batch, dynamic_masking.row_keys(tags["seed"], process_index, tags["epoch"],
                                                tags["index"]), rate, **keywords))
        self.sources = [
            _SourceRows(source, open_reader(source, source_seed(seed, source.name)),
                        identity(source), source_seed(seed, source.name), log)
            for source in sources]
        self.batches, self.drawn = 0, np.zeros(len(sources), np.int64)
        self._step, self._reads_left, self._reads = 0, 1, lambda step: 1

    # -- state ---------------------------------------------------------------------------
    def state(self) -> dict:
        return dict(batches=self.batches, sources={
            rows.source.name: dict(rows.state(), drawn=int(drawn))
            for rows, drawn in zip(self.sources, self.drawn)})

    def restore(self, state: dict) -> None:
        """Each source whose identity matches continues where it was; the others start
        from their beginning (and the log says so)."""
        self.batches = int(state["batches"])
        held = state["sources"]
        for index, rows in enumerate(self.sources):
            saved = held.get(rows.source.name)
            if saved is not None and saved["identity"] == rows.identity:
                rows.restore(saved)
                self.drawn[index] = saved["drawn"]
            else:
                self.log(f"data source {rows.source.name} is new or changed: it starts from "
                         "its beginning")

    def close(self) -> None:
        """Closes every source's reader (`reader.PretrainingDataset.close`)."""
        for rows in self.sources:
            rows.reader.close()

    def seek_step(self, step: int, reads_per_step=None, steady_from: int = 0) -> None:
        """The next batch trains step `step`; step s reads `reads_per_step(s)` batches
        (`reader.PretrainingDataset.seek_step`): objective mlm's rate follows the step."""
        self._reads = reads_per_step or (lambda step: 1)
        self._step, self._reads_left = int(step), self._reads(int(step))

    def drawn_counts(self) -> dict[str, int]:
        """The rows drawn so far (this host) from each source."""
        return {name: int(count) for name, count in zip(self.names, self.drawn)}

    def proportions(self) -> dict[str, float]:
        """The share of the rows drawn so far (this host) from each source."""
        return shares(self.drawn_counts())

    # -- iteration -----------------------------------------------------------------------
    def __iter__(self):
        return self

    def __next__(self) -> dict[str, np.ndarray]:
        choices = self._choose()
        batch = self._assemble(choices)
        self.batches += 1
        self.drawn += np.bincount(choices, minlength=len(self.sources))
        step = self._step
        self._reads_left -= 1
        if self._reads_left == 0:
            self._step += 1
            self._reads_left = self._reads(self._step)
        return self._mask(batch, step)

    def _choose(self) -> np.ndarray:
        """Each row's source, drawn over the sources that have not run out; a source that
        runs out while the batch is drawn is dropped and the batch drawn again."""
        while True:
            live = np.array([not rows.exhausted for rows in self.sources])
            if not live.any():
                raise UserError(f"every data source ran out ({', '.join(self.names)}, all "
                                "repeat false) after batch " f"{self.batches}; set a "
                                "source's repeat true or train fewer steps")
            weights = np.where(live, self.probabilities, 0.0)
            if weights.sum() == 0:
                weights = live.astype(np.float64)
            rng = np.random.default_rng([self.seed, self.process_index, self.batches])
            choices = rng.choice(len(self.sources), size=self.batch_size,
                                 p=weights / weights.sum())
            counts = np.bincount(choices, minlength=len(self.sources))
            if all(rows.available(count) for rows, count in zip(self.sources, counts)
                   if count):
                return choices

    def _assemble(self, choices: np.ndarray) -> dict:
        """The batch's rows in the drawn order: source i's next rows where choices == i."""
        taken = {index: self.sources[index].take(int(count))
                 for index, count in enumerate(np.bincount(choices)) if count}
        first = next(iter(taken.values()))
        batch = {name: np.empty((len(choices),) + value.shape[1:], value.dtype)
                 for name, value in first.items()}
        for index, rows in taken.items():
            for name, value in rows.items():
                batch[name][choices == index] = value
        return batch

    def _mask(self, batch: dict, step: int) -> dict:
        """Objective mlm's masks, keyed by each row's source seed and (epoch, index) tags."""
        tags = {name: batch.pop(name) for name in ("seed", "epoch", "index")}
        if self.masking is None:
            return batch
        rate = tf.constant(self.masking[0].rate_at(step), tf.float64)
        masked = self._mask_rows({name: tf.constant(value) for name, value in batch.items()},
                                 {name: tf.constant(value) for name, value in tags.items()},
                                 rate)
        return {name: np.asarray(value) for name, value in masked.items()}
