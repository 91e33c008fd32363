"""A new user's first hour: a deterministic demo corpus, prose detection, quiet output,
discoverable configs."""

import os
import sys

from input_pipeline import demo_corpus


def test_demo_corpus_ignores_what_is_installed_or_imported(tmp_path, monkeypatch):
    # A module on the path that shadows a standard-library one (as setuptools' distutils
    # hack does) changed the corpus when it was gathered in the caller's process.
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "colorsys.py").write_text(
        '"""Shadowed module prose that must not appear. It has several sentences here. '
        'One more sentence for the count. And a fourth one to be sure."""\n')
    clean = demo_corpus.stdlib_documents()
    monkeypatch.syspath_prepend(str(shadow))
    monkeypatch.setenv("PYTHONPATH", str(shadow))
    monkeypatch.delitem(sys.modules, "colorsys", raising=False)
    shadowed = demo_corpus.stdlib_documents()
    assert shadowed == clean
    assert not any("Shadowed module" in sentence for document in clean for sentence in document)
    assert len(clean) > 300 and sum(map(len, clean)) > 10_000


_PROSE = ("It was a dark and stormy night when the travellers reached the old house on the\n"
          "hill, and nobody in the village below would say who had built it or why the\n"
          "windows were always lit. The eldest of them knocked twice and waited.\n")


def _write_lines(path, text, copies):
    path.write_text((text + "\n") * copies, encoding="utf-8")
    return str(path)


def test_prose_given_as_bert_format_is_detected(tmp_path):
    from input_pipeline.sources import prose_format_warning

    wrapped = _write_lines(tmp_path / "wrapped.txt", _PROSE, 20)
    paragraphs = _write_lines(tmp_path / "paragraphs.txt", _PROSE.replace("\n", " "), 30)
    bert = _write_lines(tmp_path / "bert.txt", "The house stood on the hill.\n"
                        "Nobody knew who built it.\nThe windows were lit.\n", 10)
    assert "--format prose" in prose_format_warning([wrapped])
    assert "end mid-sentence" in prose_format_warning([wrapped])
    assert "several sentences" in prose_format_warning([paragraphs])
    assert prose_format_warning([bert]) is None


def test_vocab_command_warns_about_prose(tmp_path, capsys):
    from bert_jax import cli

    wrapped = _write_lines(tmp_path / "wrapped.txt", _PROSE, 20)
    for input_format, warned in (("bert", True), ("prose", False)):
        output = tmp_path / input_format
        assert cli.main(["vocab", "--input", wrapped, "--output", str(output), "--size", "120",
                         "--format", input_format]) == 0
        assert ("pass --format prose" in capsys.readouterr().err) == warned
