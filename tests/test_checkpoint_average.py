"""`bert-jax average RUN_DIR OUTPUT --last N`: the mean of a run's last N checkpoints."""

import json
import re

import jax
import numpy as np
import orbax.checkpoint as ocp
from gcs_emulator import gcs_bucket, gcs_emulator  # noqa: F401  (fixtures)
from interop_helpers import random_pretraining_params, tiny_random_model

from bert_jax.cli import main
from bert_jax.interop import model_source, model_writers
from bert_jax.storage import files

STEPS = (3, 6, 9, 12)


def _training_run(directory: str, tmp_path, dtype=np.float32) -> tuple[dict, dict]:
    """A run's files as the trainer leaves them (model_config.json, vocab.txt,
    checkpoints/<step>/params) at `directory`, local or gs://, with other random parameters
    at each step; returns the parameters of each step and the model's config."""
    config, _, tokenizer = tiny_random_model(tmp_path)
    files.write_text(files.join(directory, "model_config.json"),
                     json.dumps(config.to_dict(), indent=2))
    files.copy_file(str(tmp_path / "vocab.txt"), files.join(directory, "vocab.txt"))
    saved = {}
    checkpointer = ocp.StandardCheckpointer()
    for step in STEPS:
        params = jax.tree.map(lambda value: value.astype(dtype),
                              random_pretraining_params(config, seed=step))
        checkpointer.save(files.absolute(files.join(directory, "checkpoints", str(step),
                                                    "params")), params)
        saved[step] = params
    checkpointer.wait_until_finished()
    checkpointer.close()
    return saved, config


def _mean_bound(expected) -> float:
    """float32 sums of N values and one division, against numpy's float32 mean (another
    summation order): at most N + 1 roundings of the largest value."""
    largest = max(float(np.max(np.abs(leaf))) for leaf in jax.tree.leaves(expected))
    return (len(STEPS) + 1) * float(np.finfo(np.float32).eps) * largest


def test_average_is_the_numpy_mean_of_the_last_checkpoints(tmp_path, capsys):
    run, output = str(tmp_path / "run"), str(tmp_path / "averaged")
    saved, config = _training_run(run, tmp_path)
    assert main(["average", run, output, "--last", "3", "--no-progress"]) == 0
    assert f"wrote the mean of 3 checkpoint(s) of {run} (steps 6, 9, 12)" in \
        capsys.readouterr().out
    model = model_source.resolve(output).load()
    assert model_source.resolve(output).kind == "bert-jax" and model.config == config
    expected = jax.tree.map(lambda *values: np.mean(np.stack(values), axis=0, dtype=np.float32),
                            *(saved[step] for step in (6, 9, 12)))
    differences = jax.tree.leaves(jax.tree.map(
        lambda a, b: float(np.max(np.abs(a - b))), model.params, expected))
    print(f"average of 3 checkpoints vs numpy mean: max |difference| {max(differences):.3g}")
    assert max(differences) <= _mean_bound(expected)
    # Not the first step's, nor all four: the mean of those three.
    first = jax.tree.leaves(saved[3])[0]
    assert np.max(np.abs(jax.tree.leaves(model.params)[0] - first)) > 1e-3


def test_bfloat16_checkpoints_average_in_float32_and_stay_bfloat16(tmp_path):
    import ml_dtypes

    run, output = str(tmp_path / "run"), str(tmp_path / "averaged")
    saved, _ = _training_run(run, tmp_path, dtype=ml_dtypes.bfloat16)
    assert main(["average", run, output, "--last", "4", "--no-progress"]) == 0
    params = model_source.resolve(output).load().params
    # Summed in float32 then rounded once to bfloat16: the float32 mean rounded, exactly.
    expected = jax.tree.map(lambda *values: (sum(v.astype(np.float32) for v in values)
                                             / np.float32(4)).astype(ml_dtypes.bfloat16),
                            *saved.values())
    jax.tree.map(np.testing.assert_array_equal, params, expected)
    assert all(leaf.dtype == ml_dtypes.bfloat16 for leaf in jax.tree.leaves(params))


def test_what_cannot_be_averaged_is_one_line_and_writes_nothing(tmp_path, capsys):
    run = str(tmp_path / "run")
    _training_run(run, tmp_path)
    output = tmp_path / "averaged"
    cases = [
        ([run, str(output), "--last", "5"], r"4 finished checkpoint\(s\) \(steps 3, 6, 9, "
                                            r"12\), fewer than --last 5"),
        ([run, str(output), "--last", "0"], "--last must be at least 1, got 0"),
        ([str(tmp_path), str(output), "--last", "1"], "not a model directory"),
    ]
    model_writers.save_model(*tiny_random_model(tmp_path, seed=1), str(tmp_path / "model"))
    cases.append(([str(tmp_path / "model"), str(output), "--last", "1"],
                  "model: not a training run .*it is a bert-jax directory"))
    for argv, message in cases:
        assert main(["average", *argv, "--no-progress"]) == 2
        error = capsys.readouterr().err
        assert len(error.strip().splitlines()) == 1, error
        assert re.search(message, error), error
        assert not output.exists()
    output.mkdir()
    (output / "kept.txt").write_text("mine")
    assert main(["average", run, str(output), "--last", "2", "--no-progress"]) == 2
    assert "exists and is not empty (pass --overwrite" in capsys.readouterr().err
    assert [path.name for path in output.iterdir()] == ["kept.txt"]


def test_average_from_and_to_gs_equals_the_local_one(gcs_bucket, tmp_path):
    local, remote = str(tmp_path / "run"), f"{gcs_bucket}/run"
    _training_run(local, tmp_path)
    _training_run(remote, tmp_path)
    assert main(["average", local, str(tmp_path / "local_mean"), "--last", "2",
                 "--no-progress"]) == 0
    assert main(["average", remote, f"{gcs_bucket}/mean", "--last", "2", "--no-progress"]) == 0
    jax.tree.map(np.testing.assert_array_equal,
                 model_source.resolve(f"{gcs_bucket}/mean").load().params,
                 model_source.resolve(str(tmp_path / "local_mean")).load().params)
