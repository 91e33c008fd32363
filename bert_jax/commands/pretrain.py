"""`bert-jax pretrain`: pre-train BERT or ModernBERT from a run config, or continue a released
model on raw text (`--model M --text FILE`: bert_jax/tasks/continued_pretraining.py)."""

import argparse
import functools
import os
import sys

from bert_jax.configs import summaries

HELP = ("pre-train BERT or ModernBERT, or continue a released model on your text "
        "(--model M --text FILE), resuming where a run left off")
_CONFIG_LINES = "\n".join(f"  {name:<22}{summary}" for name, summary in summaries().items())
DESCRIPTION = f"""\
Continued pre-training in one command: --model M --text FILE [FILE ...] --workdir W
[--steps N | --tokens N]. M is a transformers directory, a Hub name, a bert-jax model or
training work directory (BERT or ModernBERT family); it brings its architecture and
tokenizer, and its family the recipe (bert_continue: 15% masking, AdamW, linear decay;
modernbert_continue: 30% masking, StableAdamW, warmup-stable-decay). The text (create-data's
formats: --format) becomes masked-LM-only packed shards of that tokenizer in W/data with a
held-out split, made once and reused on a rerun. The steps come from --steps, --tokens
(steps of batch_size x data.seq_len tokens) or one pass over the text; warm-up, decay,
evaluations and checkpoints are sized from them. Every held-out evaluation's masked-LM
loss goes to W/eval_results.json; `bert-jax convert W OUT --to hf` exports the result.
--config NAME picks another recipe of the family, --config.KEY=VALUE changes any key.

Otherwise, pre-trains on shards (see `bert-jax create-data`) with the run config
configs/NAME.py (or configs/NAME.py:ARG), changed by any number of --config.KEY=VALUE
overrides; an unknown key is an error that names the closest keys. --print-config prints
every key, its value after the overrides and its one-line description, and exits. The
shipped configs, found by name from any directory (--config laptop):
{_CONFIG_LINES}
The demo configs build their corpus, tokenizer and shards in data.demo_dir, unless
data.train_files is set (your shards, with data.vocab_path or init_from's vocabulary).

The objective (--config.objective): mlm_nsp, BERT's masked LM + next-sentence prediction on
create-data's pre-masked pairs, or mlm, masked LM only (ModernBERT's) on create-data
--objective mlm's rows, whose masks are drawn as they are read at data.masking_rate (or
the steps of data.masking_rate_schedule); it exports as a *ForMaskedLM.

Where the starting state comes from, in this order:
  1. resume: WORKDIR/checkpoints has a checkpoint -> parameters, optimizer state, step,
     RNG and data position are restored; the continued run is bit-identical to one that
     was never interrupted. (Re-running a finished run says so and exits.)
  2. --model, or --config.init_from=PATH: a Hugging Face directory or Hub name (BERT or
     ModernBERT), a bert-jax model directory or another training work directory -> its
     parameters, a fresh optimizer from step 0 (continued pre-training). Missing
     pre-training heads start fresh.
  3. from scratch: parameters drawn from --config.seed.
Phase 2 of a two-phase run uses phase 1's WORKDIR with a config whose data or seq_len
differ: the step count and schedule continue, the new data starts at its beginning. A
config file with PHASES (and get_config(phase)) runs every phase in turn in one WORKDIR,
passing over the phases already trained (FILE:PHASE runs one alone).

Data mixtures: data.sources (name -> files, weight, repeat) instead of data.train_files,
and data.mixture_tau (p_i proportional to rows_i^tau); each source's position is in the
checkpoint, and the shares drawn go to TensorBoard (docs/pretraining.md).

WORKDIR receives model_config.json, the vocabulary (vocab.txt, sentencepiece.model or
tokenizer.json, with its tokenizer_config.json), run_config.json, checkpoints/<step>/
{{params,opt_state,meta}} (orbax; saved every checkpoint.every_steps in the background,
the last checkpoint.keep kept, and on SIGTERM or a first Ctrl-C before exiting; a second
Ctrl-C exits at once) and tensorboard/. One run at a time: a second run on the same
WORKDIR is refused, naming the first (a lock file; on gs://, a lease object).
With --no-progress, one line per log_every_steps carries the training loss instead.

A GLUE suite at checkpoints (checkpoint_suite.*: tasks, data, recipe, learning_rates,
seeds, epochs, batch_size, max_seq_len, every): the checkpoints it needs (every Nth saved
one and the last) are kept from checkpoint.keep's deletion, and when training has finished
the suite runs over them into WORKDIR/glue/ as `bert-jax glue --every-checkpoint` writes one
(steps/STEP/, glue_steps.md, a PNG per task); a rerun repeats no finished fine-tuning run.

Several processes (multi-host): pass --coordinator-address/--num-processes/--process-id
to every process, or nothing on a Cloud TPU VM (peers are discovered). Each process reads
its own share of the shard files. (--text makes its shards on one machine: on several,
make them with create-data and use --config with init_from.)

example:
  bert-jax pretrain --model answerdotai/ModernBERT-base --text my.txt --workdir runs/mine \\
      --tokens 100000000
  bert-jax pretrain --config configs/demo.py --workdir runs/demo
  bert-jax pretrain --config configs/bert_base.py --workdir gs://bucket/base \\
      --config.data.train_files='gs://bucket/shards/train/*.tfrecord' \\
      --config.data.vocab_path=vocab.txt
"""
TAKES_OVERRIDES = True


