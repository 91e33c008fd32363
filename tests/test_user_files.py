"""Files as users have them: a byte-order mark, a header row, quoted newlines, U+2028 in a
text, ragged rows, single-occurrence labels, and which label a binary F1 is of."""

import json

import numpy as np
import pytest
from finetune_helpers import made_up_sentences, tiny_model_directory
from sklearn.metrics import f1_score

from bert_jax.cli import main
from bert_jax.errors import UserError
from bert_jax.tasks.classification import ClassificationTask, positive_label, warn_single_labels
from input_pipeline import sources
from input_pipeline.tasks import conll, conllu, mlm_text, squad
from input_pipeline.tasks.columns import ColumnSpec, read_rows
from input_pipeline.vocabulary_files import read_vocabulary

BOM = "\ufeff"


def _excel_tsv(path, rows, header=("label", "sentence")) -> str:
    """A TSV as Excel's "Unicode text (UTF-8)" writes it: a byte-order mark, a header, CRLF."""
    lines = ["\t".join(header)] + ["\t".join(row) for row in rows]
    path.write_bytes((BOM + "\r\n".join(lines) + "\r\n").encode("utf-8"))
    return str(path)


def _cells(rows):
    return [(row.texts, row.label, row.line) for row in rows]


# -- byte-order mark ------------------------------------------------------------------------

def test_bom_header_columns_by_name_and_bom_without_header(tmp_path):
    path = _excel_tsv(tmp_path / "bom.tsv", [("neg", "a cat"), ("pos", "a dog")])
    assert _cells(read_rows(path, ColumnSpec(("sentence",), "label"))) == [
        (("a cat",), "neg", 2), (("a dog",), "pos", 3)]
    bare = tmp_path / "bare.tsv"
    bare.write_bytes(f"{BOM}neg\ta cat\npos\ta dog\n".encode())
    rows = read_rows(str(bare), ColumnSpec((1,), 0))
    assert [row.label for row in rows] == ["neg", "pos"]  # not '\ufeffneg'


def test_every_reader_drops_a_bom(tmp_path):
    def write(name, text):
        (tmp_path / name).write_bytes((BOM + text).encode("utf-8"))
        return str(tmp_path / name)

    assert read_rows(write("a.jsonl", '{"text": "hi", "label": "x"}\n'), ColumnSpec())[0].texts \
        == ("hi",)
    assert read_rows(write("a.csv", "text,label\nhi,x\n"), ColumnSpec())[0].label == "x"
    assert read_rows(write("a.txt", "hi\n"), ColumnSpec(), with_labels=False)[0].texts == ("hi",)
    assert conll.read_conll(write("a.conll", "EU B-ORG\nrejects O\n")).sentences[0].words[0] \
        == "EU"
    treebank = "1\tHi\thi\tINTJ\tUH\t_\t0\troot\t_\t_\n"
    assert next(conllu.read_conllu(write("a.conllu", treebank))).words == ("Hi",)
    question = {"id": "q", "question": "What?", "answers": [{"text": "Paris", "answer_start": 0}]}
    document = {"version": "1.1", "data": [{"title": "t", "paragraphs": [
        {"context": "Paris is big.", "qas": [question]}]}]}
    assert squad.read_squad(write("a.json", json.dumps(document))).questions[0].answer_texts \
        == ("Paris",)
    assert mlm_text.read_documents(write("a.mlm.txt", "one line\n")) == ["one line"]
    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert read_vocabulary(write("vocab.txt", "\n".join(special) + "\n")) == special
    assert list(sources.read_documents([write("corpus.txt", "First one.\nSecond.\n")])) == [
        ["First one.", "Second."]]


# -- rows the csv module reads ----------------------------------------------------------------

def test_a_quoted_newline_stays_and_later_line_numbers_are_right(tmp_path):
    path = tmp_path / "q.csv"
    path.write_text('text,label\n"line one\nline two",pos\nx,neg\ny,pos,extra\n')
    with pytest.raises(UserError, match=r"q.csv:5: the row has 3 columns, the header has 2"):
        read_rows(str(path), ColumnSpec())
    path.write_text('text,label\n"line one\nline two",pos\nx,neg\n')
    assert _cells(read_rows(str(path), ColumnSpec())) == [
        (("line one\nline two",), "pos", 2), (("x",), "neg", 4)]


