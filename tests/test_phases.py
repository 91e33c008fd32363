"""A phased run (tasks/phases.py): three phases of a tiny ModernBERT that change the masking
rate (0.3 -> 0.15 -> 0.05), re-weight a two-source mixture, add a source, lengthen the rows
(32 -> 64 tokens), halve the batch and raise the global RoPE theta, under one warmup-stable-
decay schedule. Stopped (SIGTERM) in the middle of every phase and resumed by the same
call, it trains the losses and weights of the run never stopped, bit for bit. `aot` answers
for each phase."""

import argparse
import json
import os
import signal

import jax
import numpy as np
import pytest

import pipeline_helpers as helpers
from bert_jax.commands import aot as aot_command
from bert_jax.compiler import aot
from bert_jax.errors import UserError
from bert_jax.run_config import load_run_config
from bert_jax.tasks import phases
from bert_jax.training import checkpointing

PHASED_CONFIG = '''
from bert_jax.run_config import base_config

PHASES = ("1", "2", "3")
SHARDS = {shards!r}


def get_config(phase):
    config = base_config("modernbert-tiny")
    config.model.update(hidden_dim=32, num_layers=1, num_heads=2, mlp_dim=32,
                        local_attention=16, global_rope_theta=10000.0)
    config.objective = "mlm"
    config.seed = 3
    config.batch_size = 16  # two rows on each of the 8 test devices
    config.schedule_steps = 6  # one schedule over the phases: its decay is phase 3
    config.optimizer.update(name="stable_adamw", learning_rate=1e-3, schedule="wsd",
                            warmup_steps=1, decay_steps=2, clip_norm=0.0)
    config.checkpoint.update(every_steps=1, keep=10, async_save=False)
    config.log_every_steps = 1
    # Slots for 30% of 32 tokens in phases 1 and 2, so the two share one compiled step.
    config.data.update(vocab_path=SHARDS["vocab"], shuffle_buffer=20, max_predictions=10)
    if phase == "1":
        config.num_train_steps = 2
        config.data.masking_rate = 0.3
        config.data.sources.web = dict(files=SHARDS["web32"], weight=0.7)
        config.data.sources.code = dict(files=SHARDS["code32"], weight=0.3)
    elif phase == "2":  # the same sources re-weighted: each continues where it was
        config.num_train_steps = 4
        config.data.masking_rate = 0.15
        config.data.sources.web = dict(files=SHARDS["web32"], weight=0.2)
        config.data.sources.code = dict(files=SHARDS["code32"], weight=0.8)
    else:  # longer rows, a source added, a new RoPE base, a smaller batch
        config.num_train_steps = 6
        config.data.masking_rate = 0.05
        config.data.sources.web = dict(files=SHARDS["web64"], weight=0.5)
        config.data.sources.books = dict(files=SHARDS["books64"], weight=0.5)
        config.model.global_rope_theta = 160000.0
        config.batch_size = 8
        config.data.max_predictions = None  # ceil(0.05 x 64) = 4 slots
    return config
'''


@pytest.fixture(scope="module")
def phased_config(tmp_path_factory):
    directory = tmp_path_factory.mktemp("phases")
    shards = dict(vocab=helpers.write_vocabulary(str(directory)))
    for name, documents, seed in (("web", 12, 1), ("code", 6, 2), ("books", 4, 3)):
        corpus = str(directory / f"{name}.txt")
        helpers.make_corpus(corpus, num_documents=documents, seed=seed)
        for seq_len in (32, 64):
            shards[f"{name}{seq_len}"] = helpers.mlm_shards(directory, f"{name}{seq_len}",
                                                            corpus, shards["vocab"], seq_len,
                                                            seed=seed)
    path = directory / "phased.py"
    path.write_text(PHASED_CONFIG.format(shards=shards))
    return str(path)


def _params(workdir: str, step: int):
    return jax.tree.map(np.asarray, checkpointing.restore_params(
        os.path.join(workdir, "checkpoints", str(step), "params")))


def _stopping_at(steps: set, monkeypatch):
    """Each phase's reader sends SIGTERM as it reads the batch of a step in `steps` (1-based),
    once: that step finishes, is saved, and the run stops there."""
    prepare = phases.prepare_run

    def prepare_stopping(config, log):
        run = prepare(config, log)

        def make(split, *arguments):
            dataset = run.dataset_factory(split, *arguments)
            return _Stopping(dataset, steps) if split == "train" else dataset
        return run._replace(dataset_factory=make)
    monkeypatch.setattr(phases, "prepare_run", prepare_stopping)