def _count(text: str) -> int:
    """A positive whole number, also written as 1e8."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if value < 1 or value != int(value):
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {text}")
    return int(value)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from bert_jax.commands import add_progress_argument

    parser.add_argument("--config", default=None, metavar="FILE[:ARG]",
                        help="run config file or shipped config name, e.g. demo, laptop, "
                             "configs/demo.py or configs/bert_large_two_phase.py:2; a file "
                             "with PHASES runs every phase in turn, FILE:PHASE one "
                             "(docs/pretraining.md) (with --model: default the family's "
                             "bert_continue or modernbert_continue)")
    parser.add_argument("--model", default=None, metavar="SOURCE",
                        help="continue pre-training this model (transformers directory, Hub "
                             "name, bert-jax model or run directory) on --text")
    parser.add_argument("--text", nargs="+", default=None, metavar="FILE",
                        help="with --model: raw text files or globs (create-data's formats)")
    parser.add_argument("--format", choices=("bert", "prose"), default="bert",
                        dest="input_format",
                        help="--text's format: bert, one sentence a line and a blank line "
                             "between documents; prose, paragraphs (default: bert)")
    length = parser.add_mutually_exclusive_group()
    length.add_argument("--steps", type=_count, default=None, metavar="N",
                        help="with --model: optimizer steps (default: one pass over the text)")
    length.add_argument("--tokens", type=_count, default=None, metavar="N",
                        help="with --model: tokens to train on (steps of batch_size x "
                             "data.seq_len), e.g. 1e8")
    parser.add_argument("--workdir", default=None,
                        help="training work directory (local or gs://); default runs/NAME "
                             "for configs/NAME.py (required with --model)")
    parser.add_argument("--coordinator-address", default=None, metavar="HOST:PORT",
                        help="multi-process: address of process 0's coordinator service")
    parser.add_argument("--num-processes", type=int, default=None, metavar="N",
                        help="multi-process: how many processes take part")
    parser.add_argument("--process-id", type=int, default=None, metavar="I",
                        help="multi-process: this process's index in [0, N)")
    add_progress_argument(parser)
    parser.add_argument("--print-config", action="store_true",
                        help="print every config key with its value (after the overrides) and "
                             "its one-line description, then exit")


def check_arguments(args) -> None:
    """The flags' combinations: --model with --text and --workdir, or --config."""
    from bert_jax.errors import UserError

    if args.model is None:
        given = [flag for flag, value in (("--text", args.text), ("--steps", args.steps),
                                          ("--tokens", args.tokens)) if value is not None]
        if given:
            raise UserError(f"{', '.join(given)}: only with --model (continued pre-training "
                            "of that model on --text)")
        if args.config is None:
            raise UserError("give --config NAME (a run config: pre-training on shards), or "
                            "--model M --text FILE --workdir W (continued pre-training)")
        return
    if not args.text and not args.print_config:
        raise UserError(f"--model {args.model}: give --text FILE (the text to continue "
                        "pre-training on); to use shards of your own, run --config NAME "
                        f"--config.init_from={args.model}")
    if args.workdir is None and not args.print_config:
        raise UserError("--model: give --workdir W (where the shards, checkpoints and "
                        "eval_results.json go)")


