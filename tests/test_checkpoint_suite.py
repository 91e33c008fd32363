"""A pre-training config's GLUE suite at checkpoints (run_config/checkpoint_suite.py): the
checkpoints it needs survive checkpoint.keep=1, the suite writes what `glue
--every-checkpoint` writes for them, a rerun repeats no finished fine-tuning run, a run
stopped by a signal gives pretrain its exit status, and a task or data file it cannot use
fails before training starts."""

import json
import os
import shutil

import pytest

import pipeline_helpers as helpers
from finetune_helpers import tiny_model_directory
from bert_jax.cli import main
from bert_jax.errors import UserError
from bert_jax.evaluation import glue, glue_steps
from bert_jax.interop import model_source, source_kinds
from bert_jax.run_config import load_run_config
from bert_jax.tasks import continued_pretraining
from input_pipeline.glue_examples import write_glue_layout

CONFIG = '''
from bert_jax.run_config import base_config


def get_config():
    config = base_config("modernbert-tiny")
    config.model.update(hidden_dim=32, num_layers=1, num_heads=2, mlp_dim=32,
                        local_attention=16)
    config.objective = "mlm"
    config.batch_size = 16  # two rows on each of the 8 test devices
    config.num_train_steps = 4
    config.optimizer.update(learning_rate=1e-3, warmup_steps=1)
    config.checkpoint.update(every_steps=1, keep=1, async_save=False)
    config.log_every_steps = 1
    config.data.update(train_files={shards!r}, vocab_path={vocab!r}, shuffle_buffer=20,
                       max_predictions=10)
    config.checkpoint_suite.update(tasks="stsb", data={glue!r}, learning_rates=(1e-3,),
                                   seeds=(0,), epochs=1, batch_size=8, max_seq_len=16,
                                   every=2)
    return config
'''


@pytest.fixture(scope="module")
def config_file(tmp_path_factory):
    directory = tmp_path_factory.mktemp("suite")
    vocab = helpers.write_vocabulary(str(directory))
    corpus = str(directory / "corpus.txt")
    helpers.make_corpus(corpus, num_documents=8, seed=1)
    shards = helpers.mlm_shards(directory, "shards", corpus, vocab, 32)
    glue_data = str(directory / "glue")
    write_glue_layout(glue_data, train_rows=8, dev_rows=4)
    path = directory / "config.py"
    path.write_text(CONFIG.format(shards=shards, vocab=vocab, glue=glue_data))
    return str(path)


def _pretrain(config_file: str, workdir: str, *overrides: str) -> int:
    return main(["pretrain", "--config", config_file, "--workdir", workdir, "--no-progress",
                 *overrides])


def test_the_suite_runs_on_the_kept_checkpoints_and_a_rerun_repeats_nothing(
        config_file, tmp_path, monkeypatch, capfd):
    run = str(tmp_path / "run")
    assert _pretrain(config_file, run) == 0
    # keep=1 alone would leave step 4: every 2nd save (step 2) was kept for the suite.
    assert source_kinds.finished_steps(run) == [2, 4]
    suite = os.path.join(run, "glue")
    rows = json.load(open(os.path.join(suite, "glue_steps.json")))
    assert sorted(rows) == ["2", "4"]
    for step, row in rows.items():
        assert row.pop("tokens_seen") == int(step) * 16 * 32
        assert row == json.load(open(os.path.join(suite, "steps", step, "glue.json")))
        assert set(row["stsb"]) == {"pearson", "spearman"}
    table = open(os.path.join(suite, "glue_steps.md")).read().splitlines()
    assert table[2].startswith("| 2 | 1,024 | ") and table[3].startswith("| 4 | 2,048 | ")
    assert os.path.getsize(os.path.join(suite, "glue_stsb.png")) > 1000

    # Step 4's run lost: the rerun trains nothing and runs only it.
    os.remove(os.path.join(suite, "steps", "4", "runs", "stsb", "lr0.001-seed0",
                           glue.RUN_RESULT))
    # A signal stopping one of the suite's runs (test_glue.py sends a real Ctrl-C):
    # pretrain passes on its exit status and says how to go on.
    def stopped(*args, **kwargs):
        raise glue.Stopped(glue.Run("stsb", 1e-3, 0), 130)

    monkeypatch.setattr(glue_steps, "run_config_suite", stopped)
    capfd.readouterr()
    assert _pretrain(config_file, run) == 130
    assert "GLUE suite stopped in stsb lr 0.001 seed 0; the same command continues it" in (
        capfd.readouterr().err)
    monkeypatch.undo()
    ran = []
    run_one = glue.run_one
    monkeypatch.setattr(glue, "run_one", lambda run_, model, *rest, **named: ran.append(
        model.name) or run_one(run_, model, *rest, **named))
    assert _pretrain(config_file, run) == 0
    assert ran == [os.path.join(run, "checkpoints", "4")]
    assert sorted(json.load(open(os.path.join(suite, "glue_steps.json")))) == ["2", "4"]
    ran.clear()
    assert _pretrain(config_file, run) == 0
    assert ran == []


def test_a_task_or_data_the_suite_cannot_use_fails_before_training(config_file, tmp_path,
                                                                    capsys):
    run = str(tmp_path / "run")
    assert _pretrain(config_file, run, "--config.checkpoint_suite.tasks=stsb,glu") == 2
    assert "checkpoint_suite.tasks: unknown GLUE task 'glu'" in capsys.readouterr().err
    assert _pretrain(config_file, run, f"--config.checkpoint_suite.data={tmp_path}") == 2
    error = capsys.readouterr().err
    assert "checkpoint_suite.data:" in error and "STS-B/train.tsv" in error
    assert len(error.strip().splitlines()) == 1
    # A dev file the suite reads only after pre-training: its header checked before it.
    bad_header = str(tmp_path / "glue")
    shutil.copytree(load_run_config(config_file).checkpoint_suite.data, bad_header)
    dev = os.path.join(bad_header, "STS-B", "dev.tsv")
    lines = open(dev).read().splitlines(keepends=True)
    open(dev, "w").write(lines[0].replace("\tscore", "\tsimilarity") + "".join(lines[1:]))
    assert _pretrain(config_file, run, f"--config.checkpoint_suite.data={bad_header}") == 2
    error = capsys.readouterr().err
    assert "checkpoint_suite.data:" in error and "STS-B/dev.tsv:1: no column 'score'" in error
    assert len(error.strip().splitlines()) == 1
    assert not os.path.exists(run)  # nothing trained, nothing written
    # Continued pre-training (--model M --text) runs no suite, so it refuses to keep for one.
    with pytest.raises(UserError, match="checkpoint_suite.tasks runs with `pretrain --config`"):
        continued_pretraining.recipe_config(model_source.resolve(tiny_model_directory(
            tmp_path)), overrides=["--config.checkpoint_suite.tasks=sst2"])


def test_print_config_shows_the_section_with_its_descriptions(capsys):
    assert main(["pretrain", "--config", "modernbert_demo", "--print-config"]) == 0
    printed = capsys.readouterr().out
    assert "checkpoint_suite.tasks = ''" in printed and "= no suite" in printed
    assert "checkpoint_suite.every = 1" in printed and "(and the last)" in printed
    assert load_run_config("modernbert_demo").checkpoint_suite.tasks == ""
