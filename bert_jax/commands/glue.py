"""`bert-jax glue`: the GLUE dev table of a model, over a recipe's learning rates and seeds."""

HELP = "GLUE dev table of a model: every task, learning rate and seed of a recipe, resumable"
DESCRIPTION = """\
Fine-tunes --model (any source `finetune` takes) on each GLUE task of --data with a named
recipe's learning rates, epochs, batch size and seeds, scores each run's final model on dev
with the metric the papers report (CoLA MCC; SST-2, QNLI, RTE accuracy; MRPC and QQP F1 and
accuracy; STS-B Pearson and Spearman; MNLI matched and mismatched accuracy; scikit-learn and
scipy), aggregates the seeds as the recipe says (median or mean) at the learning rate whose
aggregate is best, and prints the table. WNLI (only when --tasks names it) is scored as the
BERT paper submitted it, the training set's majority label, and left out of the average.

--data is the GLUE download (DIR/CoLA/train.tsv, DIR/MRPC/dev.tsv, DIR/MNLI/dev_matched.tsv,
...), `tfds:glue` (prepared tfds builders; --tfds-data-dir), or a directory of Hugging Face
`datasets` files (DIR/cola/ as save_to_disk writes it, or the Hub's *.parquet files).

WORKDIR receives data/ (each task's rows, read once), runs/TASK/lr{LR}-seed{SEED}/ (each
run's directory, as `finetune` writes it, with glue_run.json: its dev metrics; weights are
dropped when it finishes unless --keep-checkpoints or another task starts from it),
glue.json ({task: metrics as fractions, "average": ...}), glue_runs.json (every run, the
learning rate kept, the recipe) and glue.md (the table and every run). Rerunning the command
continues where it stopped: a finished run is never repeated, an interrupted one resumes
from its last checkpoint (Ctrl-C saves one when the step ends and exits with status 130,
SIGTERM with 143). Recipes:
  bert              lr {2e-5, 3e-5, 5e-5}, 3 epochs, batch 32, 128 tokens, seeds 0 1 2, median
  modernbert-base   ModernBERT's Table 6 per task, batch 64, 256 tokens, betas (0.9, 0.98),
  modernbert-large  seeds 1618 42 6033, mean; RTE, MRPC, STS-B from the MNLI run
--learning-rates, --seeds, --epochs, --batch-size and --max-seq-len override the recipe for
every task; --config.KEY=VALUE overrides reach every run (as `finetune`'s).

examples:
  bert-jax glue --model MODEL --data glue_data --workdir runs/glue
  bert-jax glue --model MODEL --data glue_data --workdir runs/glue_small --tasks mrpc,stsb \\
      --learning-rates 5e-5 --seeds 0 --epochs 1 --compare bert-base
"""
import sys

TAKES_OVERRIDES = True


def _numbers(kind):
    def parse(text: str):
        import argparse

        try:
            return tuple(kind(part) for part in text.split(",") if part.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected comma-separated {kind.__name__}s, "
                                             f"got {text!r}") from None
    return parse


