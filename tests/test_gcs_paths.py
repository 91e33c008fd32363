"""Every user path may be `gs://`: the commands and the trainer against a local GCS emulator.

Each test runs the same work on local paths and on `gs://` ones and requires identical
results, so a remote path that were silently read or written elsewhere would fail.
"""

import io
import json
import os

import numpy as np
import pytest
from gcs_emulator import gcs_bucket, gcs_emulator  # noqa: F401  (fixtures)
from interop_helpers import random_pretraining_params, tiny_random_model
from pipeline_helpers import make_corpus, write_vocabulary

from bert_jax.storage import files
from bert_jax.interop import model_source, model_writers
from bert_jax.cli import main
from bert_jax.models.presets import preset
from bert_jax.errors import UserError
from input_pipeline.tokenization import load_tokenizer


def _upload(local: str, remote: str) -> str:
    files.copy_file(local, remote)
    return remote


def test_file_layer_round_trip(gcs_bucket):
    path = files.join(gcs_bucket, "a", "b.txt")
    files.write_text(path, "hello\n")
    assert files.read_text(path) == "hello\n" and files.isfile(path)
    assert files.isdir(files.join(gcs_bucket, "a")) and files.listdir(
        files.join(gcs_bucket, "a")) == ["b.txt"]
    assert files.expand(files.join(gcs_bucket, "a")) == [path]
    assert files.glob(files.join(gcs_bucket, "*", "*.txt")) == [path]
    with pytest.raises(RuntimeError), files.atomic_write(files.join(gcs_bucket, "c.txt")) as file:
        file.write("half")
        raise RuntimeError("the writer fails")
    assert not files.exists(files.join(gcs_bucket, "c.txt"))  # nothing half-written
    assert files.ancestors(path) == [path, f"{gcs_bucket}/a", gcs_bucket]
    with files.local_copy(files.join(gcs_bucket, "a")) as local:
        assert open(os.path.join(local, "b.txt")).read() == "hello\n"


def test_convert_from_and_to_gs(gcs_bucket, tmp_path):
    config, params, tokenizer = tiny_random_model(tmp_path, seed=3)
    local = str(tmp_path / "bert-jax")
    model_writers.save_model(config, params, tokenizer, local)
    remote_hf, remote_bert_jax = f"{gcs_bucket}/hf", f"{gcs_bucket}/bert-jax"
    assert main(["convert", local, remote_hf, "--to", "hf"]) == 0
    assert main(["convert", remote_hf, remote_bert_jax]) == 0
    assert main(["convert", remote_bert_jax, str(tmp_path / "back-hf"), "--to", "hf"]) == 0
    assert main(["convert", local, str(tmp_path / "direct-hf"), "--to", "hf"]) == 0
    for name in ("model.safetensors", "config.json", "vocab.txt"):  # via gs:// == direct
        assert (tmp_path / "back-hf" / name).read_bytes() == \
            (tmp_path / "direct-hf" / name).read_bytes()
    model = model_source.resolve(remote_bert_jax).load()
    loaded_config, loaded = model.config, model.params
    assert loaded_config == config
    np.testing.assert_array_equal(loaded["bert"]["embeddings"]["word_embeddings"]["embedding"],
                                  params["bert"]["embeddings"]["word_embeddings"]["embedding"])
    # A second convert over a non-empty gs:// destination is refused without --overwrite.
    assert main(["convert", local, remote_hf, "--to", "hf"]) == 2


