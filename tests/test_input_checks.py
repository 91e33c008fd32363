"""Bad inputs found by trial (issue 15) that used to pass silently or end in a raw traceback;
each test fails on the code before its fix."""

import os
import subprocess
import sys

import jax
import pytest
from interop_helpers import random_pretraining_params, write_vocab
from pipeline_helpers import WORDS, make_corpus, write_vocabulary

from bert_jax import sharding
from bert_jax.interop import model_writers
from bert_jax.cli import main
from bert_jax.models.presets import preset
from bert_jax.errors import UserError
from bert_jax.run_config import load_run_config
from input_pipeline.tokenization import load_tokenizer

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEMO = os.path.join(REPO_ROOT, "configs", "demo.py")


@pytest.mark.parametrize("override, message", [
    ("batch_size=-4", "batch_size must be at least 1, got -4"),
    ("checkpoint.every_steps=0", "checkpoint.every_steps must be at least 1, got 0"),
    ("log_every_steps=0", "log_every_steps must be at least 1"),
    ("eval.every_steps=0", "eval.every_steps must be at least 1"),
    ("optimizer.learning_rate=-1e-4", "optimizer.learning_rate must be at least 0"),
    ("optimizer.beta2=1.5", "optimizer.beta2 must be between 0 and 1"),
    ("model.dropout_rate=2.0", "model.dropout_rate must be between 0 and 1"),
    ("data.max_predictions=100", "data.max_predictions (100) cannot exceed data.seq_len (64)"),
])
def test_config_ranges_are_checked_at_load(override, message):
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_run_config(DEMO, [f"--config.{override}"])


def test_config_range_error_reaches_the_command_line_as_one_line(capsys):
    assert main(["pretrain", "--config", DEMO, "--config.batch_size=-4"]) == 2
    error = capsys.readouterr().err
    assert error.startswith("bert-jax pretrain: error:") and "batch_size must be" in error
    assert "Traceback" not in error


def test_a_large_parameter_the_mesh_cannot_split_is_named():
    mesh = sharding.make_mesh(1, 3, 1, devices=jax.devices()[:3])
    with pytest.raises(UserError, match=r"params/bert/embeddings \(2048, 1000\): dimension 1 "
                                        r"\(1000\) cannot be split over mesh axes \('fsdp',\) "
                                        r"of size 3"):
        sharding.logical_to_sharding(("vocab", "embed"), (2048, 1000), mesh,
                                     name="params/bert/embeddings")
    small = sharding.logical_to_sharding(("vocab", "embed"), (8, 1000), mesh)
    assert tuple(small.spec) == (None, None)  # replicated: a copy costs nothing
    fitted = sharding.logical_to_sharding(("vocab", "embed"), (2048, 999), mesh)
    assert tuple(fitted.spec) == (None, "fsdp")


def test_create_data_reports_the_tokens_of_over_long_lines(tmp_path, capsys):
    vocab = write_vocabulary(str(tmp_path))
    corpus = tmp_path / "corpus.txt"
    make_corpus(str(corpus), num_documents=20, seed=1)
    long_line = " ".join(WORDS[i % 50] for i in range(1000))  # 1000 tokens on one line
    corpus.write_text(corpus.read_text() + "\n" + long_line + "\nw1 w2 .\n")
    output = tmp_path / "shards"
    # With a trailing slash (the README's `shards/`): the shards were removed after writing.
    assert main(["create-data", "--input", str(corpus), "--vocab", vocab, "--output-dir",
                 f"{output}/", "--max-seq-len", "64", "--max-predictions", "5",
                 "--num-shards", "1", "--dupe-factor", "1", "--quiet"]) == 0
    assert sorted(os.listdir(output)) == ["manifest.json", "shard-00000-of-00001.tfrecord"]
    error = capsys.readouterr().err
    # One sentence of 1000 tokens; an instance holds 64 - 3 = 61 of them.
    assert "1 sentence(s) (lines, in the bert format) were longer than the 61 tokens" in error
    assert f"{1000 - 61} of the corpus's" in error
    # The flag it suggests is one create-data has (it said --input-format, which is not).
    suggested = error.split("or use ")[1].split()[:2]
    assert suggested == ["--format", "prose"]
    assert main(["create-data", "--input", str(corpus), "--vocab", vocab, "--output-dir",
                 str(tmp_path / "prose"), "--max-seq-len", "64", "--max-predictions", "5",
                 "--num-shards", "1", "--dupe-factor", "1", "--quiet", *suggested]) == 0
    # The line has no full stop: prose keeps it one sentence, and is not told to use prose.
    error = capsys.readouterr().err
    assert "were longer than the 61 tokens" in error and "--format prose" not in error
    from input_pipeline.manifest import read_manifest
    manifest = read_manifest(str(output))
    assert (manifest["num_long_sentences"], manifest["num_dropped_tokens"]) == (1, 939)


