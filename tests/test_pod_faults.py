"""Faults found by trying the pod path (issue 15), each with the test that would have caught it:
original-tool shards, dynamic masking without a vocabulary, shards cut at a record boundary."""

import json
import os

import numpy as np
import pytest
from pipeline_helpers import VOCABULARY, make_corpus, read_shards, write_original_style_shard
from test_training_support import VOCAB_SIZE, pretraining, tiny_run_config

from bert_jax.errors import UserError
from bert_jax.tasks.pretraining_data import prepare_data
from bert_jax.training import trainer

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

    def log(*parts):
        logged.append(" ".join(map(str, parts)))
    result = trainer.train(config, str(tmp_path / "run"), **pretraining(config, log=log),
                           show_progress=False, log=log)
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
        prepare_data(config, log=lambda *_: None)


def test_dynamic_masking_without_a_vocabulary_is_a_clear_error():
    config = tiny_run_config(**{"data.dynamic_masking": True})
    with pytest.raises(UserError, match="data.dynamic_masking needs data.vocab_path"):
        prepare_data(config)


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


def _tiny_tree(seed: int) -> dict:
    import jax
    return {"w": jax.random.normal(jax.random.PRNGKey(seed), (1000,))}


def test_a_full_disk_is_one_clear_error_and_earlier_checkpoints_survive(tmp_path, monkeypatch,
                                                                        caplog):
    from bert_jax.training import checkpointing

    checkpoints = checkpointing.Checkpoints(str(tmp_path / "checkpoints"), async_save=False)
    checkpoints.save(1, _tiny_tree(0), _tiny_tree(1), {"step": 1})
    # Not enough room for the next one: refused before anything is written.
    usage = checkpointing.shutil.disk_usage(str(tmp_path))
    monkeypatch.setattr(checkpointing.shutil, "disk_usage",
                        lambda path: usage._replace(free=1000))
    with pytest.raises(UserError, match=r"checkpoints: the checkpoint of step 2 needs about "
                                        r"0\.0 MiB .* but the disk has 0\.0 MiB free"):
        checkpoints.save(2, _tiny_tree(0), _tiny_tree(1), {"step": 2})
    monkeypatch.undo()
    # The disk fills during the write (tensorstore reports ENOSPC as a ValueError).
    def full(*args, **kwargs):
        raise ValueError('RESOURCE_EXHAUSTED: Error writing "w/0" in OCDBT database: Failed '
                         "to write 4000 bytes to file 4: No space left on device")
    monkeypatch.setattr(checkpoints._manager, "save", full)
    with pytest.raises(UserError, match=r"saving checkpoint 3 failed: no space left on device "
                                        r"\(a checkpoint needs about 0\.0 MiB\)\. Earlier "
                                        r"checkpoints are intact"):
        checkpoints.save(3, _tiny_tree(0), _tiny_tree(1), {"step": 3})
    monkeypatch.undo()
    assert checkpoints.all_steps() == [1]
    checkpoints.close()


def test_orbax_logs_of_a_full_disk_are_not_repeated():
    import logging

    from bert_jax.training import checkpointing  # noqa: F401  (installs the filter)

    absl = logging.getLogger("absl")
    record = absl.makeRecord("absl", logging.ERROR, __file__, 1, "raised an exception: %s",
                             ("Failed writing: No space left on device",), None)
    assert not all(f.filter(record) for f in absl.filters)
    other = absl.makeRecord("absl", logging.ERROR, __file__, 1, "something else", (), None)
    assert all(f.filter(other) for f in absl.filters)


def test_a_second_run_on_a_work_directory_is_refused_naming_the_first(tmp_path):
    import socket

    from bert_jax.training.run_lock import RunLock

    workdir = str(tmp_path / "run")
    with RunLock(workdir):
        with pytest.raises(UserError, match=rf"{workdir} is in use by another training run: "
                                            rf"pid {os.getpid()} on host "
                                            rf"{socket.gethostname()}, started 20"):
            RunLock(workdir).__enter__()
    with RunLock(workdir):  # released when the first run ends
        pass


