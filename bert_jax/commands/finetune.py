"""`bert-jax finetune TASK`: fine-tune a BERT model for a task (classify, regress, ner, ...)."""

import argparse

HELP = "fine-tune a model for a task: classify, regress, ner, ... (see finetune TASK --help)"
DESCRIPTION = """\
Fine-tunes --model (a Hugging Face BERT directory, a bert-jax model directory, an original
BERT checkpoint, a training run or one of its checkpoints) for TASK on --train, evaluating
on --eval after every epoch. The recipe is the BERT paper's: AdamW with weight decay 0.01
(not on LayerNorm parameters or biases), linear warm-up over 10% of the steps then linear
decay, dropout 0.1, gradient norm clipped at 1. Batches are padded only to a bucketed
length (16, 32, 64, ... up to --max-seq-len), rows of similar length batched together.

WORKDIR receives checkpoints/ (at every evaluation; rerunning the command resumes
bit-identically), tensorboard/, best/ (the best model so far by the task's metric: a model
directory every command accepts, with its label names), eval_results.json (final and best
metrics, the run's settings) and eval_predictions.jsonl. Everything else is a
--config.KEY=VALUE override, e.g. --config.finetune.patience=2 (early stopping),
--config.finetune.eval_every_steps=500, --config.finetune.best_metric=f1,
--config.precision.dtype=bfloat16, --config.optimizer.warmup_steps ...; unknown keys fail.
--print-config prints every key, its value after the flags and overrides, and its one-line
description, and exits.

The model records the columns it read (`sentence`, not "every column but the label") and
reads every later file by them; give columns by index when the files name them otherwise
(SST-2's train.tsv says `sentence`, its dev.tsv `content`). Label cells are stripped;
labels that differ only by case or number spelling (pos/Pos, 1/1.0) are refused unless
--labels-as-written; an empty label or a repeated header row is an error unless
--skip-bad-rows.

examples:
  bert-jax finetune classify --model MODEL --train ../shared/data/tasks/sst2/train.tsv \\
      --eval ../shared/data/tasks/sst2/dev.tsv --text-columns 1 --label-column 0 \\
      --workdir runs/sst2
  bert-jax finetune regress --model MODEL --train sts-train.tsv --eval sts-dev.tsv \\
      --text-columns 5,6 --label-column 4 --workdir runs/stsb
"""
TAKES_OVERRIDES = True


def add_common_arguments(parser: argparse.ArgumentParser) -> None:
    from bert_jax.commands import add_progress_argument
    from bert_jax.training.finetune_settings import Settings  # no JAX: --help is instant

    defaults = Settings()
    parser.add_argument("--model", required=True,
                        help="model to start from: HF or bert-jax directory, TF checkpoint, "
                             "training run or checkpoints/<step>")
    parser.add_argument("--train", required=True, metavar="FILE", help="training data")
    parser.add_argument("--eval", default=None, metavar="FILE",
                        help="evaluation data (evaluated after every epoch; best/ kept by it)")
    parser.add_argument("--workdir", required=True, metavar="DIR", help="the run's directory")
    parser.add_argument("--epochs", type=int, default=defaults.epochs,
                        help=f"passes over --train (default {defaults.epochs})")
    parser.add_argument("--learning-rate", type=float, default=defaults.learning_rate,
                        help=f"peak learning rate (default {defaults.learning_rate})")
    parser.add_argument("--batch-size", type=int, default=defaults.batch_size,
                        help=f"global examples per step (default {defaults.batch_size})")
    parser.add_argument("--max-seq-len", type=int, default=defaults.max_seq_len,
                        help=f"longest input in tokens, longer ones truncated (default "
                             f"{defaults.max_seq_len})")
    parser.add_argument("--seed", type=int, default=defaults.seed,
                        help="head initialisation, dropout and data order (default 0)")
    add_progress_argument(parser)
    parser.add_argument("--print-config", action="store_true",
                        help="print every config key with its value (after the flags and "
                             "overrides) and its one-line description, then exit")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from bert_jax.cli import LazyParser
    from bert_jax.tasks import finetuning_task_names, summary

    # A task's flags come from bert_jax/tasks/arguments.py and its description from its
    # module's source: the task module (and JAX) is imported only to run it.
    tasks = parser.add_subparsers(dest="task", metavar="TASK", required=True,
                                  parser_class=LazyParser)
    for name in finetuning_task_names():
        tasks.add_parser(name, help=summary(name), populate=_task_arguments(name),
                         formatter_class=argparse.RawDescriptionHelpFormatter)


def _task_arguments(name: str):
    def populate(task_parser: argparse.ArgumentParser) -> None:
        from bert_jax.tasks import docstring
        from bert_jax.tasks.arguments import TASK_ARGUMENTS

        task_parser.description = docstring(name)
        add_common_arguments(task_parser)
        TASK_ARGUMENTS[name](task_parser)
    return populate


def outputs(args) -> list:
    """The work directory, checked before anything is read (bert_jax/storage/outputs.py)."""
    from bert_jax.storage.outputs import DIRECTORY, Output

    inputs = (("--model", args.model), ("--train", args.train), ("--eval", args.eval))
    return [] if args.print_config else [Output("--workdir", args.workdir, DIRECTORY,
                                                inputs=inputs)]


def run(args) -> int:
    from bert_jax.interop import model_source
    from bert_jax.tasks import task_module
    from bert_jax.training.finetune import Settings, finetune

    task_class = task_module(args.task).TASK
    source = model_source.resolve(args.model)  # once: config, vocabulary, weights known
    settings = Settings(epochs=args.epochs, learning_rate=args.learning_rate,
                        batch_size=args.batch_size, max_seq_len=args.max_seq_len, seed=args.seed)
    if args.print_config:  # the model's config only: no weights, no vocabulary read
        from bert_jax.run_config.docs import format_config
        from bert_jax.training.finetune import run_config_for

        config = run_config_for(source.config(), settings, args.overrides)
        print(format_config(config, defined_in=[run_config_for]))
        return 0
    task = task_class.from_arguments(args, source.tokenizer())
    results = finetune(task, source, args.train, args.eval, args.workdir, settings,
                       args.overrides, show_progress=not args.no_progress)
    if "exit_status" in results:  # stopped by Ctrl-C or SIGTERM: the run said how to resume
        return results["exit_status"]
    if "best" in results:
        best = results["best"]
        print(f"\nbest ({results['best_metric']}) at step {best['step']}: " + ", ".join(
            f"{name} {value:.4f}" for name, value in best["metrics"].items()))
        print(f"  model: {args.workdir}/best   results: {args.workdir}/eval_results.json")
    return 0