def test_features_reads_a_gs_model_and_writes_gs(gcs_bucket, tmp_path):
    config, params, tokenizer = tiny_random_model(tmp_path, seed=3)
    local = str(tmp_path / "model")
    model_writers.save_model(config, params, tokenizer, local)
    remote = f"{gcs_bucket}/model"
    model_writers.save_model(config, params, tokenizer, remote)
    texts = tmp_path / "texts.txt"
    texts.write_text("the man went to the store .\nthe dog sat on the mat\tit was happy\n")
    arguments = ["--layers=-1", "--max-seq-len", "16"]
    assert main(["features", "--model", local, "--input", str(texts),
                 "--output", str(tmp_path / "local.npz"), *arguments]) == 0
    assert main(["features", "--model", remote, "--input",
                 _upload(str(texts), f"{gcs_bucket}/texts.txt"),
                 "--output", f"{gcs_bucket}/out/features.npz", *arguments]) == 0
    expected = np.load(tmp_path / "local.npz")
    actual = np.load(io.BytesIO(files.read_bytes(f"{gcs_bucket}/out/features.npz")))
    assert sorted(actual) == sorted(expected)
    for name in expected:
        np.testing.assert_array_equal(actual[name], expected[name])


SHARD_SETTINGS = dict(num_shards=2, max_seq_len=16, max_predictions=4, dupe_factor=2,
                      show_progress=False)


@pytest.fixture
def shards_local_and_remote(gcs_bucket, tmp_path):
    """create-data on the same text and vocabulary, once on local paths, once all on gs://."""
    from input_pipeline.create_data import create_pretraining_data

    vocab = write_vocabulary(str(tmp_path))
    make_corpus(str(tmp_path / "corpus.txt"), num_documents=30, seed=4)
    create_pretraining_data([str(tmp_path / "corpus.txt")], vocab, str(tmp_path / "shards"),
                            **SHARD_SETTINGS)
    remote = dict(vocab=_upload(vocab, f"{gcs_bucket}/vocab/vocab.txt"),
                  corpus=_upload(str(tmp_path / "corpus.txt"), f"{gcs_bucket}/text/corpus.txt"),
                  shards=f"{gcs_bucket}/shards")
    manifest = create_pretraining_data([f"{gcs_bucket}/text"], remote["vocab"],
                                       remote["shards"], **SHARD_SETTINGS)
    return dict(local=str(tmp_path / "shards"), local_vocab=vocab, manifest=manifest, **remote)


def test_create_data_reads_and_writes_gs(shards_local_and_remote):
    local, remote = shards_local_and_remote["local"], shards_local_and_remote["shards"]
    names = sorted(files.listdir(remote))
    assert names == sorted(os.listdir(local))  # shards + manifest, no temporaries left
    for name in names:
        if name.endswith(".tfrecord"):
            assert files.read_bytes(files.join(remote, name)) == \
                open(os.path.join(local, name), "rb").read()
    assert shards_local_and_remote["manifest"]["shards"] == \
        json.load(open(os.path.join(local, "manifest.json")))["shards"]


def _train(config, workdir, log=None):
    from bert_jax.training import trainer
    from test_training_support import pretraining

    messages = []
    result = trainer.train(config, workdir, **pretraining(config, log=messages.append),
                           show_progress=False, log=messages.append)
    return result, messages