def test_fill_mask_checks_every_text_before_printing_any(tmp_path, capsys):
    tokenizer = load_tokenizer(write_vocab(tmp_path))
    config = preset("tiny", vocab_size=tokenizer.vocab_size, max_positions=64)
    exported = str(tmp_path / "hf")
    model_writers.export_huggingface(config, random_pretraining_params(config, seed=3),
                                     tokenizer, exported)
    status = main(["fill-mask", "--model", exported, "the [MASK] went home",
                   "no mask in this one", "a [MASK] b"])
    captured = capsys.readouterr()
    assert status == 2
    assert "no [MASK] in 'no mask in this one'" in captured.err
    assert captured.out == ""  # nothing printed for the first text either


def test_reading_shards_prints_no_onednn_lines_and_loads_no_keras(tmp_path):
    """TensorFlow printed "oneDNN custom operations are on" twice at import, and spent 2-3 s
    of it loading Keras's optimizers (bert_jax/quiet.py); Keras must still import after."""
    env = {key: value for key, value in os.environ.items() if key != "TF_ENABLE_ONEDNN_OPTS"}
    env.update(TF_CPP_MIN_LOG_LEVEL="1", PYTHONPATH=REPO_ROOT)
    code = ("import sys, input_pipeline.reader\n"
            "assert 'tensorflow' in sys.modules and 'keras' not in sys.modules\n"
            "assert sys.modules.get('keras.src.optimizers', 0) is not None\n"
            "import tensorflow as tf, keras.src.optimizers\n"
            "assert tf.keras.optimizers.Adam is keras.optimizers.Adam\n")
    result = subprocess.run([sys.executable, "-c", code], env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "oneDNN" not in result.stderr and result.stderr.strip() == "", result.stderr


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    from finetune_helpers import tiny_model_directory

    return tiny_model_directory(tmp_path_factory.mktemp("settings"))


@pytest.mark.parametrize("flags, message", [
    (["--learning-rate=-1e-3"], "finetune: --learning-rate must be at least 0, got -0.001"),
    (["--batch-size", "0"], "finetune: --batch-size must be at least 1, got 0"),
    (["--epochs", "0"], "finetune: --epochs must be at least 1, got 0"),
    (["--config.finetune.warmup_fraction=1.5"],
     "finetune: --config.finetune.warmup_fraction must be between 0 and 1, got 1.5"),
    (["--config.batch_size=-2"], "finetune: --config.batch_size must be at least 1, got -2"),
])
def test_finetune_settings_go_through_the_run_config_range_check(tiny_model, tmp_path, capsys,
                                                                 flags, message):
    # --learning-rate=-1e-3 trained, and --batch-size 0 was a ZeroDivisionError.
    from finetune_helpers import made_up_sentences, write_tsv

    train = write_tsv(tmp_path / "train.tsv", made_up_sentences(8, seed=0))
    workdir = tmp_path / "run"
    assert main(["finetune", "classify", "--model", tiny_model, "--train", train,
                 "--workdir", str(workdir), "--max-seq-len", "32", "--no-progress", *flags]) == 2
    error = capsys.readouterr().err
    assert error.strip() == f"bert-jax finetune: error: {message}", error
    assert not workdir.exists()


def test_predict_and_evaluate_check_their_batch_size_the_same_way():
    from bert_jax.training.finetune import Settings, run_config_for

    config = preset("tiny", vocab_size=100)
    with pytest.raises(UserError, match=r"^finetune: --batch-size must be at least 1, got 0$"):
        run_config_for(config, Settings(batch_size=0))
    assert run_config_for(config, Settings(batch_size=4)).batch_size == 4
