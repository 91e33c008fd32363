"""Errors that name the likely cause (issue 34): a UTF-16 or UTF-32 file is named as such,
with the iconv line that converts it; a header in one cell holding another separator is named
as a separator problem, with the --delimiter to pass (which then reads the file)."""

import argparse
import codecs

import pytest

from bert_jax.errors import UserError
from bert_jax.tasks.classification import ClassificationTask
from input_pipeline.tasks import conll
from input_pipeline.tasks.columns import ColumnSpec, read_rows
from input_pipeline.vocabulary_files import read_vocabulary

TSV = "sentence\tlabel\ngreat film\tpos\nawful\tneg\n"


@pytest.mark.parametrize("encoding, bom, named", [
    ("utf-16-le", codecs.BOM_UTF16_LE, "UTF-16"), ("utf-16-be", codecs.BOM_UTF16_BE, "UTF-16"),
    ("utf-32-le", codecs.BOM_UTF32_LE, "UTF-32"), ("utf-32-be", codecs.BOM_UTF32_BE, "UTF-32"),
    ("utf-16-le", b"", "UTF-16LE"),  # no byte-order mark: letters alternate with NULs
])
def test_utf16_and_utf32_files_are_named_with_how_to_convert(tmp_path, encoding, bom, named):
    path = tmp_path / "data.tsv"
    path.write_bytes(bom + TSV.encode(encoding))
    with pytest.raises(UserError) as caught:
        read_rows(str(path), ColumnSpec())
    message = str(caught.value)
    assert message.startswith(f"{path}: not UTF-8 text")
    assert f"it looks like {named} (" in message
    assert f"`iconv -f {named} -t UTF-8 {path} > {tmp_path / 'data.utf8.tsv'}`" in message


def test_every_text_reader_names_a_utf16_file(tmp_path):
    conll_file = tmp_path / "ner.conll"
    conll_file.write_bytes(codecs.BOM_UTF16_LE + "EU B-ORG\nrejects O\n".encode("utf-16-le"))
    with pytest.raises(UserError, match=r"it looks like UTF-16 \(it starts with a UTF-16 "
                                        r"byte-order mark\)"):
        conll.read_conll(str(conll_file))
    vocab = tmp_path / "vocab.txt"
    vocab.write_bytes(codecs.BOM_UTF16_LE + "[PAD]\n[UNK]\n".encode("utf-16-le"))
    with pytest.raises(UserError, match=r"vocabulary is not UTF-8 text .*iconv -f UTF-16"):
        read_vocabulary(str(vocab))
    latin = tmp_path / "latin.tsv"  # not UTF-8, but no sign of a wide encoding: as before
    latin.write_bytes("sentence\tlabel\ncaf\u00e9\tpos\n".encode("latin-1"))
    with pytest.raises(UserError) as caught:
        read_rows(str(latin), ColumnSpec())
    assert "not UTF-8 text" in str(caught.value) and "looks like" not in str(caught.value)


@pytest.mark.parametrize("name, content, separator, flag", [
    ("semi.csv", "sentence;label\ngreat film;pos\nawful;neg\n", "semicolon", ";"),
    ("tabs.csv", TSV, "tab", "tab"),
    ("commas.tsv", "sentence,label\ngreat film,pos\nawful,neg\n", "comma", ","),
])
def test_one_cell_header_holding_another_separator_is_named(tmp_path, name, content,
                                                            separator, flag):
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    kind = name.rsplit(".", 1)[1]
    expected = "comma" if kind == "csv" else "tab"
    with pytest.raises(UserError) as caught:
        read_rows(str(path), ColumnSpec())
    assert str(caught.value).startswith(
        f"{path}:1: the first line {content.splitlines()[0]!r} looks {separator}-separated, "
        f"but this .{kind} file is read as {expected}-separated, so it has one column; pass "
        f"--delimiter '{flag}'")
    # ... and the flag reads it.
    from input_pipeline.tasks.columns import parse_delimiter  # new with issue 34

    rows = read_rows(str(path), ColumnSpec(delimiter=parse_delimiter(flag)))
    assert [(row.texts, row.label) for row in rows] == [(("great film",), "pos"),
                                                        (("awful",), "neg")]


def test_delimiter_reaches_the_task_and_a_single_text_column_is_no_false_alarm(tmp_path):
    from input_pipeline.tasks.columns import parse_delimiter

    path = tmp_path / "semi.csv"
    path.write_text('sentence;label\n"great; fun";pos\nawful;neg\n', encoding="utf-8")
    flags = argparse.Namespace(train=str(path), text_columns="", label_column="label",
                               header=None, delimiter=";", skip_bad_rows=False,
                               labels_as_written=False)
    task = ClassificationTask.from_arguments(flags, None)
    assert task.label_names == ["neg", "pos"] and task.spec.text_columns == ("sentence",)
    # Prediction input of one text column whose texts hold semicolons: read as it is.
    texts = tmp_path / "texts.csv"
    texts.write_text("sentence\ngreat; fun\nawful\n", encoding="utf-8")
    assert [row.texts for row in read_rows(str(texts), ColumnSpec(("sentence",)),
                                           with_labels=False)] == [("great; fun",), ("awful",)]
    with pytest.raises(argparse.ArgumentTypeError, match="expected one character"):
        parse_delimiter(";;")
