"""Labelled rows from TSV/CSV/JSONL, and bad input failing with file and line, writing nothing."""


import pytest
from finetune_helpers import made_up_sentences, tiny_model_directory, write_tsv

from bert_jax.cli import main
from bert_jax.errors import UserError
from input_pipeline.tasks.columns import ColumnSpec, parse_columns, read_rows


def test_columns_by_name_index_key_with_and_without_header(tmp_path):
    sst = tmp_path / "sst.tsv"
    sst.write_text('label\tsentence\n0\ta "quoted" film\n1\tgood , fun\n')
    rows = read_rows(str(sst), ColumnSpec())
    assert [(row.texts, row.label, row.line) for row in rows] == [
        (('a "quoted" film',), "0", 2), (("good , fun",), "1", 3)]
    # STS-B: no header, score in column 4, sentences in 5 and 6, extra trailing columns.
    sts = tmp_path / "sts.tsv"
    sts.write_text("g\tf\t2012\t1\t4.5\tA man.\tA person.\n"
                   "g\tf\t2012\t2\t0.25\tA dog.\tA cat.\tsource-a\tsource-b\n")
    rows = read_rows(str(sts), ColumnSpec(parse_columns("5,6"), 4))
    assert [(row.texts, row.label) for row in rows] == [
        (("A man.", "A person."), "4.5"), (("A dog.", "A cat."), "0.25")]
    nli = tmp_path / "nli.jsonl"
    nli.write_text('{"premise": "P one", "hypothesis": "H one", "label": "neutral"}\n\n'
                   '{"premise": "P two", "hypothesis": "H two", "label": "entailment"}\n')
    rows = read_rows(str(nli), ColumnSpec())
    assert [(row.texts, row.label, row.line) for row in rows] == [
        (("P one", "H one"), "neutral", 1), (("P two", "H two"), "entailment", 3)]
    csv_file = tmp_path / "pairs.csv"
    csv_file.write_text('text,label\n"hello, world",yes\n')
    assert read_rows(str(csv_file), ColumnSpec())[0].texts == ("hello, world",)
    text = tmp_path / "plain.txt"
    text.write_text("one text\nfirst\tsecond\n")
    assert [row.texts for row in read_rows(str(text), ColumnSpec(), with_labels=False)] == [
        ("one text",), ("first", "second")]


@pytest.mark.parametrize("content, spec, message", [
    ("label\tsentence\n", ColumnSpec(), r"no rows"),
    ("", ColumnSpec(), r"empty"),
    ("label\tsentence\n1\tok\n", ColumnSpec(("text",)), r"sst.tsv:1: no column 'text'"),
    ("a\t1\nb\n", ColumnSpec((0,), 1), r"sst.tsv:2: no column 1 \(label\)"),
])
def test_bad_columns_name_the_file_and_line(tmp_path, content, spec, message):
    path = tmp_path / "sst.tsv"
    path.write_text(content)
    with pytest.raises(UserError, match=message):
        read_rows(str(path), spec)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return tiny_model_directory(tmp_path_factory.mktemp("inputs"))


def _finetune(task, model, train, dev, workdir, *extra):
    return main(["finetune", task, "--model", model, "--train", train, "--eval", dev,
                 "--workdir", str(workdir), "--epochs", "1", "--batch-size", "8",
                 "--max-seq-len", "32", "--no-progress", *extra])  # the model has 64 positions


def test_bad_inputs_fail_with_file_and_line_and_write_nothing(model, tmp_path, capsys):
    train = write_tsv(tmp_path / "train.tsv", made_up_sentences(16, seed=0))
    cases = [
        ("classify", write_tsv(tmp_path / "unseen.tsv", [("neg", "a cat"), ("meh", "a dog")]),
         (), r"unseen.tsv:3: label 'meh' does not occur in the training data"),
        ("classify", write_tsv(tmp_path / "nolabel.tsv", [("a cat",)], header=("sentence",)),
         (), r"nolabel.tsv:1: no column 'label'"),
        ("classify", str(tmp_path / "empty.tsv"), (), r"empty.tsv: the file is empty"),
        ("regress", write_tsv(tmp_path / "score.tsv", [("0.5", "a cat"), ("high", "a dog")]),
         (), r"score.tsv:3: regression target 'high' is not a finite number"),
    ]
    (tmp_path / "empty.tsv").write_text("")
    for task, dev, extra, message in cases:
        workdir = tmp_path / f"run_{task}"
        train_file = train if task == "classify" else dev
        assert _finetune(task, model, train_file, dev, workdir, *extra) == 2
        error = capsys.readouterr().err
        assert __import__("re").search(message, error), error
        assert not workdir.exists()
