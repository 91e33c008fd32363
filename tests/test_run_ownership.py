"""A work directory belongs to one run (issue 42): a later command that would change what the
run is (its labels, task or starting model) is refused in one line before anything is
written, a rerun of a finished run writes nothing, and a damaged checkpoint is named and
the run resumes from the newest intact one (or stops in one line where none is intact).

Old behaviour, each checked here: a finished run rerun with renamed labels said "the run is
complete", rewrote task.json and the old weights then predicted under the new names; with
another number of labels it failed in tracebacks after rewriting task.json,
run_config.json and model_config.json; a truncated data file or a missing meta/metadata
in the newest checkpoint was 227 lines of tracebacks; a cut TF checkpoint an IndexError.
"""

import json
import os
import shutil

import pytest
from finetune_helpers import made_up_sentences, tiny_model_directory, write_tsv

from bert_jax.cli import main
from bert_jax.errors import UserError
from bert_jax.models.families import config_from_dict
from bert_jax.training import workdir as workdir_lib

ARGS = ["--max-seq-len", "32", "--no-progress"]


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished classify run of two epochs (checkpoints 1 and 2, best/, eval results)."""
    root = tmp_path_factory.mktemp("owned")
    model = tiny_model_directory(root)
    train = write_tsv(root / "train.tsv", made_up_sentences(16, seed=0))
    workdir = str(root / "run")
    assert main(["finetune", "classify", "--model", model, "--train", train, "--eval", train,
                 "--workdir", workdir, "--epochs", "2", *ARGS]) == 0
    assert sorted(os.listdir(os.path.join(workdir, "checkpoints"))) == ["1", "2"]
    return dict(root=root, model=model, train=train, workdir=workdir)


def _copy(finished, tmp_path) -> str:
    workdir = str(tmp_path / "run")
    shutil.copytree(finished["workdir"], workdir)
    return workdir


def _snapshot(directory: str) -> dict:
    """Every directory and file under `directory` with its bytes; the run lock's holder
    record aside (the lock is taken to read a run, and says who took it last)."""
    found = {}
    for root, directories, names in os.walk(directory):
        for name in directories:
            found[os.path.relpath(os.path.join(root, name), directory)] = None
        for name in names:
            if name != ".run_lock":
                path = os.path.join(root, name)
                found[os.path.relpath(path, directory)] = open(path, "rb").read()
    return found


def _finetune(finished, workdir, train, *extra) -> int:
    return main(["finetune", "classify", "--model", finished["model"], "--train", train,
                 "--workdir", workdir, "--epochs", "2", *ARGS, *extra])


@pytest.mark.parametrize("labels", [{"pos": "approve", "neg": "reject"},
                                    {"pos": "a", "neg": "b"}, None],
                         ids=["renamed", "renamed-same-order", "three"])
def test_a_finished_run_refuses_other_labels_and_stays_byte_for_byte(finished, tmp_path,
                                                                     capsys, labels):
    workdir = _copy(finished, tmp_path)
    before = _snapshot(workdir)
    rows = made_up_sentences(16, seed=0)
    rows = ([(labels[label], text) for label, text in rows] if labels else
            [("maybe" if index % 3 == 0 else label, text)
             for index, (label, text) in enumerate(rows)])
    train = write_tsv(tmp_path / "other.tsv", rows)
    assert _finetune(finished, workdir, train) == 2
    wanted = sorted({label for label, _ in rows})
    error = capsys.readouterr().err.strip()
    assert error == (f"bert-jax finetune: error: {workdir}: this work directory holds another "
                     f"run (its labels are ['neg', 'pos'], this command's {wanted!r}); a work "
                     "directory belongs to one run: give another --workdir to start a new run "
                     f"(or delete {workdir} to replace this one)")
    assert _snapshot(workdir) == before


def test_a_rerun_of_a_finished_run_writes_nothing(finished, tmp_path, capsys):
    # Before: run_config.json, model_config.json, vocab.txt, task.json and eval_results.json
    # were written again, and a new TensorBoard event file added.
    workdir = _copy(finished, tmp_path)
    before = _snapshot(workdir)
    assert _finetune(finished, workdir, finished["train"], "--eval", finished["train"]) == 0
    output = capsys.readouterr().out
    assert "the run is complete: step 2 of 2" in output and "best (accuracy) at step" in output
    assert _snapshot(workdir) == before


def test_another_task_or_starting_model_is_refused_before_writing(finished, tmp_path, capsys):
    workdir = _copy(finished, tmp_path)
    before = _snapshot(workdir)
    numbers = write_tsv(tmp_path / "scores.tsv", [(str(index % 3), text) for index, (_, text)
                                                  in enumerate(made_up_sentences(16, 0))])
    assert main(["finetune", "regress", "--model", finished["model"], "--train", numbers,
                 "--workdir", workdir, *ARGS]) == 2
    assert "(its task is 'classify', this command's 'regress')" in capsys.readouterr().err
    copy = str(tmp_path / "same_weights_elsewhere")
    shutil.copytree(finished["model"], copy)
    assert main(["finetune", "classify", "--model", copy, "--train", finished["train"],
                 "--workdir", workdir, "--epochs", "2", *ARGS]) == 2
    assert (f"(it started from {os.path.realpath(finished['model'])}, this command from "
            f"{copy})") in capsys.readouterr().err
    assert _snapshot(workdir) == before


def test_pre_training_and_fine_tuning_do_not_share_a_work_directory(finished, tmp_path):
    with open(os.path.join(finished["workdir"], "model_config.json")) as file:
        config = config_from_dict(json.load(file))
    with pytest.raises(UserError, match=r"\(it fine-tunes 'classify', this command pre-trains\)"):
        workdir_lib.check_run(finished["workdir"], config, "")
    pretraining = tmp_path / "pretraining"
    pretraining.mkdir()
    shutil.copy(os.path.join(finished["workdir"], "model_config.json"), pretraining)
    task_json = open(os.path.join(finished["workdir"], "task.json")).read()
    with pytest.raises(UserError, match=r"\(it pre-trains, this command fine-tunes 'classify'\)"):
        workdir_lib.check_run(str(pretraining), config, "", {"task.json": task_json})


def _cut_params_data(step_directory: str) -> list[str]:
    """Cuts every data file of the step's parameters to half its size (orbax may keep the
    arrays in a file of the per-process database and a copy in the merged one)."""
    cut = []
    for root, _, names in os.walk(os.path.join(step_directory, "params")):
        for name in names if os.path.basename(root) == "d" else ():
            path = os.path.join(root, name)
            with open(path, "r+b") as file:
                file.truncate(os.path.getsize(path) // 2)
            cut.append(path)
    return cut


def _names_a_cut_file(text: str, cut: list[str]) -> bool:
    """Whether `text` names one of the `cut` files: the read that failed first names it, or
    the size it found does (whichever array's read fails first)."""
    return any(path in text for path in cut)


@pytest.mark.parametrize("damage", ["truncated-data-file", "missing-meta"])
def test_resume_names_the_damaged_checkpoint_and_goes_on_from_the_intact_one(
        finished, tmp_path, capsys, damage):
    workdir = _copy(finished, tmp_path)
    checkpoints = os.path.join(workdir, "checkpoints")
    if damage == "missing-meta":
        named = os.path.join(checkpoints, "2", "meta", "metadata")
        os.remove(named)
        reason = f"{named} is missing"
    else:
        cut = _cut_params_data(os.path.join(checkpoints, "2"))
    assert _finetune(finished, workdir, finished["train"]) == 0  # the same command again
    captured = capsys.readouterr()
    assert f"checkpoint 2 in {checkpoints} is damaged: " in captured.out
    if damage == "missing-meta":
        assert reason in captured.out
    else:  # the array that could not be read, and a cut file
        # Which array's read fails first, and so the words tensorstore uses, depends on the
        # order its reads finish (a loaded machine once named the item, not the array key).
        assert f"{checkpoints}/2/params" in captured.out, captured.out
        assert _names_a_cut_file(captured.out, cut), captured.out
    assert "set aside as 2.damaged; step 1 is the newest intact checkpoint" in captured.out
    assert f"resuming from step 1 in {checkpoints}" in captured.out
    assert "Traceback" not in captured.out + captured.err
    assert sorted(os.listdir(checkpoints)) == ["1", "2", "2.damaged"]  # step 2 trained again


def test_no_intact_checkpoint_is_one_line(finished, tmp_path, capsys):
    workdir = _copy(finished, tmp_path)
    checkpoints = os.path.join(workdir, "checkpoints")
    _cut_params_data(os.path.join(checkpoints, "2"))
    os.remove(os.path.join(checkpoints, "1", "meta", "metadata"))
    before = _snapshot(workdir)
    assert _finetune(finished, workdir, finished["train"]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        f"bert-jax finetune: error: {checkpoints}: no intact checkpoint to resume from (2: ")
    assert f"1: {checkpoints}/1/meta/metadata is missing" in lines[0]
    assert "give another --workdir to start a new run" in lines[0]
    assert "Traceback" not in captured.out and _snapshot(workdir) == before


def test_convert_of_a_run_whose_newest_checkpoint_is_cut_is_one_line(finished, tmp_path,
                                                                      capsys):
    workdir = _copy(finished, tmp_path)
    cut = _cut_params_data(os.path.join(workdir, "checkpoints", "2"))
    assert main(["convert", workdir, str(tmp_path / "hf"), "--to", "hf"]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()  # no "Event loop is closed" tracebacks either
    # Which array's read fails first varies from run to run, and the message names that one.
    assert len(lines) == 1 and lines[0].startswith(
        f"bert-jax convert: error: {workdir}/checkpoints/2/params: cannot restore parameters "
        f"({workdir}/checkpoints/2/params")
    assert _names_a_cut_file(lines[0], cut) and not (tmp_path / "hf").exists()


def test_convert_of_a_cut_tf_checkpoint_is_one_line(finished, tmp_path, capsys):
    exported = str(tmp_path / "tf")
    assert main(["convert", finished["model"], exported, "--to", "tf-checkpoint"]) == 0
    data = os.path.join(exported, "bert_model.ckpt.data-00000-of-00001")
    with open(data, "r+b") as file:
        file.truncate(os.path.getsize(data) // 2)
    capsys.readouterr()
    destination = tmp_path / "hf"
    assert main(["convert", exported, str(destination), "--to", "hf"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        f"bert-jax convert: error: {exported}/bert_model.ckpt: cannot read variable ")
    assert "from bert_model.ckpt.data-00000-of-00001" in lines[0]
    assert "the file is cut short or damaged" in lines[0] and not destination.exists()
