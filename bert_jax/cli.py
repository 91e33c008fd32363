"""`bert-jax`: the one command-line entry point; every subcommand lives in `bert_jax/commands/`.

Each command module defines `HELP` (one line), `add_arguments(parser)` and `run(args)`, and
imports its heavy dependencies (JAX, TensorFlow, torch) inside `run`, so that `--help` is
instant and `bert-jax launch` never imports JAX. A module that sets
`TAKES_OVERRIDES = True` receives unparsed `--config.key=value` arguments in
`args.overrides`; for every other command an unknown argument is an error.
"""

import argparse
import importlib
import sys

from bert_jax import compilation_cache
from bert_jax.errors import UserError

# name -> module, in the order `bert-jax --help` lists them.
COMMANDS = {
    "pretrain": "bert_jax.commands.pretrain",
    "create-data": "bert_jax.commands.create_data",
    "vocab": "bert_jax.commands.vocab",
    "convert": "bert_jax.commands.convert",
    "finetune": "bert_jax.commands.finetune",
    "predict": "bert_jax.commands.predict",
    "evaluate": "bert_jax.commands.evaluate",
    "features": "bert_jax.commands.features",
    "fill-mask": "bert_jax.commands.fill_mask",
    "embed": "bert_jax.commands.embed",
    "search": "bert_jax.commands.search",
    "attention": "bert_jax.commands.attention",
    "probe": "bert_jax.commands.probe",
    "aot": "bert_jax.commands.aot",
    "launch": "bert_jax.commands.launch",
}


def build_parser() -> tuple[argparse.ArgumentParser, dict]:
    parser = argparse.ArgumentParser(
        prog="bert-jax",
        description="Pre-train, convert and use BERT in JAX, from a laptop CPU to a TPU pod.")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    modules = {}
    for name, module_name in COMMANDS.items():
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as error:
            if error.name != module_name:
                raise
            continue  # a command still being built is simply not offered
        modules[name] = module
        command_parser = subparsers.add_parser(
            name, help=module.HELP, description=getattr(module, "DESCRIPTION", module.HELP),
            formatter_class=argparse.RawDescriptionHelpFormatter)
        module.add_arguments(command_parser)
    return parser, modules


def main(argv: list[str] | None = None) -> int:
    parser, modules = build_parser()
    args, extra = parser.parse_known_args(argv)
    module = modules[args.command]
    if getattr(module, "TAKES_OVERRIDES", False):
        args.overrides = extra
    elif extra:
        parser.error(f"unrecognized arguments for {args.command}: {' '.join(extra)}")
    compilation_cache.enable()
    try:
        status = module.run(args)
    except UserError as error:
        print(f"bert-jax {args.command}: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"bert-jax {args.command}: interrupted", file=sys.stderr)
        return 130
    return int(status or 0)


if __name__ == "__main__":
    sys.exit(main())
