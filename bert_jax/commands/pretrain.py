"""`bert-jax pretrain`: pre-train (or continue pre-training) BERT from a run config."""

import argparse
import functools
import os
import sys

HELP = ("pre-train BERT (MLM + NSP, or MLM only) from a run config, resuming where a run "
        "left off")
DESCRIPTION = """\
Pre-trains BERT on pre-masked shards (see `bert-jax create-data`) with the run config
configs/NAME.py (or configs/NAME.py:ARG), changed by any number of --config.KEY=VALUE
overrides; an unknown key is an error that names the closest keys. The shipped configs
(demo, laptop, bert_base, bert_large, bert_large_two_phase) are found by name from any
directory (--config laptop). --print-config prints every key, its value after the
overrides and its one-line description, and exits.

The objective (--config.objective): mlm_nsp, BERT's masked LM + next-sentence prediction on
create-data's pre-masked pairs, or mlm, masked LM only (ModernBERT's) on create-data
--objective mlm's rows, whose masks are drawn as they are read at data.masking_rate (or
the steps of data.masking_rate_schedule); it exports as a *ForMaskedLM.

Where the starting state comes from, in this order:
  1. resume: WORKDIR/checkpoints has a checkpoint -> parameters, optimizer state, step,
     RNG and data position are restored; the continued run is bit-identical to one that
     was never interrupted. (Re-running a finished run says so and exits.)
  2. --config.init_from=PATH: a Hugging Face BERT directory, a bert-jax model directory or
     another training work directory -> its parameters, a fresh optimizer from step 0
     (continued pre-training). Missing pre-training heads start fresh.
  3. from scratch: parameters drawn from --config.seed.
Phase 2 of a two-phase run uses phase 1's WORKDIR with a config whose data or seq_len
differ: the step count and schedule continue, the new data starts at its beginning.

WORKDIR receives model_config.json, the vocabulary (vocab.txt, sentencepiece.model or
tokenizer.json, with its tokenizer_config.json), run_config.json, checkpoints/<step>/
{params,opt_state,meta} (orbax; saved every checkpoint.every_steps in the background,
the last checkpoint.keep kept, and on SIGTERM or a first Ctrl-C before exiting; a second
Ctrl-C exits at once) and tensorboard/. One run at a time: a second run on the same
WORKDIR is refused, naming the first (a lock file; on gs://, a lease object).
With --no-progress, one line per log_every_steps carries the training loss instead.

Several processes (multi-host): pass --coordinator-address/--num-processes/--process-id
to every process, or nothing on a Cloud TPU VM (peers are discovered). Each process reads
its own share of the shard files.

example:
  bert-jax pretrain --config configs/demo.py --workdir runs/demo
  bert-jax pretrain --config configs/bert_base.py --workdir gs://bucket/base \\
      --config.data.train_files='gs://bucket/shards/train/*.tfrecord' \\
      --config.data.vocab_path=vocab.txt
"""
TAKES_OVERRIDES = True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from bert_jax.commands import add_progress_argument

    parser.add_argument("--config", required=True, metavar="FILE[:ARG]",
                        help="run config file or shipped config name, e.g. demo, laptop, "
                             "configs/demo.py or configs/bert_large_two_phase.py:2")
    parser.add_argument("--workdir", default=None,
                        help="training work directory (local or gs://); default runs/NAME "
                             "for configs/NAME.py")
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

    workdir = args.workdir or default_workdir(args.config)
    return [] if args.print_config else [Output("--workdir", workdir, DIRECTORY)]


def run(args: argparse.Namespace) -> int:
    if args.print_config:
        print_config(args.config, args.overrides)
        return 0
    from bert_jax.training import distributed

    distributed.initialize(args.coordinator_address, args.num_processes, args.process_id)
    import jax

    from bert_jax.run_config import load_run_config
    from bert_jax.tasks import pretraining_data
    from bert_jax.tasks.pretraining import format_evaluations
    from bert_jax.training import trainer

    run_config = load_run_config(args.config, args.overrides)
    workdir = args.workdir or default_workdir(args.config)
    chief = jax.process_index() == 0
    # Flushed line by line: on a pod the output is a log file that `launch logs` follows.
    say = functools.partial(print, flush=True) if chief else (lambda *_, **__: None)
    warning = warmup_warning(run_config)
    if warning:
        say(warning, file=sys.stderr)
    pretraining = pretraining_data.prepare_run(run_config, say)
    result = trainer.train(run_config, workdir, task=pretraining.task,
                           dataset_factory=pretraining.dataset_factory,
                           init_weights=pretraining.init_weights,
                           show_progress=not args.no_progress, log=say)
    if result["evaluations"]:
        say("\nevaluation on held-out shards:\n" + format_evaluations(
            result["evaluations"], pretraining.task.evaluated))
    if result["preempted"]:
        return result["exit_status"]  # 128 + the signal (Ctrl-C 130, SIGTERM 143): unfinished
    say(f"\ndone: step {result['step']} of {run_config.num_train_steps}"
        f"\n  checkpoints: {os.path.join(workdir, 'checkpoints')}"
        f"\n  TensorBoard: tensorboard --logdir {os.path.join(workdir, 'tensorboard')}"
        f"\n  export to Hugging Face: bert-jax convert {workdir} {workdir}_hf --to hf"
        "\n(exiting: JAX and TensorFlow release their threads, which can take some seconds)")
    return 0