def test_a_tsv_quoted_as_excel_writes_it_and_a_glue_tsv_with_stray_quotes(tmp_path):
    excel = tmp_path / "excel.tsv"
    excel.write_text('label\tsentence\npos\t"He said ""hi""\tthen"\nneg\t"two\nlines"\n'
                     'pos\tplain\n')
    assert _cells(read_rows(str(excel), ColumnSpec())) == [
        (('He said "hi"\tthen',), "pos", 2), (("two\nlines",), "neg", 3),
        (("plain",), "pos", 5)]
    glue = tmp_path / "glue.tsv"  # STS-B's texts: not valid under Excel's quoting
    glue.write_text('0.8\t"Then the captain was gone.\tThen he came back.\n'
                    '1.2\t"Fairies don\'t exist" - fine.\t"Satyrs" too.\n')
    assert [row.texts for row in read_rows(str(glue), ColumnSpec((1, 2), 0))] == [
        ('"Then the captain was gone.', "Then he came back."),
        ('"Fairies don\'t exist" - fine.', '"Satyrs" too.')]


@pytest.mark.parametrize("name, content", [
    ("u.tsv", "label\tsentence\npos\tone\u2028two\nneg\tthree\n"),
    ("u.csv", "label,sentence\npos,one\u2028two\nneg,three\n"),
    ("u.jsonl", '{"label": "pos", "sentence": "one\u2028two"}\n'
                '{"label": "neg", "sentence": "three"}\n'),
])
def test_u2028_inside_a_text_does_not_split_the_row(tmp_path, name, content):
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    assert _cells(read_rows(str(path), ColumnSpec(("sentence",)))) == [
        (("one\u2028two",), "pos", 2 - name.endswith("jsonl")),
        (("three",), "neg", 3 - name.endswith("jsonl"))]


def test_an_extra_column_is_an_error_unless_every_column_is_an_index(tmp_path):
    path = tmp_path / "extra.tsv"
    path.write_text("label\tsentence\npos\ta cat\nneg\ta dog\tstray\n")
    with pytest.raises(UserError, match=r"extra.tsv:3: the row has 3 columns, the header has 2"):
        read_rows(str(path), ColumnSpec(("sentence",), "label"))
    path.write_text("label\tsentence\npos\ta cat\t\nneg\ta dog\t \n")  # empty: no data lost
    assert len(read_rows(str(path), ColumnSpec(("sentence",), "label"))) == 2
    path.write_text("pos\ta cat\nneg\ta dog\tstray\n")  # no header, texts defaulted
    with pytest.raises(UserError, match=r"extra.tsv:2: the row has 3 columns, the first row"):
        read_rows(str(path), ColumnSpec((), 0, header=False))
    # Every column by index, no header: further trailing columns are the file's (STS-B).
    assert [row.texts for row in read_rows(str(path), ColumnSpec((1,), 0))] == [
        ("a cat",), ("a dog",)]


# -- header detection -------------------------------------------------------------------------

def test_header_detected_by_its_label_cell_and_said_on_stderr(tmp_path, capsys):
    path = _excel_tsv(tmp_path / "h.tsv", [("neg", "a"), ("pos", "b"), ("neg", "c")],
                      header=("Quality", "text"))
    rows = read_rows(path, ColumnSpec((1,), 0))
    assert [row.label for row in rows] == ["neg", "pos", "neg"]
    assert "h.tsv: line 1 taken as a header (its label cell 'Quality' is not a label" in \
        capsys.readouterr().err
    assert [row.label for row in read_rows(path, ColumnSpec((1,), 0, header=False))] == [
        "Quality", "neg", "pos", "neg"]  # --no-header
    # Regression: a non-number over numbers is a header; a first label seen again is not.
    scores = tmp_path / "s.tsv"
    scores.write_text("score\ta\tb\n0.5\tx\ty\n4.25\tz\tw\n")
    assert [row.label for row in read_rows(str(scores), ColumnSpec((1, 2), 0),
                                           numeric_labels=True)] == ["0.5", "4.25"]
    assert "s.tsv: line 1 taken as a header (its label cell 'score' is not a number" in \
        capsys.readouterr().err
    plain = tmp_path / "p.tsv"
    plain.write_text("neg\ta\npos\tb\nneg\tc\n")
    assert len(read_rows(str(plain), ColumnSpec((1,), 0))) == 3
    assert "header" not in capsys.readouterr().err
    assert len(read_rows(str(plain), ColumnSpec((1,), 0, header=True))) == 2  # --header