def test_a_remote_lease_is_refused_while_fresh_and_taken_over_when_stale(tmp_path):
    import time

    from bert_jax.training.run_lock import LEASE_NAME, RunLock

    workdir = str(tmp_path / "bucket-run")  # the lease logic, on a local path
    first = RunLock(workdir, lease=True, renew_seconds=0.2).__enter__()
    time.sleep(0.5)  # renewed in the background meanwhile
    with pytest.raises(UserError, match=r"in use by another training run: .*lease renewed "
                                        r"\d+ s ago"):
        RunLock(workdir, lease=True, renew_seconds=0.2).__enter__()
    first.__exit__(None, None, None)
    assert not os.path.exists(os.path.join(workdir, LEASE_NAME))  # released
    dead = RunLock(workdir, lease=True, renew_seconds=3600).__enter__()
    dead._stop.set()  # its process died: the lease stays behind, never renewed
    time.sleep(0.6)
    taker = RunLock(workdir, lease=True, lease_seconds=0.5, renew_seconds=0.2)
    with taker:  # 0.5 s without renewal: stale, taken over
        assert json.loads(open(os.path.join(workdir, LEASE_NAME)).read())["token"] == \
            taker._holder["token"]


# -- the training loop -------------------------------------------------------------------
def _quiet(*_):
    pass


def _interrupting_factory(config, at: int):
    """Synthetic batches; a Ctrl-C (SIGINT) arrives while batch `at` is read."""
    import signal

    from test_training_support import synthetic_factory

    make = synthetic_factory(config)

    def factory(split, *args):
        dataset = make(split, *args)
        if split == "train":
            original = type(dataset).__next__

            class Interrupting(type(dataset)):
                def __next__(self):
                    if self.position == at:
                        os.kill(os.getpid(), signal.SIGINT)
                    return original(self)
            dataset.__class__ = Interrupting
        return dataset
    return factory


def test_first_ctrl_c_saves_the_step_and_stops_then_a_changed_seed_is_refused(tmp_path):
    """Also: one loss line per log step when there is no progress bar (a pod's log file)."""
    from test_training_support import synthetic_factory

    config = tiny_run_config()  # log_every_steps 1
    logged = []
    result = trainer.train(config, str(tmp_path), show_progress=False,
                           **pretraining(config, _interrupting_factory(config, at=4)),
                           log=lambda *parts: logged.append(" ".join(map(str, parts))))
    assert result["preempted"] and result["step"] == 5  # the step in flight finished
    assert result["exit_status"] == 130  # 128 + SIGINT, as a shell reports Ctrl-C (was 143)
    assert os.path.isdir(tmp_path / "checkpoints" / "5" / "params")
    lines = [line for line in logged if line.startswith("step ")]
    assert [line.split(":")[0] for line in lines] == [f"step {n}/12" for n in range(1, 6)]
    assert all(" loss " in line and "tokens/s" in line for line in lines)
    resumed = tiny_run_config(seed=1)
    with pytest.raises(UserError, match=r"checkpoints/5: this run was trained with seed 0, "
                                        r"not --config.seed 1"):
        trainer.train(resumed, str(tmp_path), show_progress=False, log=_quiet,
                      **pretraining(resumed, synthetic_factory(resumed)))


def test_a_stopped_run_exits_with_the_status_of_its_signal(monkeypatch, capsys):
    import signal

    from bert_jax.cli import main
    from bert_jax.training import interrupts

    with interrupts.StopRequests() as stops:
        stops._handle(signal.SIGTERM, None)
    assert stops.exit_status == 143
    assert interrupts.StopRequests().exit_status == 143  # stopped by another process's vote
    from bert_jax.tasks import pretraining_data

    # Neither the demo data nor a run: only how the command turns the result into a status.
    monkeypatch.setattr(pretraining_data, "prepare_run", lambda *args: (
        pretraining_data.PretrainingRun(task=None, dataset_factory=None, init_weights=None,
                                        tokenizer=None)))
    monkeypatch.setattr(trainer, "train", lambda *args, **kwargs: dict(
        step=3, preempted=True, stopped=False, evaluations=[], losses=[], exit_status=130))
    demo = os.path.join(os.path.dirname(os.path.dirname(__file__)), "configs", "demo.py")
    assert main(["pretrain", "--config", demo, "--no-progress"]) == 130  # always 143 before