def default_workdir(config_path: str) -> str:
    name = os.path.splitext(os.path.basename(config_path.partition(":")[0]))[0]
    suffix = config_path.partition(":")[2]
    return os.path.join("runs", name + (f"_{suffix}" if suffix else ""))


def print_config(config_spec: str, overrides: list[str]) -> None:
    """`--print-config`: the resolved config, one `key = value  # description` a line."""
    from bert_jax.run_config.docs import format_config
    from bert_jax.run_config import load_run_config, resolve_config_file

    config = load_run_config(config_spec, overrides)
    print(format_config(config, resolve_config_file(config_spec.partition(":")[0])))


def warmup_warning(run_config) -> str | None:
    """A warning when the learning rate would still be warming up when the run ends."""
    warmup, steps = run_config.optimizer.warmup_steps, run_config.num_train_steps
    if warmup <= steps:
        return None
    return (f"warning: optimizer.warmup_steps {warmup} is longer than the run "
            f"(num_train_steps {steps}): the learning rate ends at {steps / warmup:.0%} of its "
            f"peak {run_config.optimizer.learning_rate:g}; for a short run, set "
            f"--config.optimizer.warmup_steps={max(1, steps // 10)} (10% of it) as well")


def outputs(args) -> list:
    """The work directory, checked before anything is read (bert_jax/storage/outputs.py)."""
    from bert_jax.storage.outputs import DIRECTORY, Output

    check_arguments(args)
    if args.print_config:
        return []
    return [Output("--workdir", args.workdir or default_workdir(args.config), DIRECTORY)]


def print_recipe(args) -> None:
    """`--model M --print-config`: the recipe with M's architecture and the overrides (the
    run's length is sized from --steps or --tokens and the shards when it starts)."""
    from bert_jax.interop import model_source
    from bert_jax.run_config.docs import format_config
    from bert_jax.run_config import resolve_config_file
    from bert_jax.tasks.continued_pretraining import RECIPES, recipe_config

    source = model_source.resolve(args.model)
    config, _ = recipe_config(source, args.config, args.overrides)
    spec = args.config or RECIPES[config.model.family]
    print(format_config(config, resolve_config_file(spec.partition(":")[0])))


def continue_model(args, say) -> int:
    """`--model M --text FILE`: continued pre-training, as the Python call runs it."""
    from bert_jax.commands.create_data import warn_if_prose
    from bert_jax.tasks.pretraining import MaskedLMPretrainingTask, format_evaluations
    from bert_jax.tasks.continued_pretraining import EVAL_RESULTS, continue_pretraining

    warn_if_prose(args.text, args.input_format)
    results = continue_pretraining(
        args.model, args.text, args.workdir, steps=args.steps, tokens=args.tokens,
        config=args.config, overrides=args.overrides, input_format=args.input_format,
        show_progress=not args.no_progress, log=say)
    if results["evaluations"]:
        say("\nheld-out masked-LM loss:\n" + format_evaluations(
            [(entry["step"], entry) for entry in results["evaluations"]],
            MaskedLMPretrainingTask.evaluated))
    if results["preempted"]:
        return results["exit_status"]
    say(f"\ndone: step {results['step']} of {results['num_train_steps']}"
        f"\n  held-out results: {os.path.join(args.workdir, EVAL_RESULTS)}"
        f"\n  export to Hugging Face: bert-jax convert {args.workdir} {args.workdir}_hf --to hf")
    return 0


