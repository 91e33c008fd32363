"""`create-data --pack`: packed rows hold exactly the instances the unpacked writer makes.

The writer draws every instance and mask before packing, so with the same settings the
packed shards must hold the unpacked shards' instances, each one whole (tokens, segments,
masks, NSP label), a few to a row; and like the unpacked writer its output must not
depend on the worker count or the runner.
"""

import collections
import hashlib
import os

import numpy as np
import pytest

import pipeline_helpers as helpers
from bert_jax.errors import UserError
from input_pipeline import manifest as manifest_lib, packing, schema
from input_pipeline.create_data import create_pretraining_data
from input_pipeline.reader import check_schema

SEQ_LEN, PREDICTIONS, PER_ROW = 64, 10, 3
SETTINGS = dict(max_seq_len=SEQ_LEN, max_predictions=PREDICTIONS, masked_lm_prob=0.15,
                dupe_factor=2, short_seq_prob=0.3, seed=5, unit_bytes=20_000)


def read_rows(paths, max_sequences_per_row):
    return helpers.parse_shards(paths, schema.parsing_spec(SEQ_LEN, PREDICTIONS,
                                                           max_sequences_per_row))


def shard_paths(manifest, directory):
    return [os.path.join(directory, shard["file"]) for shard in manifest["shards"]]


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    directory = tmp_path_factory.mktemp("packed")
    vocab, corpus = helpers.vocabulary_and_corpus(directory, num_documents=80, seed=1)
    made = dict(vocab=vocab, corpus=corpus)
    for name, per_row, workers in (("unpacked", 1, 1), ("packed", PER_ROW, 1),
                                   ("packed_two_workers", PER_ROW, 2)):
        output = str(directory / name)
        manifest = create_pretraining_data([corpus], vocab, output, num_shards=2,
                                           workers=workers, show_progress=False,
                                           max_sequences_per_row=per_row, **SETTINGS)
        made[name] = dict(output=output, manifest=manifest,
                          rows=read_rows(shard_paths(manifest, output), per_row))
    return made


def instances_of_packed_rows(rows):
    """Every instance of packed rows as a tuple of its features, as the unpacked writer
    would store it."""
    found = []
    for row in range(len(rows["input_ids"])):
        for slot in range(PER_ROW):
            if not rows["next_sentence_weights"][row, slot]:
                continue
            start = int(rows["instance_starts"][row, slot])
            tokens = rows["instance_ids"][row] == slot + 1
            length = int(tokens.sum())
            assert np.all(np.flatnonzero(tokens) == start + np.arange(length))  # contiguous
            np.testing.assert_array_equal(rows["position_ids"][row][tokens], np.arange(length))
            positions = rows["masked_lm_positions"][row]
            mine = (rows["masked_lm_weights"][row] > 0) & tokens[positions]
            padding = [0] * (PREDICTIONS - int(mine.sum()))
            found.append((tuple(rows["input_ids"][row][tokens]),
                          tuple(rows["segment_ids"][row][tokens]),
                          tuple(positions[mine] - start) + tuple(padding),
                          tuple(rows["masked_lm_ids"][row][mine]) + tuple(padding),
                          tuple(rows["masked_lm_weights"][row][mine]) + tuple(padding),
                          int(rows["next_sentence_labels"][row, slot])))
    return found


def instances_of_unpacked_rows(rows):
    found = []
    for row in range(len(rows["input_ids"])):
        real = rows["input_mask"][row] > 0
        found.append((tuple(rows["input_ids"][row][real]), tuple(rows["segment_ids"][row][real]),
                      tuple(rows["masked_lm_positions"][row]), tuple(rows["masked_lm_ids"][row]),
                      tuple(rows["masked_lm_weights"][row]),
                      int(rows["next_sentence_labels"][row, 0])))
    return found


def test_packed_rows_hold_exactly_the_unpacked_writers_instances(made):
    packed, unpacked = made["packed"]["rows"], made["unpacked"]["rows"]
    assert (collections.Counter(instances_of_packed_rows(packed))
            == collections.Counter(instances_of_unpacked_rows(unpacked)))
    assert len(packed["input_ids"]) < len(unpacked["input_ids"])
    assert np.all(packed["input_ids"][np.arange(len(packed["input_ids"]))[:, None],
                                      packed["instance_starts"]][packed["next_sentence_weights"] > 0]
                  == helpers.CLS)
    # Padding only after the last instance; no row over-full or over N instances.
    np.testing.assert_array_equal(packed["input_mask"], packed["instance_ids"] > 0)
    assert np.all(np.diff((packed["instance_ids"] > 0).astype(int), axis=1) <= 0)


