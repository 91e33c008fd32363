"""`bert-jax`: the one command-line entry point; every subcommand lives in `bert_jax/commands/`.

Each command module defines `HELP` (one line), `add_arguments(parser)` and `run(args)`, and
imports its heavy dependencies (JAX, TensorFlow, torch) inside `run`. A command's
arguments are added only when that command is parsed or its help shown (`LazyParser`), so
`--help` imports no JAX and `bert-jax launch` never does (tests/test_cli_help.py checks
every command). A command that writes defines `outputs(args)`, the paths it will write,
checked before it runs (`bert_jax/storage/outputs.py`). A module that sets
`TAKES_OVERRIDES = True` receives unparsed
`--config.key=value` arguments in `args.overrides`; for every other command an unknown
argument is an error that prints that command's usage.
"""

import argparse
import importlib
import importlib.metadata
import platform
import sys

from bert_jax import compilation_cache, cpu_matmul, cpu_memory, ctrl_c
from bert_jax.errors import UserError

# name -> module, in the order `bert-jax --help` lists them.
COMMANDS = {
    "pretrain": "bert_jax.commands.pretrain",
    "create-data": "bert_jax.commands.create_data",
    "vocab": "bert_jax.commands.vocab",
    "convert": "bert_jax.commands.convert",
    "average": "bert_jax.commands.average",
    "finetune": "bert_jax.commands.finetune",
    "predict": "bert_jax.commands.predict",
    "evaluate": "bert_jax.commands.evaluate",
    "glue": "bert_jax.commands.glue",
    "features": "bert_jax.commands.features",
    "fill-mask": "bert_jax.commands.fill_mask",
    "embed": "bert_jax.commands.embed",
    "search": "bert_jax.commands.search",
    "retrieval": "bert_jax.commands.retrieval",
    "attention": "bert_jax.commands.attention",
    "probe": "bert_jax.commands.probe",
    "aot": "bert_jax.commands.aot",
    "launch": "bert_jax.commands.launch",
    "examples": "bert_jax.commands.examples",
}
# The commands that run a model's steps on this host: on a CPU they are re-executed with
# glibc's tunables that keep freed memory for the next step (bert_jax/cpu_memory.py), which a
# process reads only at start.
RUNS_MODEL_STEPS = ("pretrain", "finetune", "predict", "evaluate", "glue", "features",
                    "fill-mask", "embed", "search", "retrieval", "attention", "probe")


class LazyParser(argparse.ArgumentParser):
    """A subcommand parser whose arguments are added (by `populate(parser)`) only when it is
    used: parsed, or its usage or help printed. Building every command's arguments imported
    what their defaults come from (the fine-tuning settings, the tasks: JAX and Flax), which
    made every `--help` take seconds."""

    def __init__(self, *args, populate=None, **kwargs):
        super().__init__(*args, **kwargs)
        self._populate = populate

    def _ensure_populated(self) -> None:
        if self._populate is not None:
            populate, self._populate = self._populate, None
            populate(self)

    def parse_known_args(self, args=None, namespace=None):
        self._ensure_populated()
        return super().parse_known_args(args, namespace)

    def format_usage(self):
        self._ensure_populated()
        return super().format_usage()

    def format_help(self):
        self._ensure_populated()
        return super().format_help()


def version() -> str:
    """`bert-jax --version`: this package's and the numerics' versions (from the installed
    metadata: nothing imported)."""
    def installed(name: str) -> str:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            return "not installed"

    return (f"bert-jax {installed('bert-jax')} (jax {installed('jax')}, flax "
            f"{installed('flax')}, Python {platform.python_version()})")


def build_parser() -> tuple[argparse.ArgumentParser, dict]:
    parser = argparse.ArgumentParser(
        prog="bert-jax",
        description="Pre-train, convert and use BERT in JAX, from a laptop CPU to a TPU pod.")
    parser.add_argument("--version", action="version", version=version())
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True,
                                       parser_class=LazyParser)
    modules = {}
    for name, module_name in COMMANDS.items():
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as error:
            if error.name != module_name:
                raise
            continue  # a command still being built is simply not offered
        modules[name] = module
        subparsers.add_parser(
            name, help=module.HELP, description=getattr(module, "DESCRIPTION", module.HELP),
            formatter_class=argparse.RawDescriptionHelpFormatter,
            populate=module.add_arguments)
    return parser, modules


def command_parser(parser: argparse.ArgumentParser, args) -> argparse.ArgumentParser:
    """The innermost parser `args` went through (e.g. `finetune classify`'s), for its usage."""
    names = [args.command, getattr(args, "task", None), getattr(args, "action", None)]
    for name in names:
        actions = [action for action in parser._actions
                   if isinstance(action, argparse._SubParsersAction)]
        if not actions or name not in actions[0].choices:
            break
        parser = actions[0].choices[name]
    return parser


def _not_overrides(arguments: list[str]) -> list[str]:
    """The arguments that are neither `--config.KEY=VALUE` nor `--config.KEY VALUE`."""
    stray, index = [], 0
    while index < len(arguments):
        argument = arguments[index]
        if argument.startswith("--config."):
            index += 1 if "=" in argument else 2
        else:
            stray.append(argument)
            index += 1
    return stray


def main(argv: list[str] | None = None) -> int:
    """Runs one command; `argv` None means this process is the `bert-jax` program (Ctrl-C
    then handled as `ctrl_c` says, and an interrupted one exits at once), a list a caller in
    Python, whose own signal handling is left alone."""
    if argv is None:
        ctrl_c.install()
    parser, modules = build_parser()
    args, extra = parser.parse_known_args(argv)
    module = modules[args.command]
    stray = _not_overrides(extra) if getattr(module, "TAKES_OVERRIDES", False) else extra
    if stray:
        command_parser(parser, args).error(f"unrecognized arguments: {' '.join(stray)}")
    args.overrides = extra
    try:
        if argv is None and args.command in RUNS_MODEL_STEPS:
            # before JAX's backend starts, and inherited by a relaunch
            cpu_matmul.choose(args.command)
            cpu_memory.relaunch_tuned(sys.orig_argv)  # returns where it does not help
        compilation_cache.enable()
        if hasattr(module, "outputs"):  # every path it writes, checked before any work
            from bert_jax.storage.outputs import check_outputs

            check_outputs(module.outputs(args))
        status = module.run(args)
    except UserError as error:
        print(f"bert-jax {args.command}: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"bert-jax {args.command}: interrupted", file=sys.stderr)
        if argv is None:
            ctrl_c.exit_now(130)
        return 130
    return int(status or 0)


if __name__ == "__main__":
    sys.exit(main())
