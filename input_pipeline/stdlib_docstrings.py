"""The standard library's docstrings as sentences: the demo corpus, gathered in isolation.

Run as a script under `python -I -S` (see `demo_corpus.stdlib_documents`): with no
site-packages on the path and nothing else imported, what a module imports, defines and
documents depends on the Python version alone. Gathered inside the caller's process it did
not: setuptools' `_distutils_hack` swaps `distutils` for its own copy once installed, and
modules imported earlier (JAX, TensorFlow, test tools) change what later imports see, so
`make pretrain` built different corpora in one clone before and after test dependencies
were installed. This file imports the standard library only.
"""

import importlib
import inspect
import json
import os
import pkgutil
import re
import sys
import warnings

# Modules that print, open windows or start things when imported are left out.
_SKIPPED_MODULES = {"antigravity", "this", "idlelib", "tkinter", "turtle", "turtledemo",
                    "pydoc_data", "lib2to3", "ensurepip", "venv", "__main__", "__hello__",
                    "__phello__", "xxsubtype", "_xxtestfuzz"}
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(\"'])")
# Lines that are code, doctests, tables or signatures rather than prose.
_NOT_PROSE = re.compile(r"^\s*(>>>|\.\.\.|[-=*~^]{3,}|\w+\(.*\)\s*(->.*)?$)|[{}\[\]<>|\\@$#]")


def _prose_paragraphs(docstring: str) -> list[str]:
    """The docstring's paragraphs of plain sentences, code and tables dropped."""
    paragraphs = []
    for block in re.split(r"\n\s*\n", docstring):
        lines = [line.strip() for line in block.splitlines()]
        if not lines or any(_NOT_PROSE.search(line) for line in lines):
            continue
        text = " ".join(lines)
        if len(text.split()) >= 6 and text[:1].isupper():
            paragraphs.append(text)
    return paragraphs


def _module_document(module) -> list[str]:
    """The sentences of a module's docstring and of its public classes and functions."""
    docstrings = [inspect.getdoc(module) or ""]
    for name, member in sorted(vars(module).items()):
        if name.startswith("_") or getattr(member, "__module__", None) != module.__name__:
            continue
        if inspect.isclass(member) or inspect.isfunction(member):
            docstrings.append(inspect.getdoc(member) or "")
            if inspect.isclass(member):
                docstrings.extend(inspect.getdoc(method) or "" for method_name, method
                                  in sorted(vars(member).items())
                                  if not method_name.startswith("_")
                                  and inspect.isfunction(method))
    sentences = []
    for docstring in docstrings:
        for paragraph in _prose_paragraphs(docstring):
            sentences.extend(s for s in _SENTENCE_END.split(paragraph) if len(s.split()) >= 3)
    return sentences


def _stdlib_modules():
    """Public standard-library modules and their packages' direct submodules (tests left out)."""
    for name in sorted(sys.stdlib_module_names):
        if name in _SKIPPED_MODULES or name.startswith("_"):
            continue
        try:
            module = importlib.import_module(name)
        except Exception:  # platform-specific modules (winreg, msvcrt, ...) are absent
            continue
        yield module
        for info in pkgutil.iter_modules(getattr(module, "__path__", [])):
            if info.name.startswith("_") or "test" in info.name:
                continue
            try:
                yield importlib.import_module(f"{name}.{info.name}")
            except Exception:
                continue


def stdlib_documents() -> list[list[str]]:
    """One list of sentences per standard-library module that has enough prose, sorted by name."""
    documents = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # deprecated modules warn on import
        for module in _stdlib_modules():
            sentences = _module_document(module)
            if len(sentences) >= 4:
                documents.append(sentences)
    return documents



if __name__ == "__main__":
    # The caller reads the result from a file: some modules print when imported.
    with open(sys.argv[1] + ".tmp", "w", encoding="utf-8") as output:
        json.dump(stdlib_documents(), output)
    os.replace(sys.argv[1] + ".tmp", sys.argv[1])