def add_arguments(parser) -> None:
    from bert_jax.commands import add_progress_argument

    parser.add_argument("--model", required=True,
                        help="model to fine-tune: HF or bert-jax directory, TF checkpoint, "
                             "training run or checkpoints/<step>")
    parser.add_argument("--data", required=True, metavar="DIR",
                        help="the GLUE download, tfds:glue, or Hugging Face datasets files")
    parser.add_argument("--workdir", required=True, metavar="DIR", help="the suite's directory")
    parser.add_argument("--tasks", default="cola,sst2,mrpc,stsb,qqp,mnli,qnli,rte",
                        help="comma-separated tasks of cola,sst2,mrpc,stsb,qqp,mnli,qnli,rte,"
                             "wnli (default: the eight papers average)")
    parser.add_argument("--recipe", default="bert",
                        help="bert, modernbert-base or modernbert-large (default bert)")
    parser.add_argument("--learning-rates", type=_numbers(float), default=None,
                        metavar="LR[,LR...]", help="the learning-rate grid, for every task")
    parser.add_argument("--seeds", type=_numbers(int), default=None, metavar="S[,S...]",
                        help="the seeds, for every task")
    parser.add_argument("--epochs", type=int, default=None, help="epochs, for every task")
    parser.add_argument("--batch-size", type=int, default=None,
                        help="examples per step, for every task")
    parser.add_argument("--max-seq-len", type=int, default=None,
                        help="longest input in tokens")
    parser.add_argument("--tfds-data-dir", default=None,
                        help="the TFDS data_dir holding prepared glue builders (tfds:glue)")
    parser.add_argument("--compare", action="append", default=[], metavar="NAME",
                        help="print a published row beside the model's: bert-base, "
                             "bert-large, roberta-base, roberta-large, modernbert-base, "
                             "modernbert-large, neobert, mosaicbert-base (repeatable)")
    parser.add_argument("--compare-run", action="append", default=[], metavar="WORKDIR",
                        help="print another suite's row (its glue.json) beside (repeatable)")
    parser.add_argument("--every-checkpoint", type=int, default=0, metavar="N",
                        help="--model is a pre-training run: run the suite on every Nth of its "
                             "saved checkpoints (and the last) into WORKDIR/steps/STEP, with a "
                             "table per step (glue_steps.md) and a PNG per task of score "
                             "against step and tokens seen (default 0: --model as it is)")
    parser.add_argument("--keep-checkpoints", action="store_true",
                        help="keep every finished run's checkpoints and best/ (hundreds of "
                             "MB each; default: only the MNLI runs other tasks start from)")
    add_progress_argument(parser)


def outputs(args) -> list:
    from bert_jax.storage.outputs import DIRECTORY, Output

    return [Output("--workdir", args.workdir, DIRECTORY)]


def run(args) -> int:
    from bert_jax.evaluation import glue, glue_recipes, glue_references, glue_table

    tasks = glue.check_tasks(args.tasks)
    for name in args.compare:  # before hours of work, not after
        glue_references.reference(name)
    for workdir in args.compare_run:
        glue_table.read_run(workdir)
    recipe = glue_recipes.recipe(args.recipe).overridden(
        args.learning_rates, args.seeds, args.epochs, args.batch_size, args.max_seq_len)
    suite = dict(overrides=args.overrides, tfds_data_dir=args.tfds_data_dir,
                 keep_checkpoints=args.keep_checkpoints, compare=args.compare,
                 compare_runs=args.compare_run, show_progress=not args.no_progress)
    try:
        return _run_suite(args, tasks, recipe, suite)
    except glue.Stopped as stopped:  # Ctrl-C or SIGTERM: the run's checkpoint is saved
        print(f"bert-jax glue: {stopped}", file=sys.stderr)
        return stopped.exit_status


def _run_suite(args, tasks, recipe, suite) -> int:
    from bert_jax.errors import UserError
    from bert_jax.evaluation import glue, glue_table

    if args.every_checkpoint:
        from bert_jax.evaluation import glue_steps

        if args.every_checkpoint < 0:
            raise UserError(f"--every-checkpoint {args.every_checkpoint}: expected N >= 1")
        rows = glue_steps.run_over_steps(
            args.model, args.data, args.workdir, tasks, recipe,
            glue_steps.chosen_steps(args.model, args.every_checkpoint), **suite)
        print("\n" + glue_steps.markdown(rows, tasks))
        print(f"  {args.workdir}/glue_steps.json  {args.workdir}/glue_steps.md  "
              f"{args.workdir}/glue_TASK.png")
        return 0
    table = glue.run_suite(args.model, args.data, args.workdir, tasks, recipe, **suite)
    print()
    print(glue_table.summary_table(args.model, table, tasks, args.compare, args.compare_run))
    print(f"\n  {args.workdir}/glue.json  {args.workdir}/glue.md")
    return 0
