"""Inputs a new user really produces, each read right or refused in one line naming the line
(issue 51): a JSONL label that is a list or an object, a text cell longer than the csv
module's 131,072-character limit, a regression target beyond float32, and `--version`.

Old behaviour: `"label": ["pos"]` trained a third class '["pos"]'; a 200,000-character TSV
cell was "not valid CSV ... a quoted field must end in a quote" in a file with no quotes; a
target of 1e39 leaked a numpy RuntimeWarning and stopped on NaN blaming the learning rate;
`bert-jax --version` was "the following arguments are required: COMMAND".
"""

import importlib.metadata
import json

import pytest
from finetune_helpers import made_up_sentences, tiny_model_directory, write_tsv

from bert_jax.cli import main
from bert_jax.errors import UserError
from input_pipeline.tasks.columns import ColumnSpec, read_rows


@pytest.mark.parametrize("label, kind", [(["pos"], "list"), ({"name": "pos"}, "object")])
def test_a_jsonl_label_that_is_a_list_or_an_object_is_refused_by_line(tmp_path, label, kind):
    path = tmp_path / "train.jsonl"
    rows = [dict(sentence="a happy dog", label="pos"), dict(sentence="a cat", label=label)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    with pytest.raises(UserError) as raised:
        read_rows(str(path), ColumnSpec(("sentence",), "label"))
    assert str(raised.value) == (
        f"{path}:2: the label 'label' is a JSON {kind} ({json.dumps(label)}); expected one "
        "label: a string, a number or true/false")
    # Numbers and booleans stay labels, as they were.
    path.write_text('{"sentence": "a", "label": 1}\n{"sentence": "b", "label": true}\n')
    assert [row.label for row in read_rows(str(path), ColumnSpec(("sentence",), "label"))] == [
        "1", "true"]


@pytest.mark.parametrize("extension, separator", [(".tsv", "\t"), (".csv", ",")])
def test_a_cell_longer_than_the_csv_modules_limit_is_read(tmp_path, extension, separator):
    long_text = " ".join(["cat"] * 50_000)  # 199,999 characters: over 131,072
    path = tmp_path / f"long{extension}"
    path.write_text(f"label{separator}sentence\npos{separator}a dog\nneg{separator}{long_text}\n")
    rows = read_rows(str(path), ColumnSpec(("sentence",), "label"))
    assert [(row.texts, row.label, row.line) for row in rows] == [
        (("a dog",), "pos", 2), ((long_text,), "neg", 3)]


def test_a_regression_target_beyond_float32_is_refused_by_line_before_compiling(tmp_path,
                                                                                capsys):
    model = tiny_model_directory(tmp_path)
    rows = [(f"{index % 5}.5", sentence) for index, (_, sentence) in
            enumerate(made_up_sentences(8, 0))]
    rows[2] = ("1e39", rows[2][1])  # finite in float64, inf in float32
    train = write_tsv(tmp_path / "scores.tsv", rows, header=("score", "sentence"))
    assert main(["finetune", "regress", "--model", model, "--train", train, "--label-column",
                 "score", "--workdir", str(tmp_path / "run"), "--max-seq-len", "16",
                 "--no-progress"]) == 2
    error = capsys.readouterr().err
    assert error.splitlines() == [
        f"bert-jax finetune: error: {train}:4: regression target '1e39' is beyond float32's "
        "range (at most 3.403e+38 in magnitude), in which the model is trained; rescale the "
        "targets"]  # one line: no RuntimeWarning, and nothing compiled


def test_version_names_the_package_and_its_numerics(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith(f"bert-jax {importlib.metadata.version('bert-jax')} (jax "
                           f"{importlib.metadata.version('jax')}, flax ")
