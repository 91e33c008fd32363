"""Faults found by trying the pod path (issue 15), each with the test that would have caught it:
original-tool shards, dynamic masking without a vocabulary, shards cut at a record boundary."""

import json
import os

import numpy as np
import pytest
from pipeline_helpers import VOCABULARY, make_corpus, read_shards, write_original_style_shard
from test_training_support import VOCAB_SIZE, tiny_run_config

from bert_jax.errors import UserError
from bert_jax.training import trainer, training_data

SEQ_LEN, PREDICTIONS = 16, 4


@pytest.fixture(scope="module")
def original_shards(tmp_path_factory):
    """Two shards written record by record as the original create_pretraining_data.py
    writes them (no manifest), and the vocabulary they were made with."""
    from input_pipeline.create_data import create_pretraining_data

    root = tmp_path_factory.mktemp("original")
    vocab = str(root / "vocab.txt")  # the tiny model's vocabulary size: its compiled step is shared
    (root / "vocab.txt").write_text("\n".join(VOCABULARY[:VOCAB_SIZE]) + "\n")
    make_corpus(str(root / "corpus.txt"), num_documents=30, seed=5)
    ours = create_pretraining_data([str(root / "corpus.txt")], vocab, str(root / "ours"),
                                   num_shards=2, max_seq_len=SEQ_LEN,
                                   max_predictions=PREDICTIONS, dupe_factor=1,
                                   show_progress=False)
    paths = [str(root / "ours" / shard["file"]) for shard in ours["shards"]]
    features = read_shards(paths, SEQ_LEN, PREDICTIONS)
    features["next_sentence_labels"] = features["next_sentence_labels"].reshape(-1)
    os.makedirs(root / "original")
    half = len(features["input_ids"]) // 2
    for index, rows in enumerate((slice(0, half), slice(half, None))):
        write_original_style_shard(str(root / "original" / f"tf_examples.tfrecord-{index}"),
                                   {name: value[rows] for name, value in features.items()})
    return dict(vocab=vocab, pattern=str(root / "original" / "tf_examples.tfrecord-*"),
                ours=str(root / "ours"),
                max_id=int(features["input_ids"].max()))


def test_original_tool_shards_train_with_a_warning(original_shards, tmp_path):
    config = tiny_run_config(**{
        "data.train_files": original_shards["pattern"], "data.vocab_path": original_shards["vocab"],
        "model.vocab_size": 0, "data.shuffle_buffer": 16, "checkpoint.every_steps": 12})
    logged = []
    result = trainer.train(config, str(tmp_path / "run"), show_progress=False,
                           log=lambda *parts: logged.append(" ".join(map(str, parts))))
    assert result["step"] == 12 and len(result["losses"]) == 12
    assert all(np.isfinite(loss) for _, loss in result["losses"])
    warning = next(line for line in logged if line.startswith("warning:"))
    assert "no manifest.json" in warning and "cannot be checked" in warning
    assert f"ids below {config.model.vocab_size}" in warning


def test_original_shards_with_ids_beyond_the_vocabulary_are_refused(original_shards, tmp_path):
    small = tmp_path / "vocab.txt"  # a vocabulary smaller than the shards' largest id
    tokens = open(original_shards["vocab"]).read().split("\n")[:original_shards["max_id"]]
    small.write_text("\n".join(tokens) + "\n")
    config = tiny_run_config(**{"data.train_files": original_shards["pattern"],
                                "data.vocab_path": str(small), "model.vocab_size": 0})
    with pytest.raises(UserError, match=r"tf_examples.tfrecord-0: record \d+: \w+ holds token "
                                        rf"id \d+ .*outside the vocabulary's {len(tokens)} ids"):
        training_data.prepare_data(config, log=lambda *_: None)


def test_dynamic_masking_without_a_vocabulary_is_a_clear_error():
    config = tiny_run_config(**{"data.dynamic_masking": True})
    with pytest.raises(UserError, match="data.dynamic_masking needs data.vocab_path"):
        training_data.prepare_data(config)


def test_a_shard_cut_at_a_record_boundary_is_named(original_shards, tmp_path):
    """Half the records of a shard, cut between two records: tf.data reads it without an
    error; the epoch's record count against the manifest's catches it."""
    import shutil

    from input_pipeline import tfrecord
    from input_pipeline.reader import PretrainingDataset

    shards = tmp_path / "shards"
    shutil.copytree(original_shards["ours"], shards)
    manifest = json.loads((shards / "manifest.json").read_text())
    first = shards / manifest["shards"][0]["file"]
    listed = manifest["shards"][0]["num_instances"]
    kept = tfrecord.first_records(str(first), listed // 2)
    boundary = sum(8 + 4 + len(data) + 4 for data in kept)  # length, its crc, data, crc
    first.write_bytes(first.read_bytes()[:boundary])
    total = manifest["num_instances"]
    reader = PretrainingDataset([str(shards)], 4, SEQ_LEN, PREDICTIONS, shuffle_buffer=1,
                                process_index=0, process_count=1)
    with pytest.raises(UserError, match=rf"{first.name}: holds {len(kept)} records but its "
                                        rf"manifest lists {listed}: the shard was cut short"):
        for _ in range(2 * total // 4 + 2):  # past the end of the first epoch
            next(reader)
    intact = PretrainingDataset([original_shards["ours"]], 4, SEQ_LEN, PREDICTIONS,
                                shuffle_buffer=1, process_index=0, process_count=1)
    for _ in range(2 * total // 4 + 2):  # two epochs of the intact shards pass
        next(intact)