def test_pretrain_with_gs_shards_vocabulary_init_from_and_workdir(shards_local_and_remote,
                                                                   gcs_bucket, tmp_path):
    """A gs:// run (shards, vocabulary, init_from, work directory) stopped at step 2 and
    resumed to step 4 ends with the parameters of an uninterrupted local run."""
    import jax
    from test_training_support import tiny_run_config

    from bert_jax.training import checkpointing

    data = shards_local_and_remote
    tokenizer = load_tokenizer(data["local_vocab"])
    config = preset("tiny", vocab_size=tokenizer.vocab_size, hidden_dim=32, num_layers=1,
                    num_heads=2, mlp_dim=64, max_positions=16)
    start = random_pretraining_params(config, seed=5)
    model_writers.save_model(config, start, tokenizer, str(tmp_path / "start"))
    model_writers.save_model(config, start, tokenizer, f"{gcs_bucket}/start")

    def run_config(root, shards, steps):
        return tiny_run_config(**{"data.train_files": shards, "data.vocab_path": "",
                                  "init_from": f"{root}/start", "model.vocab_size": 0,
                                  "num_train_steps": steps, "checkpoint.every_steps": 2,
                                  "schedule_steps": 4,  # one schedule: one compiled step
                                  "data.shuffle_buffer": 16})

    _train(run_config(str(tmp_path), data["local"], 4), str(tmp_path / "run"))
    _, first = _train(run_config(gcs_bucket, data["shards"], 2), f"{gcs_bucket}/run")
    _, second = _train(run_config(gcs_bucket, data["shards"], 4), f"{gcs_bucket}/run")
    assert any("resuming from step 2" in message for message in second), second
    assert files.read_text(f"{gcs_bucket}/run/vocab.txt") == open(data["local_vocab"]).read()
    local = checkpointing.restore_params(str(tmp_path / "run/checkpoints/4/params"))
    remote = checkpointing.restore_params(f"{gcs_bucket}/run/checkpoints/4/params")
    jax.tree.map(np.testing.assert_array_equal, remote, local)
    # init_from was applied: step 2 is not a fresh random init but a few updates from `start`.
    step_2 = checkpointing.restore_params(f"{gcs_bucket}/run/checkpoints/2/params")
    drift = np.abs(np.asarray(step_2["bert"]["embeddings"]["word_embeddings"]["embedding"])
                   - start["bert"]["embeddings"]["word_embeddings"]["embedding"]).max()
    assert drift < 0.05


def test_a_manifest_cannot_point_outside_its_directory(tmp_path):
    from input_pipeline import manifest as manifest_lib
    from input_pipeline.manifest import expand_patterns

    (tmp_path / "secret.tfrecord").write_bytes(b"")
    shards = tmp_path / "shards"
    shards.mkdir()
    for name in ("../secret.tfrecord", str(tmp_path / "secret.tfrecord"), "gs://other/x", ".."):
        (shards / manifest_lib.MANIFEST_NAME).write_text(json.dumps(dict(
            format=manifest_lib.FORMAT, version=manifest_lib.VERSION, num_instances=1,
            shards=[dict(file=name, num_instances=1)], settings={}, vocabulary={})))
        with pytest.raises(UserError, match="is not a plain file name in this directory"):
            expand_patterns([str(shards)])


def test_convert_refuses_a_destination_that_contains_its_source(tmp_path):
    config, params, tokenizer = tiny_random_model(tmp_path, seed=3)
    source = tmp_path / "models" / "mine"
    model_writers.save_model(config, params, tokenizer, str(source))
    for destination in (tmp_path / "models", source, tmp_path):
        assert main(["convert", str(source), str(destination), "--to", "hf",
                     "--overwrite"]) == 2
        assert (source / "params").is_dir()  # the source survives
    with pytest.raises(UserError, match="refusing to write over the source"):
        model_writers.export_huggingface(config, params, tokenizer, str(tmp_path / "models"),
                                         overwrite=True, sources=(str(source),))


def test_exports_follow_the_umask(tmp_path):
    config, params, tokenizer = tiny_random_model(tmp_path, seed=3)
    previous = os.umask(0o022)
    try:
        model_writers.export_huggingface(config, params, tokenizer, str(tmp_path / "hf"))
        model_writers.save_model(config, params, tokenizer, str(tmp_path / "bj"))
    finally:
        os.umask(previous)
    for root in (tmp_path / "hf", tmp_path / "bj"):
        modes = {path.name: path.stat().st_mode & 0o777 for path in [root, *root.rglob("*")]}
        assert modes[root.name] == 0o755
        assert {mode for mode in modes.values()} <= {0o755, 0o644}, modes
        assert modes["vocab.txt"] == 0o644


