"""A command that fails, or is killed, leaves nothing a rerun trips on (issue 34): a failed
start writes nothing (everything is checked, and the weights read, before the first write),
and a writer killed with `kill -9` leaves temporaries the next writer of the same path
removes (`temporaries.remove_stale_temporaries`), while a live writer's are kept."""

import os
import signal
import subprocess
import sys
import textwrap

import pytest
from finetune_helpers import made_up_sentences, tiny_model_directory, write_tsv
from interop_helpers import write_vocab

from bert_jax.storage import files
from bert_jax.cli import main

REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def tiny_hf_model(tmp_path_factory):
    """A tiny random model as a Hugging Face directory (config.json + model.safetensors)."""
    root = tmp_path_factory.mktemp("tiny")
    destination = str(root / "hf")
    assert main(["convert", tiny_model_directory(root), destination, "--to", "hf"]) == 0
    return destination


@pytest.mark.parametrize("damage", ["empty", "truncated"])
def test_a_failed_weight_read_leaves_no_task_json(tmp_path, tiny_hf_model, capsys, damage):
    # Before: WORKDIR/task.json was written first and stayed behind.
    broken = tmp_path / "broken"
    broken.mkdir()
    for name in os.listdir(tiny_hf_model):
        data = open(os.path.join(tiny_hf_model, name), "rb").read()
        if name == "model.safetensors":
            data = b"" if damage == "empty" else data[:len(data) // 2]
        (broken / name).write_bytes(data)
    train = write_tsv(tmp_path / "train.tsv", made_up_sentences(8, seed=0))
    workdir = tmp_path / "run"
    assert main(["finetune", "classify", "--model", str(broken), "--train", train,
                 "--workdir", str(workdir), "--max-seq-len", "32", "--no-progress"]) == 2
    assert "model.safetensors: cannot read safetensors file" in capsys.readouterr().err
    assert not workdir.exists()


def test_pretrain_refuses_float16_before_writing_demo_data(tmp_path, monkeypatch, capsys):
    # Before: 11 MB of demo shards under ./runs/demo_data, then the refusal.
    monkeypatch.chdir(tmp_path)
    assert main(["pretrain", "--config", "demo", "--config.precision.dtype=float16",
                 "--workdir", str(tmp_path / "run"), "--no-progress"]) == 2
    assert "precision.dtype must be 'float32' or 'bfloat16', got 'float16'" in \
        capsys.readouterr().err
    assert os.listdir(tmp_path) == []


# Run in a child process that kills itself with SIGKILL in the middle of writing `path`.
_KILLED_WRITER = textwrap.dedent("""
    import os, signal, sys
    from bert_jax.storage import files
    from bert_jax.interop import model_writers
    kind, path = sys.argv[1:]

    def die(directory=None):
        if directory:
            open(os.path.join(directory, "half-written"), "w").write("x" * 1000)
        os.kill(os.getpid(), signal.SIGKILL)

    if kind == "file":
        with files.atomic_write(path) as file:
            file.write("half")
            file.flush()
            die()
    model_writers.write_directory_atomically(path, die)
""")


def _killed_writer(kind: str, path: str) -> list[str]:
    """Runs a writer of `path` that is killed mid-write; returns the siblings it left."""
    child = subprocess.run([sys.executable, "-c", _KILLED_WRITER, kind, path], cwd=REPOSITORY,
                           capture_output=True, text=True, timeout=120,
                           env=dict(os.environ, PYTHONPATH=REPOSITORY))
    assert child.returncode == -signal.SIGKILL, child.stderr
    prefix = f".{os.path.basename(path)}.tmp-"
    return [name for name in os.listdir(os.path.dirname(path)) if name.startswith(prefix)]


def test_a_rerun_of_convert_clears_what_a_killed_convert_left(tmp_path):
    # Before: the hidden .NAME.tmp-* directory of a `kill -9`ed convert stayed beside the
    # output through every rerun (91 MB for MiniLM's SavedModel). One writer serves every
    # directory target (bert-jax, hf, tf-checkpoint, saved-model, sentence-transformers);
    # hf is the quick one to run (a SavedModel takes 18 s, most of it importing TensorFlow).
    source = tiny_model_directory(tmp_path)
    destination = str(tmp_path / "exported")
    left = _killed_writer("directory", destination)
    assert len(left) == 1 and os.path.isfile(tmp_path / left[0] / "half-written")
    assert main(["convert", source, destination, "--to", "hf"]) == 0
    assert sorted(os.listdir(tmp_path)) == ["exported", "tiny_model", "vocab.txt"]


def test_a_rerun_clears_a_killed_atomic_write_but_keeps_a_live_writers(tmp_path):
    path = str(tmp_path / "results.json")
    left = _killed_writer("file", path)
    assert len(left) == 1 and open(tmp_path / left[0]).read() == "half"
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        live = tmp_path / f".results.json.tmp-{sleeper.pid}-0"
        live.write_text("another run, still writing")
        files.write_text(path, "{}")
        assert sorted(os.listdir(tmp_path)) == [live.name, "results.json"]
    finally:
        sleeper.kill()
        sleeper.wait()
    files.write_text(path, "{}")  # its writer is gone now
    assert os.listdir(tmp_path) == ["results.json"]


def test_create_data_clears_the_shards_a_killed_run_left(tmp_path):
    from pipeline_helpers import make_corpus

    vocab = write_vocab(tmp_path)
    make_corpus(str(tmp_path / "corpus.txt"), num_documents=20, seed=1)
    output = tmp_path / "shards"
    output.mkdir()
    stale = output / ".shard-00000-of-00002.tfrecord.tmp-999999999-0"  # no such process
    stale.write_bytes(b"half a shard")
    assert main(["create-data", "--input", str(tmp_path / "corpus.txt"), "--vocab", vocab,
                 "--output-dir", str(output), "--max-seq-len", "32", "--max-predictions", "4",
                 "--num-shards", "2", "--dupe-factor", "1", "--quiet", "--workers", "1"]) == 0
    assert sorted(os.listdir(output)) == ["manifest.json", "shard-00000-of-00002.tfrecord",
                                          "shard-00001-of-00002.tfrecord"]