def run(args: argparse.Namespace) -> int:
    if args.print_config:
        if args.model:
            print_recipe(args)
        else:
            print_config(args.config, args.overrides)
        return 0
    from bert_jax.training import distributed

    distributed.initialize(args.coordinator_address, args.num_processes, args.process_id)
    import jax

    from bert_jax.run_config import checkpoint_suite, load_run_config
    from bert_jax.tasks import pretraining_data
    from bert_jax.tasks import phases
    from bert_jax.tasks.pretraining import PretrainingTask, format_evaluations
    from bert_jax.training import trainer

    chief = jax.process_index() == 0
    # Flushed line by line: on a pod the output is a log file that `launch logs` follows.
    say = functools.partial(print, flush=True) if chief else (lambda *_, **__: None)
    if args.model:
        return continue_model(args, say)
    workdir = args.workdir or default_workdir(args.config)
    if phases.phases_of(args.config):  # every phase in turn (tasks/phases.py)
        loaded = phases.load_phases(args.config, args.overrides)
        suite_config = loaded[-1][1]
        checkpoint_suite.check_data(suite_config, args.config)  # before hours, not after
        result = phases.run_phases(args.config, loaded, workdir,
                                   show_progress=not args.no_progress, log=say)
        total = list(result["phases"].values())[-1]
    else:
        run_config = suite_config = load_run_config(args.config, args.overrides)
        checkpoint_suite.check_data(run_config, args.config)
        warning = warmup_warning(run_config)
        if warning:
            say(warning, file=sys.stderr)
        pretraining = pretraining_data.prepare_run(run_config, say)
        result = trainer.train(run_config, workdir, task=pretraining.task,
                               dataset_factory=pretraining.dataset_factory,
                               init_weights=pretraining.init_weights,
                               show_progress=not args.no_progress, log=say)
        total = run_config.num_train_steps
    if result["evaluations"]:
        evaluated = [name for name in PretrainingTask.evaluated
                     if name in result["evaluations"][0][1]]
        say("\nevaluation on held-out shards:\n" + format_evaluations(
            result["evaluations"], evaluated))
    if result["preempted"]:
        return result["exit_status"]  # 128 + the signal (Ctrl-C 130, SIGTERM 143): unfinished
    if "data_proportions" in result:
        say("rows drawn from each data source: " + ", ".join(
            f"{name} {share:.1%}" for name, share in result["data_proportions"].items()))
    suite_status = run_checkpoint_suite(suite_config, workdir, not args.no_progress, say)
    if suite_status:
        return suite_status  # Ctrl-C or SIGTERM in a suite's run, its checkpoint saved
    say(f"\ndone: step {result['step']} of {total}"
        f"\n  checkpoints: {os.path.join(workdir, 'checkpoints')}"
        f"\n  TensorBoard: tensorboard --logdir {os.path.join(workdir, 'tensorboard')}"
        f"\n  export to Hugging Face: bert-jax convert {workdir} {workdir}_hf --to hf"
        "\n(exiting: JAX and TensorFlow release their threads, which can take some seconds)")
    return 0


def run_checkpoint_suite(run_config, workdir: str, show_progress: bool, say) -> int | None:
    """The GLUE suite the config names at the run's kept checkpoints (checkpoint_suite.*);
    the exit status when a signal stopped one of its runs, else None."""
    import jax

    from bert_jax.evaluation import glue, glue_steps
    from bert_jax.run_config import checkpoint_suite

    tasks = checkpoint_suite.tasks(run_config)
    if not tasks:
        return None
    suite = os.path.join(workdir, glue_steps.SUITE_DIRECTORY)
    if jax.process_count() > 1:  # fine-tuning would wait on processes that have exited
        say(f"checkpoint_suite: run on one host: bert-jax glue --model {workdir} --data "
            f"{run_config.checkpoint_suite.data} --workdir {suite} --tasks {','.join(tasks)} "
            "--every-checkpoint 1")
        return None
    say(f"\nGLUE at the kept checkpoints ({','.join(tasks)}) into {suite}")
    try:
        rows = glue_steps.run_config_suite(run_config, workdir, show_progress, say)
    except glue.Stopped as stopped:
        say(f"bert-jax pretrain: {stopped}", file=sys.stderr)
        return stopped.exit_status
    say("\n" + glue_steps.markdown(rows, tasks) + f"  {suite}/glue_steps.json  "
        f"{suite}/glue_steps.md  {suite}/glue_TASK.png")
    return None
