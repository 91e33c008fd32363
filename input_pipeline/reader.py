"""Pre-training shards as batches of numpy arrays: host split, position, resume, and errors that
name the shard; the tf.data pipeline itself (interleave, shuffle, repeat, batch, parse, masks)
is built by record_pipeline.py.

Deterministic mode makes the stream a pure function of (files, seed, epoch): each epoch
shuffles the file order and the records with seeds derived from (seed, epoch), and every
record carries its (epoch, index-in-epoch) tag through the pipeline. `state()` is the tag of
the last record handed out; `restore()` rebuilds the pipeline at that epoch and skips the
records already seen *before* they are parsed (only raw bytes pass the shuffle buffer), so
a resumed run sees exactly the batch an uninterrupted one would have seen next. Batches
span epoch boundaries as in the original `run_pretraining.py` (repeat, then batch).

Reads shards of either tool (the schema in `schema.py`), and packed shards (rows of up to
`max_sequences_per_row` instances, `packing.py`) when told so; a missing file, a schema
mismatch (packed shards read as unpacked, or the reverse) or a truncated shard raises
`UserError` naming the file.

Objective mlm's shards (`create-data --objective mlm`) hold no masks: each batch's are drawn
here (`dynamic_masking.mask_rows`) from the rows' (epoch, index) tags, at the masking rate
of the step the batch trains. The trainer names the step of the next batch and how many
batches each step reads (`seek_step`: one, or a batch-size warm-up's micro-batches), so a
resumed run, even across a change of rate, reads the very batches of an uninterrupted one.
"""

import re

import numpy as np
import tensorflow as tf

from bert_jax.storage import files as file_lib
from bert_jax.errors import UserError
from input_pipeline import manifest as manifest_lib, schema
from input_pipeline.manifest import expand_patterns
from input_pipeline import tfrecord
from input_pipeline.record_pipeline import RecordPipeline

# What each objective's rows are, for errors naming both.
_ROWS = {"mlm_nsp": "segment pairs with masks and next-sentence labels (objective mlm_nsp)",
         "mlm": "masked-LM-only rows without masks (create-data --objective mlm)"}


def check_schema(path: str, seq_len: int, max_predictions: int,
                 max_sequences_per_row: int = 1, objective: str = "mlm_nsp") -> bool:
    """Parses a shard's first record and checks every feature's kind and length.

    Returns False for a shard without records (valid: more shards than instances).
    """
    data = tfrecord.first_record(path)
    if data is None:
        return False
    try:
        example = tf.train.Example.FromString(data)
    except Exception as error:  # protobuf raises its own DecodeError
        raise UserError(f"{path}: first record is not a tf.train.Example ({error})") from None
    features = example.features.feature
    found = schema.objective_of_features(features)
    if found != objective:
        raise UserError(f"{path}: wrong schema: the shard holds {_ROWS[found]} but objective "
                        f"{objective} was asked for; set --config.objective={found} or make "
                        "shards for the run's objective")
    packed = "instance_ids" in features
    if objective == "mlm_nsp" and packed != (max_sequences_per_row > 1):
        raise UserError(
            f"{path}: wrong schema: the shard holds " + (
                "packed rows (create-data --pack) but unpacked rows were asked for; set "
                "data.max_sequences_per_row to the shards' value, or leave it unset to take it "
                "from their manifest" if packed else
                f"unpacked rows but rows packed {max_sequences_per_row} to a row were asked "
                "for (data.max_sequences_per_row); leave it unset or make the shards with "
                "--pack"))
    lengths = schema.feature_lengths(seq_len, max_predictions, max_sequences_per_row, objective)
    for name, (kind, _) in schema.features(max_sequences_per_row, objective).items():
        if name not in features:
            raise UserError(f"{path}: wrong schema: no feature {name!r} (has "
                            f"{sorted(features)}); expected BERT pre-training shards")
        stored = features[name].WhichOneof("kind")
        if stored != f"{kind}_list":
            raise UserError(f"{path}: wrong schema: feature {name!r} is {stored}, "
                            f"expected {kind}_list")
        count = len(getattr(features[name], stored).value)
        if count != lengths[name]:
            raise UserError(f"{path}: wrong schema: feature {name!r} has {count} values, "
                            f"expected {lengths[name]} (seq_len={seq_len}, "
                            f"max_predictions={max_predictions}, "
                            f"max_sequences_per_row={max_sequences_per_row})")
    return True