class _Stopping:
    """A reader that sends SIGTERM as it reads the batch of a step in `steps` (and forgets
    that step); state, restore and proportions pass on."""

    def __init__(self, dataset, steps: set):
        self.dataset, self.steps, self.step = dataset, steps, 0

    def seek_step(self, step, *arguments):
        self.step = step
        self.dataset.seek_step(step, *arguments)

    def __iter__(self):
        return self

    def __next__(self):
        self.step += 1
        if self.step in self.steps:
            self.steps.discard(self.step)
            os.kill(os.getpid(), signal.SIGTERM)
        return next(self.dataset)

    def __getattr__(self, name):
        return getattr(self.dataset, name)


def test_a_phased_run_stopped_in_every_phase_resumes_bit_identically(phased_config, tmp_path,
                                                                    monkeypatch):
    logs = []
    loaded = phases.load_phases(phased_config, [])
    whole = phases.run_phases(phased_config, loaded, str(tmp_path / "whole"),
                              show_progress=False, log=logs.append)
    assert whole["step"] == 6 and whole["phases"] == {"1": 2, "2": 4, "3": 6}
    assert any("data source books is new or changed" in line for line in logs)
    _stopping_at({1, 3, 5}, monkeypatch)  # in the middle of each phase
    stopped, losses = str(tmp_path / "stopped"), []
    for command, saved in enumerate((1, 3, 5, 6)):  # three stops, and the run to its end
        result = phases.run_phases(phased_config, loaded, stopped, show_progress=False,
                                   log=lambda *_: None)
        assert result["preempted"] == (command < 3) and result["step"] == saved
        losses += result["losses"]
    print("losses per step, uninterrupted:", whole["losses"])
    print("losses per step, stopped at steps 1, 3 and 5:", losses)
    assert losses == whole["losses"]  # every step's float32 loss, exactly
    for step in (2, 4, 6):  # each phase's last step
        jax.tree.map(np.testing.assert_array_equal, _params(stopped, step),
                     _params(str(tmp_path / "whole"), step))
    held = json.loads(open(os.path.join(stopped, "model_config.json")).read())
    assert held["global_rope_theta"] == 160000.0  # phase 3's, rewritten by it


def test_phases_must_end_at_increasing_steps(tmp_path):
    path = tmp_path / "backwards.py"
    path.write_text("from bert_jax.run_config import base_config\n"
                    "PHASES = ('a', 'b')\n"
                    "def get_config(phase):\n"
                    "    config = base_config('tiny')\n"
                    "    config.num_train_steps = 10 if phase == 'a' else 5\n"
                    "    return config\n")
    with pytest.raises(UserError, match=r"must increase; got \{'a': 10, 'b': 5\}"):
        phases.load_phases(str(path), [])
    assert phases.phases_of(f"{path}:a") is None  # FILE:PHASE runs that phase alone
    with pytest.raises(UserError, match=r"a config of phases a, b: name one \(.*:a\); "
                                        r"bert-jax pretrain --config .* trains them all"):
        load_run_config(str(path))  # --print-config without a phase


def test_aot_answers_for_each_phase_with_its_shapes_and_steps(phased_config):
    """`aot --config PHASED` compiles each phase (`FILE:PHASE`) with the steps it trains, and
    a mixture's lengths come from its sources' shards."""
    assert aot_command._phase_specs(phased_config, []) == [
        (f"{phased_config}:1", 2), (f"{phased_config}:2", 2), (f"{phased_config}:3", 2)]
    config = load_run_config(f"{phased_config}:3")
    assert aot.resolve_shapes(config) == ""  # nothing assumed: the shards say it
    assert (config.data.seq_len, config.data.max_predictions) == (64, 4)  # ceil(0.05 x 64)


def test_aot_prints_an_answer_for_every_phase(phased_config, monkeypatch, capsys):
    import test_aot_fit as fit  # its stand-in for the compile (no libtpu compile here)

    compiled = fit._fake_compiles(monkeypatch, lambda devices: fit.GIB, fit.GIB // 1024)
    arguments = argparse.Namespace(**{**vars(fit._arguments()), "config": phased_config,
                                      "recipe": None, "compare_meshes": False,
                                      "search_fit": True})
    assert aot_command.run(arguments) == 0
    headings = [line for line in capsys.readouterr().out.splitlines()
                if line.startswith("== phase")]
    assert headings == [f"== phase {name} of {phased_config}" for name in ("1", "2", "3")]
    assert len(compiled) == 3  # each phase fits: no search
