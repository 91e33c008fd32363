"""An output is only ever a file of ours (issue 51): every command that writes refuses, before
any work and in one line, an output that is one of its own inputs, an existing file of
another kind, a place on a full file system, or a read-only directory, and changes nothing.

Old behaviour: `search --index FILE` replaced any FILE (the training file, the corpus) after
"index FILE is unreadable; rebuilding it", exit 0; `predict --output` equal to `--input`
replaced the input; `embed` onto a full disk was a traceback after the work.

`test_every_writing_command_refuses_four_outputs` prints its table (`pytest -s`). A full and
a read-only file system are real (a small tmpfs) where this machine lets the tests mount one
(root, as the project's CI runs), else the OS's error is raised where the file system would.
"""

import contextlib
import errno
import os
import shutil
import subprocess

import pytest

from bert_jax.cli import main
from bert_jax.storage import file_kinds, outputs

MISSING = "/nonexistent/bert-jax-test"  # what a command would read first, were OUT accepted

# command -> (arguments; IN: a file it reads, IN_DIR: a directory it reads, OUT: its output)
COMMANDS = {
    "embed": ["embed", "--model", MISSING, "--input", "IN", "--output", "OUT"],
    "predict": ["predict", "--model", MISSING, "--input", "IN", "--output", "OUT"],
    "features": ["features", "--model", MISSING, "--input", "IN", "--output", "OUT"],
    "evaluate": ["evaluate", "classify", "--model", MISSING, "--data", "IN", "--output", "OUT"],
    "search": ["search", "--model", MISSING, "--corpus", "IN", "--query", "a", "--index",
               "OUT"],
    "aot": ["aot", "--config", "IN", "--topology", "v4:2x2x1", "--json", "OUT"],
    "convert": ["convert", "IN_DIR", "OUT", "--to", "hf"],
    "attention": ["attention", "--model", "IN_DIR", "--text", "a", "--output", "OUT"],
    "probe": ["probe", "--model", "IN_DIR", "--treebank", MISSING, "--output", "OUT"],
    "vocab": ["vocab", "--input", "IN_DIR", "--size", "50", "--output", "OUT"],
    "create-data": ["create-data", "--input", "IN_DIR", "--vocab", MISSING, "--output-dir",
                    "OUT"],
    "finetune": ["finetune", "classify", "--model", "IN_DIR", "--train", MISSING, "--workdir",
                 "OUT"],
    "pretrain": ["pretrain", "--config", "IN", "--workdir", "OUT"],
    "examples": ["examples", "OUT"],
}
# The file name each command's output gets (its kind: .npy, .jsonl ...); None: a directory.
FILE_NAMES = {"embed": "out.npy", "predict": "out.jsonl", "features": "out.npz",
              "evaluate": "metrics.json", "search": "out.bert-jax-index.npz",
              "aot": "report.json"}


def _run(command: str, output: str, source: str, source_directory: str, capsys) -> tuple:
    """(exit status, stderr's lines) of `command` writing to `output`."""
    replace = {"OUT": output, "IN": source, "IN_DIR": source_directory}
    status = main([replace.get(argument, argument) for argument in COMMANDS[command]])
    return status, capsys.readouterr().err.strip().splitlines()


def _snapshot(root) -> dict:
    """Every path under `root` with its bytes (directories as None): what must not change."""
    found = {}
    for directory, names, file_names in os.walk(root):
        for name in names:
            found[os.path.join(directory, name)] = None
        for name in file_names:
            path = os.path.join(directory, name)
            with open(path, "rb") as file:
                found[path] = file.read()
    return found


@contextlib.contextmanager
def _file_system(path, options: str, fault: int, monkeypatch):
    """A directory at `path` on a tmpfs mounted with `options` ("size=4k" then filled, or
    "ro"), or, where mounting is not allowed, a directory whose write check meets `fault`."""
    os.makedirs(path)
    mounted = shutil.which("mount") is not None and subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)],
        capture_output=True).returncode == 0
    try:
        if mounted and options.startswith("size"):  # fill it: not one block left
            with open(os.path.join(path, "filler"), "wb", buffering=0) as filler, \
                    contextlib.suppress(OSError):
                while True:
                    filler.write(b"\0" * 4096)
        if not mounted:
            def fails(*_, **__):
                raise OSError(fault, os.strerror(fault))

            monkeypatch.setattr(outputs.tempfile, "mkstemp", fails)
        yield "a tmpfs" if mounted else "patched"
    finally:
        if mounted:
            subprocess.run(["umount", str(path)], check=True)
        monkeypatch.undo()


