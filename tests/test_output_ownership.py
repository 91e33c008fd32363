"""An output is only ever a file of ours (issue 51): every command that writes refuses, before
any work and in one line, an output that is one of its own inputs, an existing file of
another kind, a place on a full file system, or a read-only directory, and changes nothing.

Old behaviour: `search --index FILE` replaced any FILE (the training file, the corpus) after
"index FILE is unreadable; rebuilding it", exit 0; `predict --output` equal to `--input`
replaced the input; `embed` onto a full disk was a traceback after the work.

`test_every_writing_command_refuses_four_outputs` writes its table to the file named by
BERT_JAX_OUTPUT_TABLE, when set. A full and a read-only file system are real (a small tmpfs)
where this machine lets the tests mount one (root, as the project's CI runs), else the OS's
error is raised where the file system would.
"""

import contextlib
import errno
import os
import shutil
import subprocess
import sys

import pytest
from finetune_helpers import tiny_model_directory

from bert_jax.cli import main
from bert_jax.embeddings import search
from bert_jax.errors import UserError
from bert_jax.storage import file_kinds, files, outputs

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
    if os.environ.get("BERT_JAX_OUTPUT_TABLE"):  # the table, for a report
        with open(os.environ["BERT_JAX_OUTPUT_TABLE"], "w", encoding="utf-8") as file:
            file.write("command | output | exit | the one line (stderr)\n")
            file.writelines(" | ".join(str(cell) for cell in row) + "\n" for row in table)


def test_a_file_of_the_same_kind_is_replaced_and_an_empty_one_too(tmp_path):
    earlier = tmp_path / "earlier.jsonl"
    earlier.write_text('{"texts": ["a"], "label": "pos"}\n')
    empty = tmp_path / "empty.npy"
    empty.write_text("")
    for path, kind in ((earlier, file_kinds.JSON_LINES), (empty, file_kinds.NPY)):
        outputs.check_output(outputs.Output("--output", str(path), ours=kind))  # no error


# -- the search index: known by its marker; damaged, set aside and rebuilt -----------------

@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    return tiny_model_directory(tmp_path_factory.mktemp("tiny"))


def _search(model, corpus, index, capsys) -> tuple:
    status = main(["search", "--model", model, "--corpus", str(corpus), "--query", "a happy dog",
                   "--index", str(index), "--no-progress"])
    captured = capsys.readouterr()
    return status, captured.out, captured.err.strip().splitlines()


