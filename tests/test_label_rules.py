"""Labels as users write them (issue 34): stripped, one spelling per class, no empty cell, no
header in the middle; the same rule for classify, pairs, regress, NER tags and NLI, at any
file size."""

import argparse
import json
import os

import pytest
from finetune_helpers import tiny_model_directory
from interop_helpers import minilm_directory

from bert_jax.cli import main
from bert_jax.errors import UserError
from bert_jax.tasks.classification import ClassificationTask
from bert_jax.tasks.regression import RegressionTask
from bert_jax.tasks.sentence_embedding import SentenceEmbeddingTask
from bert_jax.tasks.token_classification import TokenClassificationTask
from input_pipeline.tasks.columns import ColumnSpec, read_rows

# The issue's file: `pos ` with a trailing space, Neg/neg, Pos/pos, a lone 1.0.
ISSUE_FILE = ("sentence\tlabel\ngreat film\tpos\ngreat fun\tpos \nawful\tneg\nboring\tNeg\n"
              "lovely\tPos\nbad\tneg\nfine work\t1.0\n")


def _flags(train, **values) -> argparse.Namespace:
    """finetune classify/regress's flags at their defaults, as the command line gives them."""
    defaults = dict(train=str(train), text_columns="", label_column="label", header=None,
                    delimiter=None, skip_bad_rows=False, labels_as_written=False)
    return argparse.Namespace(**{**defaults, **values})


def _write(path, text: str) -> str:
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_label_cells_are_stripped_of_surrounding_white_space(tmp_path):
    path = _write(tmp_path / "s.tsv", "sentence\tlabel\na\tpos \nb\t neg\nc\tpos\n")
    assert [row.label for row in read_rows(path, ColumnSpec())] == ["pos", "neg", "pos"]
    task = ClassificationTask.from_arguments(_flags(path), None)
    assert task.label_names == ["neg", "pos"]  # was ['neg', 'pos', 'pos ']


def test_case_variants_refused(tmp_path):
    path = _write(tmp_path / "labels.tsv", ISSUE_FILE)
    with pytest.raises(UserError) as caught:
        ClassificationTask.from_arguments(_flags(path), None)
    message = str(caught.value)
    assert message.startswith(f"{path}: labels that differ only by letter case")
    # One error, every group, each spelling with the line it first occurs on.
    assert f"  'pos' at {path}:2, 'Pos' at {path}:6\n" in message
    assert f"  'neg' at {path}:4, 'Neg' at {path}:5\n" in message
    assert "--labels-as-written" in message


def test_numbers_spelled_two_ways_refused(tmp_path):
    path = _write(tmp_path / "n.csv", "text,label\na,1\nb,0\nc,1.0\nd,0\n")
    with pytest.raises(UserError, match=rf"  '1' at {path}:2, '1.0' at {path}:4"):
        ClassificationTask.from_arguments(_flags(path), None)
    # Words that are no finite number group by case only; 'nan' is a word here.
    fine = _write(tmp_path / "f.csv", "text,label\na,nan\nb,10\nc,1\nd,inf\n")
    assert ClassificationTask.from_arguments(_flags(fine), None).label_names == [
        "1", "10", "inf", "nan"]


def test_labels_as_written_keeps_them_apart(tmp_path):
    path = _write(tmp_path / "labels.tsv", ISSUE_FILE)
    task = ClassificationTask.from_arguments(_flags(path, labels_as_written=True), None)
    assert task.label_names == ["1.0", "Neg", "Pos", "neg", "pos"]  # 'pos ' is 'pos'


def test_issue_file_refused_by_finetune_on_minilm_writing_nothing(tmp_path, capsys):
    path = _write(tmp_path / "labels.tsv", ISSUE_FILE)
    workdir = tmp_path / "w"
    assert main(["finetune", "classify", "--model", minilm_directory(), "--train", path,
                 "--workdir", str(workdir), "--epochs", "1", "--batch-size", "8",
                 "--max-seq-len", "32", "--no-progress"]) == 2
    error = capsys.readouterr().err
    assert "labels that differ only by letter case or by how a number is written" in error
    assert f"'neg' at {path}:4, 'Neg' at {path}:5" in error
    assert not workdir.exists()


@pytest.mark.parametrize("name, content, line", [
    ("e.tsv", "sentence\tlabel\na\tpos\nb\t \nc\tneg\n", 3),
    ("e.csv", "sentence,label\na,pos\nb,neg\nc,\n", 4),
    ("e.jsonl", '{"sentence": "a", "label": "pos"}\n{"sentence": "b", "label": null}\n', 2),
    ("f.jsonl", '{"sentence": "a", "label": "pos"}\n{"sentence": "b", "label": " "}\n', 2),
])
def test_empty_label_cell_is_an_error_naming_file_and_line(tmp_path, name, content, line):
    path = _write(tmp_path / name, content)
    with pytest.raises(UserError, match=rf"^{path}:{line}: the row has an empty label cell; "
                                        r".*--skip-bad-rows"):
        read_rows(path, ColumnSpec(("sentence",)))