def _cases(command: str, root, monkeypatch):
    """(case name, output path, the stderr line expected, the context it runs in)."""
    name = FILE_NAMES.get(command)
    flag = COMMANDS[command][COMMANDS[command].index("OUT") - 1]
    flag = "DST" if command == "convert" else "DIR" if command == "examples" else flag
    source, source_directory = str(root / "input.txt"), str(root / "input_directory")
    prefix = f"bert-jax {command}: error: {flag}"
    input_flag = "SRC" if command == "convert" else next(
        (COMMANDS[command][index - 1] for index, argument in enumerate(COMMANDS[command])
         if argument in ("IN", "IN_DIR")), None)
    yield_input = source if "IN" in COMMANDS[command] else source_directory
    cases = []
    if command == "examples":
        cases.append(("(a) an input", None, "n/a: it reads nothing", contextlib.nullcontext()))
    elif command == "pretrain":  # its input is its config, a file where a directory goes
        cases.append(("(a) an input", source, f"{prefix} {source}: is a file; expected a "
                      "directory (or a name for a new one)", contextlib.nullcontext()))
    else:
        cases.append(("(a) an input", yield_input, f"{prefix} {yield_input}: is also "
                      f"{input_flag} {yield_input}, which writing there would destroy; choose "
                      "another output", contextlib.nullcontext()))
    other = str(root / ("other.npy" if name is None else f"other{os.path.splitext(name)[1]}"))
    if name is None:
        cases.append(("(b) another kind", other, f"{prefix} {other}: is a file; expected a "
                      "directory (or a name for a new one)", contextlib.nullcontext()))
    else:
        kind = {"embed": "a NumPy .npy array", "predict": "a JSON Lines file (one object a "
                "line)", "features": "a NumPy .npz archive", "evaluate": "a JSON file",
                "search": "a bert-jax search index", "aot": "a JSON file"}[command]
        cases.append(("(b) another kind", other, f"{prefix} {other}: exists and is not {kind}, "
                      "so it is not a file this command wrote; bert-jax replaces only its own "
                      "kind of file: choose another name, or move that file away",
                      contextlib.nullcontext()))
    for case, directory, options, fault, words in (
            ("(c) a full disk", root / "full", "size=4k", errno.ENOSPC,
             "no space left on device"),
            ("(d) read-only", root / "read_only", "ro", errno.EROFS, "read-only file system")):
        output = str(directory / (name or "out"))
        cases.append((case, output, f"{prefix} {output}: cannot write in {directory}: {words}; "
                      "choose a writable place",
                      _file_system(directory, options, fault, monkeypatch)))
    return cases


def _inputs(root) -> None:
    """The inputs every case may name, and a file of another kind for each output."""
    (root / "input.txt").write_text("the man went to the store\n")
    (root / "input_directory").mkdir()
    (root / "input_directory" / "corpus.txt").write_text("a text\n")
    (root / "other.npy").write_text("label\tsentence\npos\ta happy dog\n")  # a data file
    for extension in (".jsonl", ".npz", ".json"):
        (root / f"other{extension}").write_text("label\tsentence\npos\ta happy dog\n")
    (root / "other.bert-jax-index.npz").write_text("not an index\n")


def test_every_writing_command_refuses_four_outputs(tmp_path, monkeypatch, capsys):
    table = []
    for command in COMMANDS:
        root = tmp_path / command
        root.mkdir()
        _inputs(root)
        for case, output, expected, context in _cases(command, root, monkeypatch):
            if output is None:
                table.append((command, case, "-", expected))
                continue
            with context as how:
                before = _snapshot(root)
                status, lines = _run(command, output, str(root / "input.txt"),
                                     str(root / "input_directory"), capsys)
                assert (status, lines) == (2, [expected]), (command, case)
                assert _snapshot(root) == before, (command, case)  # nothing changed
            table.append((command, case + (f" ({how})" if how else ""), status, lines[0]))
    with capsys.disabled():
        print("\ncommand | output | exit | the one line (stderr)")
        for row in table:
            print(" | ".join(str(cell) for cell in row))


def test_a_file_of_the_same_kind_is_replaced_and_an_empty_one_too(tmp_path):
    earlier = tmp_path / "earlier.jsonl"
    earlier.write_text('{"texts": ["a"], "label": "pos"}\n')
    empty = tmp_path / "empty.npy"
    empty.write_text("")
    for path, kind in ((earlier, file_kinds.JSON_LINES), (empty, file_kinds.NPY)):
        outputs.check_output(outputs.Output("--output", str(path), ours=kind))  # no error
