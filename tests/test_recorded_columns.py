"""A fine-tuned model reads the columns it was trained on (issue 34): recorded resolved in
task.json (`sentence`, not "every column but the label"), used by evaluate, predict, the
Python API and every export; a file without them is an error naming the missing column,
extra columns are ignored and `predict --output` keeps them. Old runs still load."""

import json
import os
import shutil

import pytest
from finetune_helpers import made_up_sentences, tiny_model_directory, write_tsv

from bert_jax.cli import main
from bert_jax.commands.evaluate import evaluate_file
from bert_jax.errors import UserError

ROWS = made_up_sentences(24, seed=3)  # (label, sentence)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("recorded_columns")
    model = tiny_model_directory(root)
    train = write_tsv(root / "train.tsv", made_up_sentences(16, seed=0))  # label, sentence
    workdir = root / "run"
    assert main(["finetune", "classify", "--model", model, "--train", train, "--workdir",
                 str(workdir), "--epochs", "1", "--batch-size", "8", "--max-seq-len", "32",
                 "--learning-rate", "2e-3", "--no-progress"]) == 0
    plain = write_tsv(root / "plain.tsv", ROWS)
    # The same rows with an id first: the file of the issue, where the id was read as text A.
    with_id = write_tsv(root / "with_id.tsv", [(str(100 + index), label, sentence)
                                               for index, (label, sentence) in enumerate(ROWS)],
                        header=("id", "label", "sentence"))
    # The run itself is a model every command takes (its last checkpoint, its task.json).
    return dict(root=root, best=str(workdir), plain=plain, with_id=with_id)


def _metrics(model, path, **reading):
    return evaluate_file(model, "classify", path, progress=False, **reading)


def test_default_columns_are_recorded_resolved(run):
    with open(os.path.join(run["best"], "task.json")) as file:
        info = json.load(file)
    columns = dict(text_columns=["sentence"], label_column="label", header=None)
    assert info["settings"]["columns"] == columns  # was text_columns []
    assert info["head"]["columns"] == columns


def test_an_extra_column_is_ignored_by_evaluate_and_kept_by_predict(run, tmp_path):
    assert _metrics(run["best"], run["with_id"]) == _metrics(run["best"], run["plain"])
    output = tmp_path / "predictions.jsonl"
    assert main(["predict", "--model", run["best"], "--input", run["with_id"], "--output",
                 str(output)]) == 0
    records = [json.loads(line) for line in output.read_text().splitlines()]
    assert [record["texts"] for record in records] == [[sentence] for _, sentence in ROWS]
    assert records[1]["columns"] == dict(id="101", label=ROWS[1][0], sentence=ROWS[1][1])
    tsv = tmp_path / "predictions.tsv"
    assert main(["predict", "--model", run["best"], "--input", run["with_id"], "--output",
                 str(tsv)]) == 0
    lines = tsv.read_text().splitlines()
    assert lines[0] == "id\tlabel\tsentence\tpredicted_label"
    assert [line.split("\t")[0] for line in lines[1:]] == [str(100 + i) for i in range(24)]


def test_a_file_without_the_recorded_column_is_an_error_naming_it(run, tmp_path, capsys):
    renamed = write_tsv(tmp_path / "renamed.tsv", ROWS, header=("label", "content"))
    assert main(["evaluate", "classify", "--model", run["best"], "--data", renamed]) == 2
    assert (f"{renamed}:1: no column 'sentence' in the header ['label', 'content']"
            in capsys.readouterr().err)
    assert main(["predict", "--model", run["best"], "--input", renamed, "--output",
                 str(tmp_path / "p.jsonl")]) == 2
    assert "no column 'sentence'" in capsys.readouterr().err
    assert not (tmp_path / "p.jsonl").exists()
    # This file's own column, named: read as the training file's.
    assert _metrics(run["best"], renamed, text_columns=("content",)) == \
        _metrics(run["best"], run["plain"])
    with pytest.raises(UserError, match=r"--text-columns content,label: the model was trained "
                                        r"on 1 text column\(s\) \['sentence'\]"):
        _metrics(run["best"], renamed, text_columns=("content", "label"))


def test_api_predict_reads_dict_rows_by_the_recorded_columns(run):
    import bert_jax

    model = bert_jax.load(run["best"])
    texts = [sentence for _, sentence in ROWS[:3]]
    rows = [dict(id=str(index), sentence=text, note="ignored") for index, text in
            enumerate(texts)]
    assert model.predict(rows) == model.predict(texts)
    with pytest.raises(UserError, match=r"input 1: no \['sentence'\] key\(s\); the model "
                                        r"reads its text from the column\(s\) \['sentence'\]"):
        model.predict([dict(id="1", text="a cat")])


def test_exports_keep_the_recorded_columns(run, tmp_path):
    from bert_jax.interop import model_source

    hf = str(tmp_path / "hf")
    assert main(["convert", run["best"], hf, "--to", "hf"]) == 0
    with open(os.path.join(hf, "config.json")) as file:
        assert json.load(file)["bert_jax_columns"]["text_columns"] == ["sentence"]
    info = model_source.resolve(hf).task_info()
    assert info["settings"]["columns"]["text_columns"] == ["sentence"]
    # The same float32 weights, the same texts in the same batches, the same compiled step:
    # equal to the bit (1e-6 is 8 float32 steps of the loss, below 1).
    assert _metrics(hf, run["with_id"]) == pytest.approx(_metrics(run["best"], run["plain"]),
                                                         abs=1e-6)
    again = str(tmp_path / "bert_jax")  # and back: HF -> bert-jax writes them in task.json
    assert main(["convert", hf, again]) == 0
    with open(os.path.join(again, "task.json")) as file:
        assert json.load(file)["settings"]["columns"]["text_columns"] == ["sentence"]


@pytest.mark.parametrize("old_columns", [None, dict(text_columns=[], label_column="label",
                                                    header=None)])
def test_old_task_json_without_recorded_columns_still_loads(run, tmp_path, old_columns):
    """A run from before the columns were recorded: read as then (every column but the
    label), so its own files still evaluate alike."""
    old = tmp_path / "old_best"
    shutil.copytree(run["best"], old)
    info = json.loads((old / "task.json").read_text())
    info["head"].pop("columns", None)
    if old_columns is None:
        info["settings"].pop("columns")
    else:
        info["settings"]["columns"] = old_columns
    (old / "task.json").write_text(json.dumps(info))
    assert _metrics(str(old), run["plain"]) == _metrics(run["best"], run["plain"])