def test_repeated_header_is_an_error_at_any_size(tmp_path):
    # Two exports concatenated: the second one's header (with its byte-order mark) at line 4.
    path = _write(tmp_path / "cat.tsv", "sentence\tlabel\na\tpos\nb\tneg\n\ufeffsentence\tlabel\n"
                                        "c\tpos\nd\t\n")
    with pytest.raises(UserError, match=rf"^{path}:4: the row repeats the header \(bad rows "
                                        r"also at lines 6\); fix the file, or pass "
                                        r"--skip-bad-rows"):
        ClassificationTask.from_arguments(_flags(path), None)


def test_repeated_header_found_with_columns_by_index(tmp_path, capsys):
    # By index, the first row is a header when its label is no other row's: the copy of it
    # in the middle does not count as another row having it.
    path = _write(tmp_path / "q.tsv", "Quality\tString\nneg\ta\npos\tb\nQuality\tString\n"
                                      "neg\tc\npos\td\n")
    flags = _flags(path, text_columns="1", label_column="0")
    with pytest.raises(UserError, match=rf"^{path}:4: the row repeats the header"):
        ClassificationTask.from_arguments(flags, None)
    assert "q.tsv: line 1 taken as a header" in capsys.readouterr().err


def test_skip_bad_rows_skips_and_counts(tmp_path, capsys):
    path = _write(tmp_path / "cat.csv", "sentence,label\na,pos\nsentence,label\nb,\nc,neg\n"
                                        "d,\"  \"\n")
    task = ClassificationTask.from_arguments(_flags(path, skip_bad_rows=True), None)
    assert task.label_names == ["neg", "pos"]  # not 'label' and ''
    assert capsys.readouterr().err.strip() == (
        f"{path}: skipped 1 row(s) that repeat the header (line(s) 3); 2 row(s) that have "
        "an empty label cell (line(s) 4, 6)")
    assert [row.line for row in read_rows(path, ColumnSpec(skip_bad_rows=True))] == [2, 5]


def test_regress_reads_labels_by_the_same_rule(tmp_path, capsys):
    path = _write(tmp_path / "r.tsv", "a\tb\tscore\nx\ty\t 0.5\nx\ty\t\nz\tw\t4.0\n")
    with pytest.raises(UserError, match=rf"^{path}:3: the row has an empty label cell"):
        RegressionTask.from_arguments(_flags(path, label_column="score"), None)
    task = RegressionTask.from_arguments(_flags(path, label_column="score",
                                                skip_bad_rows=True), None)
    rows = read_rows(path, task.spec)
    assert [row.label for row in rows] == ["0.5", "4.0"]
    assert "skipped 1 row(s) that have an empty label cell (line(s) 3)" in capsys.readouterr().err


def test_ner_entity_types_differing_by_case_refused(tmp_path):
    path = _write(tmp_path / "ner.conll", "EU B-ORG\nrejects O\nJohn B-PER\n\n"
                                          "Mary B-Per\nsaw O\nhim O\n")
    flags = argparse.Namespace(train=path, tag_column=-1, tag_scheme="auto",
                               label_all_subwords=False, freeze_encoder=False,
                               layers="-4,-3,-2,-1", combine="concat", labels_as_written=False)
    with pytest.raises(UserError, match=rf"entity types that differ only by letter case.*\n"
                                        rf"  'PER' at {path}:3, 'Per' at {path}:5\n"):
        TokenClassificationTask.from_arguments(flags, None)
    flags.labels_as_written = True
    assert TokenClassificationTask.from_arguments(flags, None).ner.label_names == (
        "O", "B-ORG", "I-ORG", "B-PER", "I-PER", "B-Per", "I-Per")


def test_nli_labels_follow_the_rule(tmp_path):
    def nli(name, labels):
        return _write(tmp_path / name, "".join(json.dumps(dict(
            premise=f"p{index}", hypothesis=f"h{index}", label=label)) + "\n"
            for index, label in enumerate(labels)))

    def flags(path, **values):
        return argparse.Namespace(**{**dict(
            train=path, loss="softmax", pooling="mean", hard_negatives=False, score_max=5.0,
            skip_bad_rows=False, labels_as_written=False), **values})

    spaced = nli("a.jsonl", ["entailment ", "neutral", "entailment", "contradiction"])
    assert SentenceEmbeddingTask.from_arguments(flags(spaced), None).label_names == (
        "contradiction", "entailment", "neutral")
    cased = nli("b.jsonl", ["entailment", "Entailment", "neutral"])
    with pytest.raises(UserError, match=rf"  'entailment' at {cased}:1, 'Entailment' at "
                                        rf"{cased}:2"):
        SentenceEmbeddingTask.from_arguments(flags(cased, loss="mnrl"), None)
    empty = nli("c.jsonl", ["entailment", "", "neutral"])
    with pytest.raises(UserError, match=rf"^{empty}:2: the row has an empty label cell"):
        SentenceEmbeddingTask.from_arguments(flags(empty), None)
    assert SentenceEmbeddingTask.from_arguments(
        flags(empty, skip_bad_rows=True), None).label_names == ("entailment", "neutral")


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return tiny_model_directory(tmp_path_factory.mktemp("label_rules"))