@pytest.mark.parametrize("command", ["features", "fill-mask"])
def test_a_vocabulary_larger_than_the_model_is_refused(command, tmp_path, capsys):
    config, params, tokenizer = tiny_random_model(tmp_path, seed=3)
    model = tmp_path / "model"
    small = preset("tiny", vocab_size=tokenizer.vocab_size - 3, max_positions=64)
    model_writers.save_model(small, random_pretraining_params(small), tokenizer, str(model))
    texts = tmp_path / "texts.txt"
    texts.write_text("the man went to the store .\n")
    argv = (["features", "--model", str(model), "--input", str(texts), "--output",
             str(tmp_path / "out.npz")] if command == "features"
            else ["fill-mask", "--model", str(model), "the [MASK] went home"])
    assert main(argv) == 2
    assert f"{tokenizer.vocab_size} tokens, but the model" in capsys.readouterr().err
    assert not (tmp_path / "out.npz").exists()


def test_remote_shards_read_as_local_ones_and_a_cut_one_is_named(shards_local_and_remote):
    """The file-layer reader (gs://) gives tf.data's local batches; a cut shard is named."""
    from input_pipeline.reader import PretrainingDataset

    data = shards_local_and_remote

    def batches(source):
        return list(PretrainingDataset([source], 4, 16, 4, process_index=0, process_count=1,
                                       repeat=False, shuffle_buffer=8))

    local, remote = batches(data["local"]), batches(data["shards"])
    assert len(remote) == len(local) > 2
    for expected, actual in zip(local, remote):
        for name in expected:
            np.testing.assert_array_equal(actual[name], expected[name])
    whole = files.read_bytes(f"{data['shards']}/shard-00000-of-00002.tfrecord")
    with files.atomic_write(f"{data['shards']}/shard-00000-of-00002.tfrecord", "wb") as file:
        file.write(whole[:len(whole) - 30])
    with pytest.raises(UserError, match="shard-00000-of-00002.tfrecord: truncated shard"):
        batches(data["shards"])


def _closed_port_url() -> str:
    """An endpoint on this machine where nothing listens (connection refused at once)."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}"


def test_an_unreachable_bucket_fails_in_seconds_naming_it_and_how_to_authenticate(monkeypatch):
    # gcsfs alone retried the first request six times with back-off (about a minute),
    # then raised aiohttp's ClientConnectorError through a 186-line traceback.
    import time

    import gcsfs

    monkeypatch.setenv("STORAGE_EMULATOR_HOST", _closed_port_url())
    gcsfs.GCSFileSystem.clear_instance_cache()
    start = time.monotonic()
    try:
        with pytest.raises(UserError) as raised:
            files.exists("gs://some-bucket/data/shard-00000-of-00001.tfrecord")
    finally:
        gcsfs.GCSFileSystem.clear_instance_cache()
    assert time.monotonic() - start < 5
    message = str(raised.value)
    assert message.startswith("gs://some-bucket: cannot reach Google Cloud Storage at "
                              "http://127.0.0.1:") and "connection refused" in message
    assert "gcloud auth application-default login" in message
    assert "GOOGLE_APPLICATION_CREDENTIALS" in message and "\n" not in message


def test_an_unreachable_bucket_is_one_line_from_the_command_line(tmp_path):
    import subprocess
    import sys

    environment = {key: value for key, value in os.environ.items()
                   if key not in ("FSSPEC_GCS_TOKEN", "GOOGLE_APPLICATION_CREDENTIALS")}
    environment.update(STORAGE_EMULATOR_HOST=_closed_port_url(), NO_GCE_CHECK="true",
                       CLOUDSDK_CONFIG=str(tmp_path / "gcloud"))
    result = subprocess.run(
        [sys.executable, "-m", "bert_jax.cli", "vocab", "--input", "gs://corpora/wiki/*.txt",
         "--size", "100", "--output", str(tmp_path / "vocab.txt")],
        env=environment, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(
        "bert-jax vocab: error: gs://corpora: cannot reach Google Cloud Storage"), lines
    assert not (tmp_path / "vocab.txt").exists()
