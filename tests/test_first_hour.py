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