def test_search_never_takes_a_data_file_for_its_index(tiny_model, tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("a happy dog\nthe cat sat\n")
    train = tmp_path / "train.tsv"
    train.write_text("label\tsentence\npos\ta happy dog\n")
    # Not an index: refused before the model is read (a missing model is not reached).
    for model in (MISSING, tiny_model):
        assert _search(model, corpus, train, capsys)[::2] == (2, [
            f"bert-jax search: error: --index {train}: exists and is not a bert-jax search "
            "index, so it is not a file this command wrote; bert-jax replaces only its own kind "
            "of file: choose another name, or move that file away"])
    assert _search(tiny_model, corpus, corpus, capsys)[::2] == (2, [
        f"bert-jax search: error: --index {corpus}: is also --corpus {corpus}, which writing "
        "there would destroy; choose another output"])
    assert train.read_text() == "label\tsentence\npos\ta happy dog\n"
    assert corpus.read_text() == "a happy dog\nthe cat sat\n"


@pytest.mark.parametrize("damage", ["cut short", "emptied", "bytes flipped"])
def test_a_damaged_index_is_named_set_aside_and_rebuilt_in_one_line(tiny_model, tmp_path,
                                                                    capsys, damage):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("a happy dog\nthe cat sat\nparis city\n")
    index = tmp_path / "my-index.npz"  # a name of the user's: known by its marker
    status, fresh, _ = _search(tiny_model, corpus, index, capsys)
    whole = index.read_bytes()
    assert status == 0 and file_kinds.SEARCH_INDEX.recognise(str(index))
    damaged = {"cut short": whole[:300], "emptied": b"",
               "bytes flipped": whole[:200] + bytes(byte ^ 0xFF for byte in whole[200:])}[damage]
    index.write_bytes(damaged)
    status, out, lines = _search(tiny_model, corpus, index, capsys)
    assert (status, out) == (0, fresh)
    assert len(lines) == 1 and lines[0].startswith(f"index {index} is damaged (")
    assert lines[0].endswith(f"); moved it to {index}.damaged and rebuilding it")
    assert (tmp_path / "my-index.npz.damaged").read_bytes() == damaged
    assert index.read_bytes() == whole  # rebuilt: the same embeddings, the same file


# -- a disk without room: said before the work, or one line when it fills while writing ------

def test_embed_says_before_the_work_that_the_disk_has_no_room(tiny_model, tmp_path,
                                                              monkeypatch, capsys):
    texts = tmp_path / "texts.txt"
    texts.write_text("a happy dog\n" * 10)
    monkeypatch.setattr(outputs.shutil, "disk_usage", lambda _: shutil._ntuple_diskusage(
        10_000, 9_000, 1_000))  # 1,000 bytes free
    output = tmp_path / "embeddings.npy"
    status = main(["embed", "--model", tiny_model, "--input", str(texts), "--output",
                   str(output), "--no-progress"])
    # 10 texts x 32 floats x 4 bytes + the .npy header's 128.
    assert (status, capsys.readouterr().err.strip().splitlines()) == (2, [
        f"bert-jax embed: error: --output {output}: needs 1,408 bytes but {tmp_path} has only "
        "1,000 free; free some space or choose another place"])
    assert sorted(os.listdir(tmp_path)) == ["texts.txt"]


def test_a_short_write_is_one_line_naming_the_bytes_and_leaves_nothing(tmp_path):
    """NumPy's `tofile` (under np.save) reports a full disk or a file-size limit as a short
    write with no errno; a real file-size limit (SIGXFSZ ignored, as Python does) makes one."""
    script = (
        "import resource, numpy as np\n"
        "from bert_jax.storage import files\n"
        "from bert_jax.errors import UserError\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.RLIM_INFINITY))\n"
        "try:\n"
        f"    with files.atomic_write({str(tmp_path / 'e.npy')!r}, 'wb') as file:\n"
        "        np.save(file, np.zeros((100, 32), np.float32))\n"
        "except UserError as error:\n"
        "    print(error)\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=120)
    assert result.stdout.strip() == (
        f"{tmp_path / 'e.npy'}: writing failed: the write stopped short, 992 of 3,200 array "
        "items written (the file system is full, or a quota or file-size limit was reached); "
        "nothing half-written was left")  # 4,096 bytes: a 128-byte header and 992 floats
    assert os.listdir(tmp_path) == []


def test_overwrite_replaces_only_a_directory_bert_jax_wrote(tiny_model, tmp_path, capsys):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.tex").write_text("years of work")
    assert main(["convert", tiny_model, str(mine), "--to", "hf", "--overwrite"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"bert-jax convert: error: {mine}: exists and holds none of the files bert-jax writes "
        "there (attention.npz, bert_config.json, config.json, model_config.json, modules.json, "
        "report.json, saved_model.pb), so --overwrite does not replace it; choose another output "
        "directory"]
    assert os.listdir(mine) == ["thesis.tex"]
    exported = tmp_path / "exported"
    assert main(["convert", tiny_model, str(exported), "--to", "hf"]) == 0
    assert main(["convert", tiny_model, str(exported), "--to", "hf", "--overwrite"]) == 0


def test_an_upload_that_fails_is_one_line_naming_the_path_and_bytes(monkeypatch):
    """A gs:// bucket deleted (or its permission taken away) while the command worked."""
    class Gone:
        def put_file(self, local, path):
            raise FileNotFoundError(errno.ENOENT, "bucket 'gone' does not exist")

    monkeypatch.setattr(files, "_filesystem", lambda path: Gone())
    with pytest.raises(UserError) as raised:
        files.write_text("gs://gone/predictions.jsonl", "abc\n")
    assert str(raised.value) == (
        "gs://gone/predictions.jsonl: uploading 4 bytes failed (FileNotFoundError: [Errno 2] "
        "bucket 'gone' does not exist); nothing was written there")


def test_a_damaged_index_that_cannot_be_moved_aside_is_one_line(tmp_path, monkeypatch):
    corpus, index = tmp_path / "corpus.txt", tmp_path / "corpus.txt.bert-jax-index.npz"
    corpus.write_text("a text\n")
    index.write_bytes(b"PK\x03\x04 cut")

    def read_only(*_):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    monkeypatch.setattr(search.os, "replace", read_only)
    with pytest.raises(UserError) as raised:
        search.corpus_embeddings(str(corpus), ["a text"], "model", None, str(index))
    assert str(raised.value).startswith(f"index {index} is damaged (")
    assert str(raised.value).endswith(") and cannot be moved aside (Read-only file system); "
                                      "remove it, or choose another --index")
