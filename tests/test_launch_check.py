"""`bert-jax launch check`: every shipped job file's run, tried here before a slice is rented.

The job files name gs://my-bucket/...; here that bucket is created on a local GCS emulator
(`tests/gcs_emulator.py`, which the check's subprocess reaches through the inherited
environment) holding small real files of the same layout (a vocabulary, 64 train and 64
eval shards with their manifests, made by create-data, so that each of a v5e-256's 64
workers has one), and everything else is the shipped file: its gs:// paths, config
(configs/bert_large.py), overrides and accelerator type, except that the traced model has
2 of BERT-Large's 24 layers (every layer is sharded alike; 24 take ~8 s each to trace here).
One subprocess with 256 simulated CPU devices checks them all.
"""

import dataclasses
import glob
import io
import os
import re

import pytest
from gcs_emulator import gcs_emulator  # noqa: F401  (fixture)

from bert_jax import cli
from bert_jax.storage import files
from bert_jax.errors import UserError
from launch.check import check_jobs
from launch.job import load_job
from pipeline_helpers import make_corpus, write_vocabulary
from test_launch import REPO_ROOT

SHIPPED = sorted(glob.glob(os.path.join(REPO_ROOT, "launch", "jobs", "*.toml")))
BUCKET = "gs://my-bucket"


@pytest.fixture(scope="module")
def bucket(gcs_emulator, tmp_path_factory):  # noqa: F811  (the fixture imported above)
    """gs://my-bucket on the emulator, with the layout the job files name."""
    import fsspec

    from input_pipeline.create_data import create_pretraining_data

    root = tmp_path_factory.mktemp("bucket")
    vocab = write_vocabulary(str(root))
    make_corpus(str(root / "corpus.txt"), num_documents=80, seed=3)
    create_pretraining_data([str(root / "corpus.txt")], vocab, str(root / "train"),
                            num_shards=64, max_seq_len=128, max_predictions=20, dupe_factor=1,
                            show_progress=False)
    filesystem = fsspec.filesystem("gs")
    if not filesystem.exists(BUCKET):
        filesystem.mkdir(BUCKET.removeprefix("gs://"))
    files.copy_file(vocab, f"{BUCKET}/vocab/vocab.txt")
    filesystem.put(str(root / "train") + "/", f"{BUCKET}/shards/train/", recursive=True)
    filesystem.put(str(root / "train") + "/", f"{BUCKET}/shards/eval/", recursive=True)
    return BUCKET


def two_layer_job(path: str, name_suffix: str = "", **changes):
    """The shipped job, its gs:// paths unchanged, with 2 layers; `changes` set overrides
    (None removes one)."""
    job = load_job(path)
    overrides = dict(job.overrides)
    overrides["model.num_layers"] = 2
    for key, value in changes.items():
        key = key.replace("__", ".")
        if value is None:
            overrides.pop(key)
        else:
            overrides[key] = value
    return dataclasses.replace(job, path=job.path + name_suffix, overrides=tuple(overrides.items()))


def job_output(text: str, path: str) -> str:
    """The lines the check printed for one job."""
    block = text.split(f"{path}:\n", 1)[1]
    return block.split("\n/", 1)[0]


def test_every_shipped_job_passes_and_mistakes_are_named(bucket):
    assert len(SHIPPED) == 3
    good = [two_layer_job(path) for path in SHIPPED]
    first = SHIPPED[0]
    bad = [
        # What the shipped files did before: no vocabulary, and bert_large.py's vocab_size 0.
        two_layer_job(first, "#no-vocab", data__vocab_path=None),
        two_layer_job(first, "#bad-mesh", mesh__tensor=3),
        two_layer_job(first, "#no-shards", data__train_files=bucket + "/nothing/*.tfrecord"),
        two_layer_job(first, "#bad-length", data__seq_len=256),
    ]
    out = io.StringIO()
    with pytest.raises(UserError, match="4 of 7 job"):
        check_jobs(good + bad, out=out)
    text = out.getvalue()
    expected = {"v3_64": "64 devices on 8 worker(s): data 1 x fsdp 64 x tensor 1",
                "v4_64": "32 devices on 8 worker(s): data 1 x fsdp 32 x tensor 1",
                "v5e_256": "256 devices on 64 worker(s): data 1 x fsdp 256 x tensor 1"}
    for job in good:
        lines = job_output(text, job.path)
        assert lines.rstrip().endswith("ok"), lines
        (mesh,) = [value for key, value in expected.items() if key in job.path]
        assert mesh in lines
        assert f"{bucket}/vocab/vocab.txt: 411 tokens (model.vocab_size 411)" in lines
        assert re.search(r"train data .*: 64 shard file\(s\); the first [1-9]\d* record\(s\) "
                         r".* have the schema \(seq_len 128, max_predictions 20\) and ids below "
                         r"411", lines), lines
        assert "eval data" in lines
        assert "28.2M parameters, global batch 256 x 128" in lines
    messages = {job.path.rsplit("#", 1)[1]: job_output(text, job.path) for job in bad}
    assert "error: set data.vocab_path" in messages["no-vocab"]
    assert "error: mesh: 64 devices do not divide" in messages["bad-mesh"]
    assert f"error: {bucket}/nothing/*.tfrecord: no shard files match" in messages["no-shards"]
    assert "max_seq_len=128, but 256 was asked for" in messages["bad-length"]


def test_create_checks_before_any_gcloud_call(tmp_path, bucket, monkeypatch, capfd):
    from test_launch_cycle import FakeGcloud

    fake = FakeGcloud(tmp_path)
    monkeypatch.chdir(REPO_ROOT)
    monkeypatch.setenv("PATH", f"{fake.bin_dir}{os.pathsep}{os.environ['PATH']}")
    text = open(SHIPPED[0]).read().replace(f"{bucket}/vocab/vocab.txt", f"{bucket}/none.txt")
    job = tmp_path / "job.toml"
    job.write_text(text)
    assert cli.main(["launch", "create", str(job)]) == 2
    captured = capfd.readouterr()
    assert "none.txt" in captured.err and "1 of 1 job(s) would fail" in captured.err
    assert fake.calls() == []  # nothing was rented
