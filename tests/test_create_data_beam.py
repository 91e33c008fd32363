"""`create-data --runner beam`: the local writer's shards, byte for byte, and its manifest."""

import hashlib
import os
import sys

import numpy as np
import pytest

import pipeline_helpers as helpers
from gcs_emulator import gcs_bucket, gcs_emulator  # noqa: F401  (fixtures)
from bert_jax.errors import UserError
from input_pipeline.beam import create_pretraining_data_beam
from input_pipeline.beam.shard_assignment import first_records, pieces_by_shard
from input_pipeline.create_data import create_pretraining_data
from input_pipeline.manifest import records_in_shard

SETTINGS = dict(max_seq_len=64, max_predictions=10, dupe_factor=2, seed=5, num_shards=3,
                unit_bytes=6_000)


def shard_hashes(directory: str) -> dict[str, str]:
    return {name: hashlib.sha256(open(os.path.join(directory, name), "rb").read()).hexdigest()
            for name in sorted(os.listdir(directory)) if name.endswith(".tfrecord")}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    directory = tmp_path_factory.mktemp("beam")
    vocab = helpers.write_vocabulary(str(directory))
    paths = [str(directory / f"part-{index}.txt") for index in range(2)]
    for index, path in enumerate(paths):
        helpers.make_corpus(path, num_documents=30, seed=index)
    return dict(directory=directory, vocab=vocab, pattern=str(directory / "part-*.txt"))


def test_shard_assignment_is_the_round_robin_of_the_whole_run():
    counts = {0: 5, 1: 0, 2: 7, 3: 4}
    starts = first_records(counts)
    shards = [[] for _ in range(3)]
    for unit in range(4):
        offsets = np.arange(counts[unit] + 1)
        for shard, positions in pieces_by_shard(starts[unit], offsets, 3):
            shards[shard] += [(unit, position) for position in positions.tolist()]
    run = [(unit, position) for unit in range(4) for position in range(counts[unit])]
    assert shards == [run[shard::3] for shard in range(3)]


# Worker processes (the default) cost about 8 s a run in start-up alone; the objective mlm
# run is the same pipeline in one process (the gs:// test below runs processes too).
@pytest.mark.parametrize("objective, running_mode", [
    ({}, "multi_processing"), (dict(objective="mlm", max_sequences_per_row=3), "in_memory")],
    ids=["mlm_nsp", "mlm"])
def test_beam_writes_the_local_writers_shards_and_manifest(corpus, tmp_path, objective,
                                                           running_mode):
    pytest.importorskip("apache_beam")
    local = str(tmp_path / "local")
    beam = str(tmp_path / "beam")
    local_manifest = create_pretraining_data([corpus["pattern"]], corpus["vocab"], local,
                                             workers=1, show_progress=False, **SETTINGS,
                                             **objective)
    beam_manifest = create_pretraining_data_beam(
        [corpus["pattern"]], corpus["vocab"], beam, workers=2,
        beam_options=f"--direct_running_mode={running_mode}", **SETTINGS, **objective)
    assert local_manifest["num_instances"] > 100
    counts = [records_in_shard(shard) for shard in beam_manifest["shards"]]
    assert max(counts) - min(counts) <= 1
    assert shard_hashes(beam) == shard_hashes(local) and len(shard_hashes(local)) == 3
    assert beam_manifest == local_manifest
    assert sorted(os.listdir(beam)) == sorted(os.listdir(local))  # no temporaries left


def test_non_utf8_input_fails_as_locally_and_leaves_nothing(corpus, tmp_path):
    pytest.importorskip("apache_beam")
    bad = str(tmp_path / "bad.txt")
    with open(bad, "wb") as file:
        file.write(b"good line .\n\nanother \xff line .\n")
    with pytest.raises(UserError) as local_error:
        create_pretraining_data([corpus["pattern"], bad], corpus["vocab"],
                                str(tmp_path / "local"), workers=1, show_progress=False,
                                **SETTINGS)
    output = tmp_path / "beam"
    output.mkdir()
    (output / "shard-00000-of-00007.tfrecord").write_bytes(b"an earlier run's shard")
    with pytest.raises(UserError) as beam_error:
        create_pretraining_data_beam([corpus["pattern"], bad], corpus["vocab"], str(output),
                                     workers=1, beam_options="--direct_running_mode=in_memory",
                                     **SETTINGS)
    assert str(beam_error.value) == str(local_error.value)
    assert "line 3: not UTF-8" in str(beam_error.value)
    assert os.listdir(output) == ["shard-00000-of-00007.tfrecord"]  # untouched, nothing added


def test_missing_extra_names_the_install(corpus, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "apache_beam", None)  # import now raises ImportError
    with pytest.raises(UserError, match=r"pip install 'bert-jax\[beam\]'"):
        create_pretraining_data_beam([corpus["pattern"]], corpus["vocab"], str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


def test_beam_reads_and_writes_gs_as_the_local_writer(corpus, tmp_path, gcs_bucket):
    """Inputs by a gs:// glob, shards and manifest to gs://, on the GCS emulator (workers
    are processes: they reach it through the inherited environment)."""
    pytest.importorskip("apache_beam")
    from bert_jax.storage import files

    local = str(tmp_path / "local")
    local_manifest = create_pretraining_data([corpus["pattern"]], corpus["vocab"], local,
                                             workers=1, show_progress=False, **SETTINGS)
    for index in range(2):
        files.copy_file(str(corpus["directory"] / f"part-{index}.txt"),
                        f"{gcs_bucket}/text/part-{index}.txt")
    remote = f"{gcs_bucket}/shards"
    beam_manifest = create_pretraining_data_beam([f"{gcs_bucket}/text/part-*.txt"],
                                                 corpus["vocab"], remote, workers=2, **SETTINGS)
    assert sorted(files.listdir(remote)) == sorted(os.listdir(local))  # no temporaries left
    for name in shard_hashes(local):
        assert files.read_bytes(files.join(remote, name)) == \
            open(os.path.join(local, name), "rb").read()
    assert beam_manifest["inputs"] == [f"{gcs_bucket}/text/part-{index}.txt" for index in range(2)]
    assert dict(beam_manifest, inputs=None) == dict(local_manifest, inputs=None)
