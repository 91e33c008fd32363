"""`bert-jax average RUN_DIR OUTPUT --last N`: a run's last N checkpoints as one model."""

HELP = "average a training run's last N checkpoints into one model directory"
DESCRIPTION = """\
Writes OUTPUT, a bert-jax model directory (as `bert-jax convert` writes one: model_config.json,
vocab.txt, tokenizer_config.json, params/, and a fine-tuning run's task.json), whose every
parameter is the element-wise mean of that parameter in the last N finished checkpoints of
the training run RUN_DIR (RUN_DIR/checkpoints/<step>/), summed in float32 and stored in the
checkpoints' dtype. ModernBERT's recipe ends with such a mean over the checkpoints of its
learning-rate decay; a run keeps its last `checkpoint.keep` checkpoints, so set that to at
least N (and `checkpoint.every_steps` to space them) before the decay starts.

OUTPUT is written to a temporary directory and renamed when complete; it must not exist or
be empty unless --overwrite, and it may not lie inside a training run. Either path may be
a gs:// URL. Every command that takes --model reads OUTPUT; `bert-jax convert OUTPUT DST
--to hf` exports it.

examples:
  bert-jax average runs/demo runs/demo_averaged --last 2
  bert-jax average gs://BUCKET/runs/base gs://BUCKET/models/base_averaged --last 8
"""


def add_arguments(parser) -> None:
    from bert_jax.commands import add_progress_argument

    parser.add_argument("run_directory", metavar="RUN_DIR",
                        help="training work directory (model_config.json, checkpoints/)")
    parser.add_argument("output", metavar="OUTPUT", help="model directory to write")
    parser.add_argument("--last", type=int, required=True, metavar="N",
                        help="how many of the run's latest checkpoints to average (at least 1)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace OUTPUT if it exists and is not empty")
    add_progress_argument(parser)


def run(args) -> int:
    from bert_jax.training.checkpoint_average import average_checkpoints

    steps = average_checkpoints(args.run_directory, args.output, args.last, args.overwrite,
                                progress=not args.no_progress)
    print(f"wrote the mean of {len(steps)} checkpoint(s) of {args.run_directory} (steps "
          f"{', '.join(map(str, steps))}) to {args.output}")
    return 0