def test_a_label_seen_once_in_a_large_file_is_named_with_its_line(tmp_path, capsys):
    rows = [("pos" if index % 2 else "neg", f"text {index}") for index in range(120)]
    rows[49] = ("nuetral", "a typo")
    path = _excel_tsv(tmp_path / "big.tsv", rows)
    read = read_rows(path, ColumnSpec())
    warn_single_labels(read, path)
    assert capsys.readouterr().err.strip() == (
        f"{path}:51: warning: label 'nuetral' occurs only on this line of 120 rows; it "
        "becomes a class of its own")
    warn_single_labels(read[:99], path)  # a small file: no evidence of a stray cell
    assert capsys.readouterr().err == ""


# -- the positive label of a binary F1 -------------------------------------------------------

@pytest.mark.parametrize("labels, positive", [
    (["0", "1"], "1"), (["entailment", "not_entailment"], "entailment"),
    (["neg", "pos"], "pos"), (["not spam", "spam"], "spam"), (["false", "true"], "true")])
def test_binary_f1_is_of_the_positive_label(labels, positive):
    assert positive_label(labels)[0] == positive
    task = ClassificationTask(labels, ColumnSpec())
    rng = np.random.default_rng(0)
    gold, predicted = rng.integers(0, 2, 64), rng.integers(0, 2, 64)
    metrics = task.evaluate({"label": predicted}, gold)
    assert metrics["f1"] == pytest.approx(  # the same float64 count ratios on both sides
        f1_score(gold, predicted, pos_label=labels.index(positive)))
    assert task.summary([])["f1_positive_label"] == positive


# -- end to end: an Excel TSV with columns by index ------------------------------------------

@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return tiny_model_directory(tmp_path_factory.mktemp("user_files"))


def test_excel_tsv_by_index_trains_two_labels_and_names_the_positive_one(model, tmp_path,
                                                                         capsys):
    train = _excel_tsv(tmp_path / "train.tsv", made_up_sentences(24, seed=0),
                       header=("Quality", "String"))
    dev = _excel_tsv(tmp_path / "dev.tsv", made_up_sentences(8, seed=1),
                     header=("Quality", "String"))
    workdir = tmp_path / "run"
    assert main(["finetune", "classify", "--model", model, "--train", train, "--eval", dev,
                 "--text-columns", "1", "--label-column", "0", "--workdir", str(workdir),
                 "--epochs", "1", "--batch-size", "8", "--max-seq-len", "32",
                 "--no-progress"]) == 0
    assert "train.tsv: line 1 taken as a header" in capsys.readouterr().err
    task = json.loads((workdir / "best" / "task.json").read_text())
    assert task["settings"]["label_names"] == ["neg", "pos"]  # not a third '\ufeffQuality'
    results = json.loads((workdir / "eval_results.json").read_text())
    assert results["f1_positive_label"] == "pos"
    assert "sorted order" in results["f1_positive_label_rule"]
    output = tmp_path / "predictions.jsonl"
    plain = tmp_path / "plain.tsv"  # no header, nothing to detect one by
    plain.write_text("neg\tred cat\npos\thappy dog\nneg\tblue fish\n")
    assert main(["predict", "--model", str(workdir / "best"), "--input", str(plain),
                 "--header", "--output", str(output)]) == 0
    assert [json.loads(line)["texts"] for line in output.read_text().splitlines()] == [
        ["happy dog"], ["blue fish"]]
    assert main(["evaluate", "classify", "--model", str(workdir / "best"), "--data", dev,
                 "--no-header"]) == 2  # the header row's label 'Quality' is no class
    assert "dev.tsv:1: label 'Quality' does not occur in the training data" in \
        capsys.readouterr().err