def manifest_counts(paths: list[str]) -> dict[str, int] | None:
    """Each shard's record count from the manifest beside it; None if any shard has none
    (original-tool shards carry no manifest)."""
    counts, manifests = {}, {}
    for path in paths:
        directory = file_lib.dirname(path)
        if directory not in manifests:
            manifest_path = file_lib.join(directory, manifest_lib.MANIFEST_NAME)
            manifests[directory] = ({shard["file"]: manifest_lib.records_in_shard(shard)
                                     for shard in manifest_lib.read_manifest(directory)["shards"]}
                                    if file_lib.exists(manifest_path) else {})
        listed = manifests[directory].get(file_lib.basename(path))
        if listed is None:
            return None
        counts[path] = listed
    return counts


class PretrainingDataset:
    """Batches of pre-training features, as dicts of numpy arrays (per-host batch size).

    Yields input_ids/input_mask/segment_ids (B, T) int32, masked_lm_positions/masked_lm_ids
    (B, P) int32, masked_lm_weights (B, P) float32, next_sentence_labels (B,) int32.
    With `max_sequences_per_row` N > 1 (packed shards) a batch is B rows: P is N x
    max_predictions, and it adds instance_ids/position_ids (B, T) int32, instance_starts
    and next_sentence_labels (B, N) int32, next_sentence_weights (B, N) float32.
    With `dynamic_masking`, the stored masks are undone and new ones drawn per epoch in
    tf.data (RoBERTa style); it needs `vocab_size`, `mask_id` and `special_ids` (at least
    [PAD], [CLS] and [SEP], which are never masked).
    With `objective` "mlm" (masked-LM-only shards) the masks are drawn at
    `masking_schedule`'s rate into `max_predictions` slots a row (`dynamic_masking.
    mask_rows`, which needs the same three); a batch has every feature of packed rows but
    the per-instance ones (segment_ids all 0).
    `deterministic=False` lets interleave and parsing run out of order for speed; `restore`
    then resumes at the same epoch and record count, but not at exactly the same records.
    `tagged` (a mixture's source, `mixture.py`): each batch keeps every row's `epoch` and
    `index` tags (B,) int64, and objective mlm's rows come unmasked (the mixture masks the
    rows of each of its batches at the rate of the step it trains); `drop_remainder=False`
    gives a last, shorter batch where the data ends (`repeat=False`).
    """

    def __init__(self, file_patterns: list[str], batch_size: int, seq_len: int,
                 max_predictions: int, *, seed: int = 0, shuffle_buffer: int = 10000,
                 repeat: bool = True, deterministic: bool = True,
                 process_index: int | None = None, process_count: int | None = None,
                 dynamic_masking: bool = False, vocab_size: int | None = None,
                 mask_id: int | None = None, special_ids: tuple[int, ...] = (),
                 masked_lm_prob: float = 0.15, cycle_length: int = 4,
                 max_sequences_per_row: int = 1, objective: str = "mlm_nsp",
                 masking_schedule=None, tagged: bool = False, drop_remainder: bool = True):
        if process_index is None or process_count is None:
            import jax
            process_index = jax.process_index() if process_index is None else process_index
            process_count = jax.process_count() if process_count is None else process_count
        all_files = expand_patterns(file_patterns)
        self.files = all_files[process_index::process_count]
        if not self.files:
            raise UserError(f"{file_patterns}: {len(all_files)} shard file(s) cannot be split "
                            f"across {process_count} hosts; write at least one per host")
        if not [path for path in self.files
                if check_schema(path, seq_len, max_predictions, max_sequences_per_row,
                                objective)]:
            raise UserError(f"{self.files}: these shards hold no records")
        if (dynamic_masking or objective == "mlm") and (vocab_size is None or mask_id is None):
            raise ValueError("masks drawn in the reader need vocab_size and mask_id")
        unmasked = masking_schedule is None and not tagged  # a mixture masks tagged rows
        if objective == "mlm" and (dynamic_masking or unmasked):
            raise ValueError("objective mlm draws its masks at masking_schedule's rates")
        if dynamic_masking and max_sequences_per_row > 1:
            raise UserError(f"{file_patterns}: dynamic masking draws one instance's masks per "
                            "row and cannot mask packed rows; use the shards' masks or "
                            "unpacked shards")
        # What tf.data's functions read, held apart from the reader (record_pipeline.py).
        self._pipeline = RecordPipeline(
            files=tuple(self.files), batch_size=batch_size, seq_len=seq_len,
            max_predictions=max_predictions, max_sequences_per_row=max_sequences_per_row,
            objective=objective, seed=seed, shuffle_buffer=shuffle_buffer, repeat=repeat,
            deterministic=deterministic, cycle_length=cycle_length,
            process_index=process_index,
            masking=dynamic_masking and dict(
                vocab_size=vocab_size, mask_id=mask_id, special_ids=tuple(special_ids),
                masked_lm_prob=masked_lm_prob, max_predictions=max_predictions),
            row_masking=objective == "mlm" and dict(
                vocab_size=vocab_size, mask_id=mask_id, special_ids=tuple(special_ids),
                max_predictions=max_predictions),
            masking_schedule=masking_schedule, tagged=tagged, drop_remainder=drop_remainder)
        self._steps_read = (0, lambda step: 1, 0)  # see seek_step
        self._position = {"epoch": 0, "records_in_epoch": 0}
        self._iterator = None
        self._built = (None, None)  # (where it starts, the tf.data pipeline): _pipeline_here
        self._expected_counts = manifest_counts(self.files)  # file -> records, or None
        self._last_tag = None  # (epoch, index) of the last record handed out

    # -- state ---------------------------------------------------------------------------
    def state(self) -> dict:
        """JSON-serialisable position: the epoch and records of it consumed so far."""
        return dict(self._position)

    def restore(self, state: dict) -> None:
        """Resume so that the next batch is the one after `state` was taken."""
        self._position = {"epoch": int(state["epoch"]),
                          "records_in_epoch": int(state["records_in_epoch"])}
        self._iterator, self._last_tag = None, None

    def close(self) -> None:
        """Stops the read-ahead threads and frees their buffers now, while the reader itself
        lives on (a trainer's or an evaluation's, kept to the end of a run); a gs:// shard's
        reader closes its remote file. A later batch opens a new iterator at the current
        position. (A reader nobody refers to any more is freed at once without it: nothing
        in its pipeline refers back to it: record_pipeline.py.)"""
        self._iterator = None

    def seek_step(self, step: int, reads_per_step=None, steady_from: int = 0) -> None:
        """The next batch trains step `step` (0-based) and step s takes `reads_per_step(s)`
        batches in a row (None: one; a batch-size warm-up reads several micro-batches), the
        same number for every step from `steady_from` on. Objective mlm's masking rate
        depends on the step; the data position does not."""
        self._steps_read = (int(step), reads_per_step or (lambda step: 1), steady_from)
        self._iterator = None  # rebuilt at the current position, counting from `step`

    # -- iteration -----------------------------------------------------------------------
    def __iter__(self):
        return self

    def __next__(self) -> dict[str, np.ndarray]:
        try:
            return self._read_batch()
        except BaseException:
            # The data ended or a shard failed: this iterator gives nothing more, so its
            # read-ahead threads stop now (`close`), not at the cycle collector's next run,
            # and `list(reader)` leaves nothing behind. A later call reopens at the position.
            self.close()
            raise

    def _pipeline_here(self) -> tf.data.Dataset:
        """The pipeline from the current position and step, built once for each place a
        reader starts again: building traces the parsing and masking functions (0.25-0.65 s
        on a CPU), which an evaluation rewound to its start (training/evaluation.py) would
        otherwise pay at every evaluation. A tf.data pipeline iterated again gives the same
        batches: every shuffle and mask is seeded by the records' (epoch, index) tags."""
        # A seek to the same step with an equal schedule finds the same pipeline.
        where = (self._position["epoch"], self._position["records_in_epoch"],
                 RecordPipeline.step_schedule(self._steps_read))
        if self._built[0] != where:
            self._built = (where, self._pipeline.build(**self._position,
                                                       steps_read=self._steps_read))
        return self._built[1]

    def _read_batch(self) -> dict[str, np.ndarray]:
        if self._iterator is None:
            self._iterator = iter(self._pipeline_here().as_numpy_iterator())
        try:
            batch = next(self._iterator)
        except (tf.errors.DataLossError, tf.errors.UnknownError) as error:
            # UnknownError: a remote shard's reader (tfrecord.read_records) raised inside tf.data.
            self._raise_data_loss(error)
        except tf.errors.InvalidArgumentError as error:
            raise UserError(f"{self.files}: a record does not match the pre-training schema "
                            f"({error.message.splitlines()[0]})") from None
        epochs, indices = ((batch["epoch"], batch["index"]) if self._pipeline.tagged
                           else (batch.pop("epoch"), batch.pop("index")))
        if self._expected_counts is not None and self._pipeline.deterministic:
            self._check_epoch_ends(epochs, indices)
        self._position = {"epoch": int(epochs[-1]), "records_in_epoch": int(indices[-1]) + 1}
        return batch

    def _check_epoch_ends(self, epochs: np.ndarray, indices: np.ndarray) -> None:
        """Raises `UserError` when an epoch held fewer (or more) records than the manifest
        lists: a shard cut at a record boundary reads without any tf.data error."""
        if self._last_tag is not None:
            epochs = np.concatenate([[self._last_tag[0]], epochs])
            indices = np.concatenate([[self._last_tag[1]], indices])
        self._last_tag = (int(epochs[-1]), int(indices[-1]))
        expected = sum(self._expected_counts.values())
        for end in np.nonzero(epochs[1:] != epochs[:-1])[0]:  # the last record of an epoch
            if int(indices[end]) + 1 != expected:
                self._raise_count_mismatch(int(indices[end]) + 1, expected)

    def _raise_count_mismatch(self, counted: int, expected: int) -> None:
        for path, listed in self._expected_counts.items():
            actual = tfrecord.count_records(path)
            if actual != listed:
                raise UserError(f"{path}: holds {actual} records but its manifest lists "
                                f"{listed}: the shard was cut short (or replaced); make or "
                                "copy it again")
        raise UserError(f"{self.files}: an epoch held {counted} records, the manifest lists "
                        f"{expected}; make or copy the shards again")

    def _raise_data_loss(self, error) -> None:
        """Names the shard tf.data found damaged: its error names a byte offset, not a file."""
        for path in self.files:
            tfrecord.count_records(path)  # raises UserError naming a truncated file
        for path in self.files:
            if file_lib.is_remote(path):
                continue  # read through tfrecord.read_records, which names its file itself
            try:  # every record's checksums, in TensorFlow's reader (C++: fast)
                tf.data.TFRecordDataset(path).reduce(np.int64(0), lambda count, _: count + 1)
            except tf.errors.DataLossError as file_error:
                where = re.search(r"corrupted record at (\d+)", file_error.message)
                detail = (f"the record data at byte {where[1]} fail their checksum" if where
                          else file_error.message.splitlines()[0])
                raise UserError(f"{path}: corrupt shard: {detail}; make or copy the shard "
                                "again") from None
        raise UserError(f"{self.files}: corrupt shard data ({error.message})") from None