def test_the_manifest_records_packing_and_the_real_token_fraction(made):
    for name, per_row in (("unpacked", 1), ("packed", PER_ROW)):
        manifest, rows = made[name]["manifest"], made[name]["rows"]
        assert manifest["packed"] == (per_row > 1)
        assert manifest_lib.sequences_per_row(manifest) == per_row
        assert manifest["num_records"] == len(rows["input_ids"])
        assert sum(manifest_lib.records_in_shard(shard) for shard in manifest["shards"]) == \
            manifest["num_records"]
        assert manifest["real_token_fraction"] == pytest.approx(  # rounded to 6 decimals
            rows["input_mask"].mean(), abs=1e-6)
    assert made["packed"]["manifest"]["num_instances"] == \
        made["unpacked"]["manifest"]["num_instances"]
    assert made["packed"]["manifest"]["real_token_fraction"] > 0.05 + \
        made["unpacked"]["manifest"]["real_token_fraction"]
    # A bert-jax from before packing reads manifest version 1 only: it refuses these.
    assert made["packed"]["manifest"]["version"] == manifest_lib.PACKED_VERSION != \
        manifest_lib.VERSION == made["unpacked"]["manifest"]["version"]


def test_the_shards_do_not_depend_on_the_worker_count(made):
    for one, two in zip(shard_paths(made["packed"]["manifest"], made["packed"]["output"]),
                        shard_paths(made["packed_two_workers"]["manifest"],
                                    made["packed_two_workers"]["output"])):
        assert open(one, "rb").read() == open(two, "rb").read()


def test_a_packed_shard_read_as_unpacked_or_the_reverse_is_a_clear_error(made):
    packed = shard_paths(made["packed"]["manifest"], made["packed"]["output"])[0]
    unpacked = shard_paths(made["unpacked"]["manifest"], made["unpacked"]["output"])[0]
    with pytest.raises(UserError, match="packed rows.*max_sequences_per_row"):
        check_schema(packed, SEQ_LEN, PREDICTIONS)
    with pytest.raises(UserError, match="unpacked rows.*--pack"):
        check_schema(unpacked, SEQ_LEN, PREDICTIONS, PER_ROW)
    with pytest.raises(UserError, match="max_sequences_per_row=3.*but 1"):
        manifest_lib.check_settings(made["packed"]["manifest"], SEQ_LEN, PREDICTIONS,
                                    made["packed"]["output"])
    # The original run_pretraining.py's parsing spec fails on a packed record.
    import tensorflow as tf
    record = next(iter(tf.data.TFRecordDataset([packed])))
    with pytest.raises(tf.errors.InvalidArgumentError):
        tf.io.parse_single_example(record, helpers.original_feature_spec(SEQ_LEN, PREDICTIONS))


def test_best_fit_packing_fills_rows_and_keeps_every_instance():
    rng = np.random.default_rng(0)
    lengths = np.concatenate([np.full(40, 64), rng.integers(5, 64, 200)])
    rows = packing.pack_lengths(lengths, 64, 3)
    assert sorted(index for row in rows for index in row) == list(range(len(lengths)))
    assert all(len(row) <= 3 and lengths[row].sum() <= 64 for row in rows)
    assert [len(row) for row in rows[:40]] == [1] * 40  # full instances open their own rows
    assert lengths.sum() / (len(rows) * 64) > 0.95
    # A prediction budget per row: no row exceeds it, whatever the token room.
    predictions = np.maximum(1, np.round(lengths * 0.3)).astype(int)
    rows = packing.pack_lengths(lengths, 64, 3, predictions, 22)
    assert sorted(index for row in rows for index in row) == list(range(len(lengths)))
    assert all(predictions[row].sum() <= 22 and lengths[row].sum() <= 64 for row in rows)


def test_beam_writes_the_local_writers_packed_shards(made, tmp_path):
    pytest.importorskip("apache_beam")
    from input_pipeline.beam import create_pretraining_data_beam

    beam = str(tmp_path / "beam")
    # In one process: test_create_data_beam.py runs the pipeline in worker processes.
    manifest = create_pretraining_data_beam([made["corpus"]], made["vocab"], beam, num_shards=2,
                                            workers=2, max_sequences_per_row=PER_ROW,
                                            beam_options="--direct_running_mode=in_memory",
                                            **SETTINGS)
    assert manifest == made["packed"]["manifest"]
    for ours, theirs in zip(shard_paths(manifest, beam),
                            shard_paths(made["packed"]["manifest"], made["packed"]["output"])):
        assert hashlib.sha256(open(ours, "rb").read()).digest() == \
            hashlib.sha256(open(theirs, "rb").read()).digest()