def test_finetune_flags_reach_the_task_json(model, tmp_path, capsys):
    """--labels-as-written and --skip-bad-rows end to end: the classes a run trains."""
    path = _write(tmp_path / "labels.tsv", ISSUE_FILE + "sentence\tlabel\nfine\t\n")
    workdir = tmp_path / "w"
    assert main(["finetune", "classify", "--model", model, "--train", path, "--workdir",
                 str(workdir), "--epochs", "1", "--batch-size", "8", "--max-seq-len", "32",
                 "--no-progress", "--labels-as-written", "--skip-bad-rows"]) == 0
    assert f"{path}: skipped 1 row(s) that repeat the header (line(s) 9); 1 row(s)" in \
        capsys.readouterr().err
    with open(os.path.join(workdir, "task.json")) as file:
        settings = json.load(file)["settings"]
    assert settings["label_names"] == ["1.0", "Neg", "Pos", "neg", "pos"]
    assert settings["columns"]["text_columns"] == ["sentence"]


# Issue 42: labels the rule still missed. Before: a file of one label trained a one-class
# model (every text that label at probability 1.0); JSONL true/false mixed with 1/0 trained
# four classes; `--text-columns label` trained on the label itself.

def test_a_file_of_one_label_is_refused(tmp_path):
    path = _write(tmp_path / "one.tsv", "sentence\tlabel\na\tpos\nb\tpos \nc\tpos\n")
    with pytest.raises(UserError, match=rf"^{path}:2: every row has the label 'pos' \(3 rows\); "
                                        "a classifier needs at least two labels"):
        ClassificationTask.from_arguments(_flags(path), None)
    nli = _write(tmp_path / "nli.jsonl", "".join(json.dumps(dict(
        premise=f"p{index}", hypothesis=f"h{index}", label="entailment")) + "\n"
        for index in range(3)))
    flags = argparse.Namespace(train=nli, loss="softmax", pooling="mean", hard_negatives=False,
                               score_max=5.0, skip_bad_rows=False, labels_as_written=False)
    with pytest.raises(UserError, match=rf"^{nli}:1: every row has the label 'entailment'"):
        SentenceEmbeddingTask.from_arguments(flags, None)


def test_json_truth_values_and_numbers_are_one_label_spelled_two_ways(tmp_path):
    path = _write(tmp_path / "mixed.jsonl", "".join(
        json.dumps(dict(sentence=f"s{index}", label=label)) + "\n"
        for index, label in enumerate([False, True, 0, 1, 1.0, True])))
    with pytest.raises(UserError) as caught:
        ClassificationTask.from_arguments(_flags(path), None)
    assert f"  'false' at {path}:1, '0' at {path}:3\n" in str(caught.value)
    assert f"  'true' at {path}:2, '1' at {path}:4, '1.0' at {path}:5\n" in str(caught.value)
    assert ClassificationTask.from_arguments(_flags(path, labels_as_written=True),
                                             None).label_names == ["0", "1", "1.0", "false",
                                                                   "true"]


@pytest.mark.parametrize("name, content, flags, line, column", [
    ("named.tsv", "sentence\tlabel\na\tpos\nb\tneg\n", dict(text_columns="label"), 1, "label"),
    ("indexed.tsv", "pos\ta\nneg\tb\n", dict(text_columns="0", label_column="0",
                                             header=False), 1, "column_0"),
    ("pairs.csv", "a,b,label\nx,y,pos\nz,w,neg\n", dict(text_columns="a,label"), 1, "label"),
    ("keys.jsonl", '{"sentence": "a", "label": "pos"}\n{"sentence": "b", "label": "neg"}\n',
     dict(text_columns="label"), 1, "label"),
])
def test_a_text_column_that_is_the_label_column_is_refused(tmp_path, name, content, flags,
                                                           line, column):
    path = _write(tmp_path / name, content)
    with pytest.raises(UserError, match=rf"^{path}:{line}: column '{column}' is both a text "
                                        "column and the label column"):
        ClassificationTask.from_arguments(_flags(path, **flags), None)
