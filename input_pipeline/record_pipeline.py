"""The tf.data pipeline over pre-training shards, built from a reader's settings held as
plain values (`input_pipeline/reader.py`'s PretrainingDataset keeps one and rebuilds the
pipeline from it at each position): each epoch's shuffled files interleaved and their records
shuffled, tagged (epoch, index) and skipped to the position, batched, parsed, masked.

The functions tf.data keeps refer to a RecordPipeline, never to the reader, so nothing in the
pipeline refers back to the reader: a reader (or an iterator it drops) is freed as soon as the
last reference to it goes, by reference counting, and its read-ahead threads stop then, not
whenever Python's cycle collector next runs (which then waits for them to wind down: seconds,
stalling whatever ran at that moment; docs/tests-and-benchmarks.md).
"""

import dataclasses

import numpy as np
import tensorflow as tf

from bert_jax.storage import files as file_lib
from input_pipeline import dynamic_masking, schema, tfrecord

# Epoch seeds: large odd multipliers keep (seed, epoch) pairs from colliding.
EPOCH_MULTIPLIER = 1_000_003


@dataclasses.dataclass(frozen=True)
class RecordPipeline:
    """A reader's settings as plain values, and the tf.data pipeline built from them
    (PretrainingDataset's docstring says what each means)."""
    files: tuple
    batch_size: int
    seq_len: int
    max_predictions: int
    max_sequences_per_row: int
    objective: str
    seed: int
    shuffle_buffer: int
    repeat: bool
    deterministic: bool
    cycle_length: int
    process_index: int
    masking: dict | bool
    row_masking: dict | bool
    masking_schedule: object
    tagged: bool
    drop_remainder: bool

    def records_of_file(self, path) -> tf.data.Dataset:
        """One shard's serialized records: tf.data's reader locally, the file layer remotely."""
        if not any(file_lib.is_remote(name) for name in self.files):
            return tf.data.TFRecordDataset(path)
        return tf.data.Dataset.from_generator(
            tfrecord.read_records, args=(path,),
            output_signature=tf.TensorSpec(shape=(), dtype=tf.string))

    def epoch_records(self, epoch, start_epoch, start_offset) -> tf.data.Dataset:
        """(epoch, index, serialized record) for one epoch, skipping what was consumed."""
        epoch_seed = tf.cast(self.seed, tf.int64) * EPOCH_MULTIPLIER + epoch
        files = tf.data.Dataset.from_tensor_slices(list(self.files))
        files = files.shuffle(len(self.files), seed=epoch_seed)
        records = files.interleave(
            self.records_of_file, cycle_length=min(self.cycle_length, len(self.files)),
            block_length=1, num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=self.deterministic)
        if self.shuffle_buffer > 1:
            records = records.shuffle(self.shuffle_buffer, seed=epoch_seed + 1)
        records = records.enumerate()
        # Skipping here drops raw bytes only: nothing already consumed is parsed again.
        records = records.skip(tf.where(epoch == start_epoch, start_offset, 0))
        return records.map(lambda index, record: (epoch, index, record))

    @staticmethod
    def step_schedule(steps_read) -> tuple:
        """(start, steady_step, the reads of each step from start to steady_step): all of
        `PretrainingDataset.seek_step`'s (start, reads, steady_from) that the pipeline uses,
        as values, so two equal schedules are known to build the same pipeline."""
        start, reads, steady_from = steps_read
        steady_step = max(start, steady_from)
        return start, steady_step, tuple(reads(step) for step in range(start, steady_step + 1))

    @staticmethod
    def step_of_batch(steps_read):
        """batch count (int64 scalar, from 0 where the pipeline starts) -> the step that
        batch trains (`PretrainingDataset.seek_step`): a table until the reads
        per step hold steady, then arithmetic (no Python runs inside tf.data)."""
        start, steady_step, reads = RecordPipeline.step_schedule(steps_read)
        table = [step for step, count in zip(range(start, steady_step), reads)
                 for _ in range(count)]
        steps = tf.constant(table + [steady_step], tf.int64)  # the last: never read
        per_step = reads[-1]
        return lambda count: tf.where(
            count < len(table), tf.gather(steps, tf.minimum(count, len(table))),
            steady_step + (count - len(table)) // per_step)

    def masked_rows(self, batch: dict, epochs, indices, step) -> dict:
        """Objective mlm's rows, masked at the rate of `step` (int64 scalar), from draws keyed
        by each row's (epoch, index) tags (B,): one segment, segment_ids 0. A tagged reader's
        rows stay unmasked (its mixture masks them)."""
        batch = dict(batch, segment_ids=tf.zeros_like(batch["input_ids"]))
        if self.tagged:
            return batch
        schedule = self.masking_schedule
        keys = dynamic_masking.row_keys(self.seed, self.process_index, epochs, indices)
        rate = dynamic_masking.rate_at(step, schedule.rates, schedule.boundaries)
        return dynamic_masking.mask_rows(batch, keys, rate, **self.row_masking)

    def build(self, epoch: int, records_in_epoch: int, steps_read) -> tf.data.Dataset:
        last_epoch = np.iinfo(np.int64).max if self.repeat else max(epoch + 1, 1)
        epochs = tf.data.Dataset.range(epoch, last_epoch)
        records = epochs.flat_map(lambda e: self.epoch_records(
            e, tf.constant(epoch, tf.int64), tf.constant(records_in_epoch, tf.int64)))
        batches = records.batch(self.batch_size, drop_remainder=self.drop_remainder).enumerate()
        spec = schema.parsing_spec(self.seq_len, self.max_predictions,
                                   self.max_sequences_per_row, self.objective)
        seed, step_of_batch = self.seed, self.step_of_batch(steps_read)

        def parse(count, tagged):
            epoch_tags, indices, serialized = tagged
            features = tf.io.parse_example(serialized, spec)
            batch = {name: tf.cast(value, tf.float32 if value.dtype == tf.float32 else tf.int32)
                     for name, value in features.items()}
            if self.objective == "mlm":
                batch = self.masked_rows(batch, epoch_tags, indices, step_of_batch(count))
            elif self.max_sequences_per_row == 1:  # (B, 1) -> (B,); packed rows keep (B, N)
                batch["next_sentence_labels"] = tf.reshape(batch["next_sentence_labels"], [-1])
            if self.masking:
                # A batch's masks depend on where it starts, so they survive a restore.
                mask_seed = tf.stack([epoch_tags[0] + seed * EPOCH_MULTIPLIER, indices[0]])
                batch = dynamic_masking.remask(batch, mask_seed, **self.masking)
            return dict(batch, epoch=epoch_tags, index=indices)

        batches = batches.map(parse, num_parallel_calls=tf.data.AUTOTUNE,
                              deterministic=self.deterministic)
        options = tf.data.Options()
        options.deterministic = self.deterministic
        return batches.with_options(options).prefetch(tf.data.AUTOTUNE)
