"""The command line's help and flags: `--help` imports no JAX, TensorFlow or torch (it took 4-9 s
on a loaded machine), one spelling per flag, and errors that show the right usage."""

import subprocess
import sys

import pytest

from bert_jax import cli

HEAVY = ("jax", "tensorflow", "torch", "flax")
_HELP = """
import sys
from bert_jax import cli
try:
    cli.main(sys.argv[1:])
except SystemExit:
    pass
print("HEAVY", *sorted(name for name in {heavy!r} if name in sys.modules), file=sys.stderr)
"""


def _help_runs(argvs: list[list[str]]) -> dict[str, subprocess.CompletedProcess]:
    """Each argv in a fresh interpreter (the modules imported are per process), side by side."""
    processes = {" ".join(argv): subprocess.Popen(
        [sys.executable, "-c", _HELP.format(heavy=HEAVY), *argv], stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True) for argv in argvs}
    return {name: subprocess.CompletedProcess(process.args, process.wait(), *process.communicate())
            for name, process in processes.items()}


def test_no_help_imports_jax_tensorflow_or_torch():
    from bert_jax.tasks import finetuning_task_names

    argvs = [["--help"], *([name, "--help"] for name in cli.COMMANDS),
             *(["finetune", task, "--help"] for task in finetuning_task_names()),
             ["launch", "check", "--help"]]
    for name, result in _help_runs(argvs).items():
        assert "usage: bert-jax" in result.stdout, (name, result.stderr[-2000:])
        heavy = result.stderr.strip().splitlines()[-1]
        assert heavy == "HEAVY", f"`bert-jax {name}` imported {heavy.split()[1:]}"


def _help_text(capsys, argv) -> str:
    with pytest.raises(SystemExit):
        cli.main(argv)
    return " ".join(capsys.readouterr().out.split())  # argparse wraps lines


def test_help_lists_choices_and_defaults(capsys):
    evaluate = _help_text(capsys, ["evaluate", "--help"])
    assert ("the task the model was fine-tuned for: classify, regress, ner, qa, mlm, "
            "sentence-embedding, sts") in evaluate
    assert "examples per batch (default 64)" in evaluate
    assert "examples per batch (default 64)" in _help_text(capsys, ["predict", "--help"])
    tasks = _help_text(capsys, ["finetune", "--help"]).split("positional arguments:")[1]
    assert "ner a label for every word (named entities in CoNLL files). qa" in tasks
    assert "task seam" not in tasks and "`finetune" not in tasks  # the lines read plainly


@pytest.mark.parametrize("command", ["vocab", "create-data"])
def test_first_steps_show_examples(command, capsys):
    with pytest.raises(SystemExit):
        cli.main([command, "--help"])
    text = capsys.readouterr().out
    assert "example" in text and f"bert-jax {command} --" in text


@pytest.mark.parametrize("argv, usage", [
    (["predict", "--model", "m", "--input", "i", "--output", "o.jsonl", "--bogus"],
     "usage: bert-jax predict "),
    (["finetune", "classify", "--model", "m", "--train", "t", "--workdir", "w", "--bogus"],
     "usage: bert-jax finetune classify "),
    (["pretrain", "--config", "demo", "--bogus", "1"], "usage: bert-jax pretrain "),
])
def test_unknown_flag_prints_the_subcommands_usage(argv, usage, capsys):
    with pytest.raises(SystemExit) as exit_status:
        cli.main(argv)
    error = capsys.readouterr().err
    assert exit_status.value.code == 2
    assert error.startswith(usage), error
    assert "unrecognized arguments: --bogus" in error


def test_no_progress_is_one_flag_everywhere_with_quiet_as_its_alias():
    parser, _ = cli.build_parser()
    commands = ["pretrain", "create-data", "predict", "evaluate", "features", "embed", "search"]
    for command in commands:
        command_parser = cli.command_parser(parser, type("Args", (), {"command": command}))
        command_parser.format_help()  # its arguments are added when first used
        options = {option: action.dest for action in command_parser._actions
                   for option in action.option_strings}
        assert options.get("--no-progress") == options.get("--quiet") == "no_progress", command
    args, _ = parser.parse_known_args(["create-data", "--input", "x", "--vocab", "v",
                                       "--output-dir", "o", "--quiet"])
    assert args.no_progress


def test_features_and_embed_pool_by_the_same_names():
    from bert_jax.commands import POOLING

    parser, _ = cli.build_parser()
    choices = {}
    for command in ("features", "embed"):
        command_parser = cli.command_parser(parser, type("Args", (), {"command": command}))
        command_parser.format_help()
        (pool,) = [action for action in command_parser._actions
                   if "--pool" in action.option_strings]
        choices[command] = tuple(pool.choices)
    assert choices["embed"] == POOLING and choices["features"] == ("none", *POOLING)


def test_task_flags_keep_each_tasks_recipe():
    parser, _ = cli.build_parser()
    common = ["--model", "m", "--train", "t", "--workdir", "w"]

    def parsed(task, *extra):
        return parser.parse_known_args(["finetune", task, *common, *extra])[0]

    classify = parsed("classify")
    assert (classify.epochs, classify.learning_rate, classify.max_seq_len) == (3, 2e-5, 128)
    qa = parsed("qa")  # run_squad.py's recipe
    assert (qa.epochs, qa.learning_rate, qa.max_seq_len, qa.doc_stride) == (2, 3e-5, 384, 128)
    mlm = parsed("mlm")
    assert (mlm.epochs, mlm.learning_rate, mlm.masked_lm_prob) == (1, 5e-5, 0.15)
    assert parsed("ner", "--combine", "scalar-mix").combine == "scalar-mix"
    assert parsed("sentence-embedding", "--pooling", "max").pooling == "max"
    assert parsed("regress", "--text-columns", "5,6").text_columns == "5,6"