def test_second_ctrl_c_exits_at_once(monkeypatch):
    import signal

    from bert_jax.training import interrupts

    exits = []
    monkeypatch.setattr(interrupts.os, "_exit", exits.append)
    with interrupts.StopRequests() as stops:
        assert signal.getsignal(signal.SIGINT) == stops._handle
        stops._handle(signal.SIGINT, None)
        assert stops.requested and exits == []  # the first: save, then stop
        stops._handle(signal.SIGTERM, None)  # a SIGTERM after it: the Ctrl-C stopped the run
        assert stops.exit_status == 130
        stops._handle(signal.SIGINT, None)
        assert exits == [interrupts.EXIT_NOW_STATUS]  # the second: now
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


@pytest.mark.filterwarnings("ignore:overflow encountered in cast")  # the learning rate, to inf
def test_non_finite_updated_parameters_stop_before_any_checkpoint(tmp_path):
    """A finite loss and gradient whose update overflows the parameters: the old check
    passed it and saved infinite parameters as the "last good" checkpoint."""
    from test_training_support import synthetic_factory

    config = tiny_run_config(**{"optimizer.learning_rate": 1e39, "optimizer.warmup_steps": 0,
                                "checkpoint.every_steps": 1})
    with pytest.raises(UserError, match=r"step 1: the loss, the gradient norm or the updated "
                                        r"parameters are not finite .* No checkpoint has been "
                                        r"saved yet, so there is nothing to resume"):
        trainer.train(config, str(tmp_path), show_progress=False, log=_quiet,
                      **pretraining(config, synthetic_factory(config)))
    assert not [name for name in os.listdir(tmp_path / "checkpoints") if name.isdigit()]


def test_a_refused_start_writes_nothing_and_names_what_differs(tmp_path):
    from interop_helpers import random_pretraining_params, write_vocab
    from test_training_support import synthetic_factory

    from bert_jax.interop import model_writers
    from bert_jax.models.presets import preset
    from bert_jax.training.run_lock import RunLock
    from input_pipeline.tokenization import load_tokenizer

    tokenizer = load_tokenizer(write_vocab(tmp_path))
    other = preset("tiny", vocab_size=tokenizer.vocab_size)  # hidden 128, 2 layers
    model_writers.export_huggingface(other, random_pretraining_params(other, seed=0),
                                     tokenizer, str(tmp_path / "other"))
    config = tiny_run_config(**{"init_from": str(tmp_path / "other"), "data.train_files": "",
                                "model.vocab_size": tokenizer.vocab_size})
    workdir = tmp_path / "run"
    with pytest.raises(UserError, match="init_from .*other: its hidden_dim is 128 but the run's "
                                        "model.hidden_dim is 32"):
        trainer.train(config, str(workdir), show_progress=False, log=_quiet,
                      **pretraining(config, synthetic_factory(config)))
    assert not workdir.exists()  # the corrected command is not refused afterwards
    workdir.mkdir()
    (workdir / "model_config.json").write_text(
        json.dumps(dict(tiny_run_config().model, hidden_dim=48, num_layers=2)))
    config = tiny_run_config()
    with pytest.raises(UserError, match=r"holds a different model \(hidden_dim 48 there, 32 in "
                                        r"this run; num_layers 2 there, 1 in this run\)"):
        trainer.train(config, str(workdir), show_progress=False, log=_quiet,
                      **pretraining(config, synthetic_factory(config)))
    assert sorted(os.listdir(workdir)) == ["model_config.json"]
    (workdir / "model_config.json").unlink()
    with RunLock(str(workdir)):  # another run holds it
        with pytest.raises(UserError, match="is in use by another training run"):
            trainer.train(config, str(workdir), show_progress=False, log=_quiet,
                          **pretraining(config, synthetic_factory(config)))
    assert sorted(os.listdir(workdir)) == [".run_lock"]
