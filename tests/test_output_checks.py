"""Every command checks each path it will write before any work, with one check
(bert_jax/storage/outputs.py, run by bert_jax/cli.py), and a failure while writing is still
one line (issue 42).

Old behaviour: `embed`, `predict`, `features` and `convert` into a read-only directory, a
`predict --output` that is a directory, a `--workdir` that is an existing file: tracebacks,
`predict` and `embed` only after computing everything. Every command here is given a model
(or input) that does not exist: the error must name the output, so the output was checked
before anything was read or loaded.
"""

import errno
import os

import pytest
from gcs_emulator import gcs_bucket, gcs_emulator  # noqa: F401  (fixtures)

from bert_jax.cli import main
from bert_jax.errors import UserError
from bert_jax.storage import files, outputs

MISSING = "/nonexistent/bert-jax-test"  # a model, input or config that is not there

# command -> (its arguments with OUT where the output goes, the flag, a file is written)
COMMANDS = {
    "embed": (["embed", "--model", MISSING, "--input", MISSING, "--output", "OUT"],
              "--output", True),
    "predict": (["predict", "--model", MISSING, "--input", MISSING, "--output", "OUT"],
                "--output", True),
    "features": (["features", "--model", MISSING, "--input", MISSING, "--output", "OUT"],
                 "--output", True),
    "evaluate": (["evaluate", "classify", "--model", MISSING, "--data", MISSING, "--output",
                  "OUT"], "--output", True),
    "search": (["search", "--model", MISSING, "--corpus", MISSING, "--query", "a", "--index",
                "OUT"], "--index", True),
    "aot": (["aot", "--config", MISSING, "--topology", "v4:2x2x1", "--json", "OUT"], "--json",
            True),
    "convert": (["convert", MISSING, "OUT", "--to", "hf"], "DST", False),
    "attention": (["attention", "--model", MISSING, "--text", "a", "--output", "OUT"],
                  "--output", False),
    "probe": (["probe", "--model", MISSING, "--treebank", MISSING, "--output", "OUT"],
              "--output", False),
    "vocab": (["vocab", "--input", MISSING, "--size", "50", "--output", "OUT"], "--output",
              False),
    "create-data": (["create-data", "--input", MISSING, "--vocab", MISSING, "--output-dir",
                     "OUT"], "--output-dir", False),
    "finetune": (["finetune", "classify", "--model", MISSING, "--train", MISSING, "--workdir",
                  "OUT"], "--workdir", False),
    "glue": (["glue", "--model", MISSING, "--data", MISSING, "--workdir", "OUT"], "--workdir",
             False),
    "pretrain": (["pretrain", "--config", MISSING, "--workdir", "OUT"], "--workdir", False),
    "examples": (["examples", "OUT"], "DIR", False),
}


def _error(command: str, output: str, capsys) -> str:
    arguments, _, _ = COMMANDS[command]
    assert main([output if argument == "OUT" else argument for argument in arguments]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize("command", COMMANDS)
def test_a_directory_for_a_file_or_a_file_for_a_directory_is_one_line_first(command, tmp_path,
                                                                          capsys):
    _, flag, writes_a_file = COMMANDS[command]
    directory, plain_file = tmp_path / "a_directory", tmp_path / "a_file"
    directory.mkdir()
    plain_file.write_text("not a directory\n")
    prefix = f"bert-jax {command}: error: {flag}"
    if writes_a_file:
        assert _error(command, str(directory), capsys) == (
            f"{prefix} {directory}: is a directory; expected the name of a file to write")
    else:
        assert _error(command, str(plain_file), capsys) == (
            f"{prefix} {plain_file}: is a file; expected a directory (or a name for a new one)")
    below_a_file = plain_file / "out"
    assert _error(command, str(below_a_file), capsys) == (
        f"{prefix} {below_a_file}: {plain_file} is a file, so no directory can be made there")
    assert sorted(os.listdir(tmp_path)) == ["a_directory", "a_file"]


def _unwritable_directory() -> str:
    """/sys: on Linux no one may create a file there, root included (root passes chmod)."""
    if not os.path.isdir("/sys"):
        pytest.skip("no /sys to stand for a directory that cannot be written")
    try:
        outputs.check_output(outputs.Output("--output", "/sys/bert-jax-probe"))
    except UserError:
        return "/sys"
    pytest.skip("/sys can be written here")


@pytest.mark.parametrize("command", COMMANDS)
def test_a_directory_that_cannot_be_written_is_one_line_first(command, capsys):
    unwritable = _unwritable_directory()
    _, flag, _ = COMMANDS[command]
    output = f"{unwritable}/bert-jax-output"
    assert _error(command, output, capsys) == (
        f"bert-jax {command}: error: {flag} {output}: cannot write in {unwritable}: permission "
        "denied; choose a writable place")


def test_a_read_only_file_system_is_named(tmp_path, monkeypatch, capsys):
    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(outputs.tempfile, "mkstemp", read_only)
    output = str(tmp_path / "deeper" / "embeddings.npy")
    assert _error("embed", output, capsys) == (
        f"bert-jax embed: error: --output {output}: cannot write in {tmp_path}: read-only file "
        "system; choose a writable place")


def test_gs_outputs_are_checked_too(gcs_bucket, capsys):
    files.write_text(f"{gcs_bucket}/exported/config.json", "{}")
    assert _error("predict", f"{gcs_bucket}/exported", capsys) == (
        f"bert-jax predict: error: --output {gcs_bucket}/exported: is a directory; expected the "
        "name of a file to write")
    assert _error("convert", f"{gcs_bucket}/exported/config.json", capsys) == (
        f"bert-jax convert: error: DST {gcs_bucket}/exported/config.json: is a file; expected a "
        "directory (or a name for a new one)")
    outputs.check_output(outputs.Output("--output", f"{gcs_bucket}/new/predictions.jsonl"))


@pytest.mark.parametrize("code, words", [(errno.ENOSPC, "no space left on device"),
                                         (errno.EROFS, "read-only file system")])
def test_a_failure_while_writing_is_one_line_and_leaves_nothing(tmp_path, code, words):
    from bert_jax.interop.model_writers import write_directory_atomically

    def fails(*_):
        raise OSError(code, os.strerror(code))

    path = str(tmp_path / "predictions.jsonl")
    with pytest.raises(UserError) as raised, files.atomic_write(path) as file:
        file.write("half")
        fails()
    assert str(raised.value) == f"{path}: writing failed: {words}; nothing half-written was left"
    destination = str(tmp_path / "exported")
    with pytest.raises(UserError) as raised:
        write_directory_atomically(destination, fails)
    assert str(raised.value) == (f"{destination}: writing failed: {words}; nothing was left "
                                 "behind")
    assert os.listdir(tmp_path) == []
