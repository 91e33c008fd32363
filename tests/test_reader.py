"""The tf.data reader: shapes and dtypes, host split, exact resume, epochs, the original
tool's shards, bad shards, and dynamic masking's statistics."""

import gc
import os
import weakref

import numpy as np
import pytest

import pipeline_helpers as helpers
from bert_jax.errors import UserError
from input_pipeline.reader import PretrainingDataset

SEQ_LEN, PREDICTIONS, RECORDS = 32, 5, 203


def random_features(count: int, seed: int) -> dict[str, np.ndarray]:
    """Rows with a valid layout; row r's first token after [CLS] is r + 5, to identify it."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(8, SEQ_LEN + 1, count)
    position = np.arange(SEQ_LEN)[None, :]
    ids = rng.integers(5, len(helpers.VOCABULARY), (count, SEQ_LEN))
    ids[:, 1] = np.arange(count) + 5
    ids[:, 0] = helpers.CLS
    ids[position == lengths[:, None] - 1] = helpers.SEP
    ids[position >= lengths[:, None]] = 0
    masked = np.sort(rng.permuted(np.tile(np.arange(2, 7), (count, 1)), axis=1)[:, :3], axis=1)
    positions = np.zeros((count, PREDICTIONS), np.int64)
    positions[:, :3] = masked
    labels = np.zeros((count, PREDICTIONS), np.int64)
    labels[:, :3] = np.take_along_axis(ids, masked, axis=1)
    np.put_along_axis(ids, masked, helpers.MASK, axis=1)
    weights = np.zeros((count, PREDICTIONS), np.float32)
    weights[:, :3] = 1
    return dict(input_ids=ids, input_mask=(position < lengths[:, None]).astype(np.int64),
                segment_ids=((position >= 4) & (position < lengths[:, None])).astype(np.int64),
                masked_lm_positions=positions, masked_lm_ids=labels, masked_lm_weights=weights,
                next_sentence_labels=rng.integers(0, 2, count))


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    """Four shards written exactly as the original tool writes them, and their rows."""
    directory = tmp_path_factory.mktemp("reader")
    features = random_features(RECORDS, seed=0)
    paths = []
    for shard in range(4):
        path = str(directory / f"part-{shard}.tfrecord")
        helpers.write_original_style_shard(
            path, {name: value[shard::4] for name, value in features.items()})
        paths.append(path)
    return dict(directory=str(directory), paths=paths, features=features)


def dataset(shards, batch_size=8, **options):
    options = dict(dict(seed=1, shuffle_buffer=50, process_index=0, process_count=1), **options)
    return PretrainingDataset([os.path.join(shards["directory"], "*.tfrecord")], batch_size,
                              SEQ_LEN, PREDICTIONS, **options)


def row_ids(batch) -> list[int]:
    return (batch["input_ids"][:, 1] - 5).tolist()


def test_batches_have_the_agreed_keys_dtypes_and_values(shards):
    batch = next(iter(dataset(shards)))
    expected = dict(input_ids=((8, SEQ_LEN), np.int32), input_mask=((8, SEQ_LEN), np.int32),
                    segment_ids=((8, SEQ_LEN), np.int32),
                    masked_lm_positions=((8, PREDICTIONS), np.int32),
                    masked_lm_ids=((8, PREDICTIONS), np.int32),
                    masked_lm_weights=((8, PREDICTIONS), np.float32),
                    next_sentence_labels=((8,), np.int32))
    assert {key: (value.shape, value.dtype) for key, value in batch.items()} == expected
    features = shards["features"]
    for row, original in enumerate(row_ids(batch)):
        for name, value in batch.items():
            np.testing.assert_array_equal(value[row], features[name][original].reshape(-1))


def test_one_epoch_sees_every_record_once(shards):
    seen = [r for batch in dataset(shards, repeat=False) for r in row_ids(batch)]
    assert len(seen) == RECORDS // 8 * 8 and len(set(seen)) == len(seen)
    assert seen != sorted(seen)  # shuffled
    assert [r for b in dataset(shards, repeat=False) for r in row_ids(b)] == seen  # seeded
    assert [r for b in dataset(shards, repeat=False, seed=2) for r in row_ids(b)] != seen


def test_hosts_read_disjoint_files_that_cover_all(shards):
    seen = [set(r for b in dataset(shards, repeat=False, batch_size=1, process_index=host,
                                   process_count=2) for r in row_ids(b)) for host in (0, 1)]
    assert not seen[0] & seen[1] and seen[0] | seen[1] == set(range(RECORDS))
    with pytest.raises(UserError, match="cannot be split across 5 hosts"):
        dataset(shards, process_index=4, process_count=5)


@pytest.mark.parametrize("consumed", [3, 25, 40])  # mid-epoch, just before and after a wrap
def test_restore_gives_exactly_the_next_batch(shards, consumed):
    reader = dataset(shards)
    for _ in range(consumed):
        next(reader)
    state = reader.state()
    expected = [next(reader) for _ in range(3)]
    resumed = dataset(shards)
    resumed.restore(state)
    for batch in expected:
        again = next(resumed)
        for name in batch:
            np.testing.assert_array_equal(again[name], batch[name])


@pytest.mark.parametrize("masks_drawn", [False, True])
def test_a_reader_rewound_to_its_start_reads_a_fresh_readers_batches_without_a_rebuild(
        shards, masks_drawn, monkeypatch):
    """An evaluation rewinds its reader (training/evaluation.py): the same shuffled and
    masked batches as a new reader's, through the pipeline built the first time (building
    traces the parsing and masking functions), also across an epoch's end; a reader moved
    elsewhere builds again."""
    from input_pipeline.record_pipeline import RecordPipeline

    builds = []
    build = RecordPipeline.build
    monkeypatch.setattr(RecordPipeline, "build",
                        lambda self, *args, **kwargs: builds.append(1) or build(
                            self, *args, **kwargs))
    options = dict(dynamic_masking=True, vocab_size=len(helpers.VOCABULARY),
                   mask_id=helpers.MASK, special_ids=(helpers.PAD, helpers.CLS,
                                                      helpers.SEP)) if masks_drawn else {}
    reader = dataset(shards, **options)
    start = reader.state()
    first = [next(reader) for _ in range(RECORDS // 8 + 2)]  # into the second epoch
    reader.close()
    reader.restore(start)
    reader.seek_step(0)  # an equal step schedule, given again
    again = [next(reader) for _ in range(RECORDS // 8 + 2)]
    fresh = dataset(shards, **options)
    expected = [next(fresh) for _ in range(RECORDS // 8 + 2)]
    assert len(builds) == 2  # the rewound reader's once, the fresh reader's once
    for ours, theirs, new in zip(first, again, expected):
        for name in ours:
            np.testing.assert_array_equal(theirs[name], ours[name])
            np.testing.assert_array_equal(new[name], ours[name])
    reader.restore({"epoch": 0, "records_in_epoch": 16})
    next(reader)
    assert len(builds) == 3


def test_close_frees_the_read_ahead_at_once_and_reading_on_continues(shards):
    """A reader kept alive (a trainer's) lets its read-ahead go on `close`, and reads on."""
    uninterrupted = dataset(shards)
    whole = [next(uninterrupted) for _ in range(4)]
    uninterrupted.close()
    reader = dataset(shards)
    read = [next(reader), next(reader)]
    iterator = weakref.ref(reader._iterator)
    gc.disable()  # freed by reference counting alone
    try:
        reader.close()
        assert iterator() is None
    finally:
        gc.enable()
    read += [next(reader), next(reader)]
    for batch, again in zip(whole, read):
        for name in batch:
            np.testing.assert_array_equal(again[name], batch[name])


def test_a_reader_read_to_its_end_frees_its_read_ahead(shards):
    """`list(reader)` leaves no threads behind: the iterator that ended is dropped at once."""
    reader = dataset(shards, repeat=False)
    next(reader)
    iterator = weakref.ref(reader._iterator)
    gc.disable()  # freed by reference counting alone
    try:
        rest = list(reader)
        assert rest and iterator() is None
    finally:
        gc.enable()
    assert list(reader) == []  # reopened at the end: still nothing more



@pytest.mark.parametrize("masks_drawn", [False, True], ids=["stored masks", "dynamic masking"])
def test_a_reader_nobody_refers_to_is_freed_at_once_with_its_read_ahead(shards, masks_drawn):
    """Nothing in the tf.data pipeline refers back to its reader (record_pipeline.py), so a
    reader dropped without `close` goes by reference counting, its iterator with it: no cycle
    waits for the collector, which then stalls whatever runs at that moment."""
    options = dict(dynamic_masking=True, vocab_size=len(helpers.VOCABULARY),
                   mask_id=helpers.MASK, special_ids=(helpers.PAD, helpers.CLS, helpers.SEP))
    reader = dataset(shards, **(options if masks_drawn else {}))
    next(reader)
    dropped, iterator = weakref.ref(reader), weakref.ref(reader._iterator)
    gc.disable()  # freed by reference counting alone
    try:
        del reader
        assert dropped() is None and iterator() is None
    finally:
        gc.enable()


def test_dynamic_masking_restores_too_and_keeps_the_tokens(shards):
    options = dict(dynamic_masking=True, vocab_size=len(helpers.VOCABULARY),
                   mask_id=helpers.MASK, special_ids=(helpers.PAD, helpers.CLS, helpers.SEP))
    reader = dataset(shards, **options)
    for _ in range(7):
        next(reader)
    state, expected = reader.state(), next(reader)
    resumed = dataset(shards, **options)
    resumed.restore(state)
    np.testing.assert_array_equal(next(resumed)["input_ids"], expected["input_ids"])
    # Undoing the new masks gives back the original tokens.
    features = shards["features"]
    for row, original in enumerate(row_ids(expected)):
        ids = helpers.unmasked_ids(expected, row)
        np.testing.assert_array_equal(ids, helpers.unmasked_ids(features, original))


def test_dynamic_masking_statistics(tmp_path):
    """Masked count, 80/10/10 and candidates as the original rule has them."""
    count = 3000
    features = random_features(count, seed=5)
    path = str(tmp_path / "many.tfrecord")
    helpers.write_original_style_shard(path, features)
    reader = PretrainingDataset([path], 500, SEQ_LEN, PREDICTIONS, seed=3, repeat=False,
                                process_index=0, process_count=1, dynamic_masking=True,
                                vocab_size=len(helpers.VOCABULARY), mask_id=helpers.MASK,
                                special_ids=(helpers.PAD, helpers.CLS, helpers.SEP),
                                masked_lm_prob=0.15)
    batches = list(reader)
    lengths = np.concatenate([b["input_mask"].sum(1) for b in batches])
    weights = np.concatenate([b["masked_lm_weights"] for b in batches])
    np.testing.assert_array_equal(weights.sum(1),
                                  np.minimum(PREDICTIONS, np.maximum(1, np.round(lengths * 0.15))))
    outcomes = {"mask": 0, "kept": 0, "other": 0}
    for batch in batches:
        rows, columns = np.nonzero(batch["masked_lm_weights"])
        positions = batch["masked_lm_positions"][rows, columns]
        now = batch["input_ids"][rows, positions]
        labels = batch["masked_lm_ids"][rows, columns]
        assert (positions > 0).all() and (positions < batch["input_mask"].sum(1)[rows] - 1).all()
        assert not np.isin(labels, [helpers.CLS, helpers.SEP, helpers.PAD]).any()
        outcomes["mask"] += (now == helpers.MASK).sum()
        outcomes["kept"] += (now == labels).sum()
        outcomes["other"] += ((now != labels) & (now != helpers.MASK)).sum()
    total = sum(outcomes.values())
    assert abs(outcomes["mask"] / total - 0.8) < 0.02
    assert abs(outcomes["kept"] / total - 0.1) < 0.015  # + 1/V from random picks
    assert abs(outcomes["other"] / total - 0.1) < 0.015


def test_missing_wrong_schema_and_truncated_shards_are_user_errors(shards, tmp_path):
    with pytest.raises(UserError, match="no shard files match"):
        PretrainingDataset([str(tmp_path / "none-*.tfrecord")], 4, SEQ_LEN, PREDICTIONS,
                           process_index=0, process_count=1)
    with pytest.raises(UserError, match="input_ids.*has 32 values, expected 64"):
        PretrainingDataset(shards["paths"], 4, 64, PREDICTIONS, process_index=0,
                           process_count=1)
    other = str(tmp_path / "other.tfrecord")
    features = random_features(10, seed=1)
    del features["masked_lm_weights"]
    features["masked_lm_weights"] = np.ones((10, PREDICTIONS), np.float32)
    helpers.write_original_style_shard(other, features)
    data = open(other, "rb").read()
    open(other, "wb").write(data.replace(b"input_mask", b"input_maSK"))
    with pytest.raises(UserError, match="other.tfrecord: wrong schema: no feature 'input_mask'"):
        PretrainingDataset([other], 4, SEQ_LEN, PREDICTIONS, process_index=0, process_count=1)
    cut = str(tmp_path / "cut.tfrecord")
    whole = open(shards["paths"][0], "rb").read()
    open(cut, "wb").write(whole[:len(whole) - 30])  # the last record is cut short
    reader = PretrainingDataset([cut], 4, SEQ_LEN, PREDICTIONS, process_index=0,
                                process_count=1, repeat=False)
    with pytest.raises(UserError, match="cut.tfrecord: truncated shard: record 50"):
        list(reader)
    open(cut, "wb").write(whole[:20])
    with pytest.raises(UserError, match="cut.tfrecord: truncated shard"):
        PretrainingDataset([cut], 4, SEQ_LEN, PREDICTIONS, process_index=0, process_count=1)
    open(cut, "wb").close()  # an empty shard is valid beside others, an error alone
    with pytest.raises(UserError, match="hold no records"):
        PretrainingDataset([cut], 4, SEQ_LEN, PREDICTIONS, process_index=0, process_count=1)
    reader = PretrainingDataset([cut, shards["paths"][0]], 4, SEQ_LEN, PREDICTIONS,
                                process_index=0, process_count=1, repeat=False)
    assert sum(len(batch["input_ids"]) for batch in reader) == 48  # 51 records, whole batches


def test_a_shard_directory_reads_the_shards_its_manifest_lists(shards, tmp_path):
    import shutil
    from input_pipeline import manifest as manifest_lib
    for path in shards["paths"][:2]:
        shutil.copy(path, tmp_path)
    listed = os.path.basename(shards["paths"][0])
    manifest_lib.write_manifest(str(tmp_path), dict(
        shards=[dict(file=listed, num_instances=51)], num_instances=51, vocabulary={},
        settings=dict(max_seq_len=SEQ_LEN, max_predictions=PREDICTIONS)))
    reader = PretrainingDataset([str(tmp_path)], 1, SEQ_LEN, PREDICTIONS, repeat=False,
                                process_index=0, process_count=1)
    assert sorted(r for batch in reader for r in row_ids(batch)) == list(range(0, RECORDS, 4))
    manifest = manifest_lib.read_manifest(str(tmp_path))
    manifest_lib.check_settings(manifest, SEQ_LEN, PREDICTIONS, str(tmp_path))
    with pytest.raises(UserError, match="max_seq_len=32, but 128 was asked for"):
        manifest_lib.check_settings(manifest, 128, PREDICTIONS, str(tmp_path))
    with pytest.raises(UserError, match="no shard manifest here"):
        manifest_lib.read_manifest(str(tmp_path / "elsewhere"))
    (tmp_path / "manifest.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(UserError, match="manifest.json: manifest is not valid JSON"):
        manifest_lib.read_manifest(str(tmp_path))


@pytest.mark.parametrize("damage, message", [
    # The top byte of record 2's length: read as some 10^18 bytes, it was reported as a
    # truncated shard "needing 6485183463413515228 bytes".
    (lambda start, length: start + 7,
     r"record 2 at byte {start} has a damaged length field \(its checksum does not match\)"),
    # A byte of record 2's data: the error named every shard of the run.
    (lambda start, length: start + 12 + length // 2,
     r"the record data at byte {data} fail their checksum"),
])
def test_a_corrupt_record_names_its_shard_alone(shards, tmp_path, damage, message):
    import shutil

    from input_pipeline import tfrecord

    paths = [shutil.copy(path, tmp_path) for path in shards["paths"]]
    bad = paths[2]
    records = tfrecord.first_records(bad, 3)
    start = sum(8 + 4 + len(data) + 4 for data in records[:2])
    content = bytearray(open(bad, "rb").read())
    content[damage(start, len(records[2]))] ^= 0x5A
    open(bad, "wb").write(bytes(content))
    reader = PretrainingDataset(paths, 4, SEQ_LEN, PREDICTIONS, process_index=0,
                                process_count=1, repeat=False)
    expected = rf"^{bad}: corrupt shard: " + message.format(start=start, data=start + 12) + \
        "; make or copy the shard again$"
    with pytest.raises(UserError, match=expected):
        list(reader)
