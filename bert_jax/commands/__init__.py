"""One module per `bert-jax` subcommand (see bert_jax/cli.py); flags several share live here,
so that they are spelt and mean the same everywhere."""

# The pooling names of every command and API method that reduces token vectors to one:
# the [CLS] vector, or the mean or maximum over real (non-padding) tokens.
POOLING = ("mean", "cls", "max")


def add_progress_argument(parser) -> None:
    """`--no-progress` (alias `--quiet`, create-data's first spelling): no progress bar."""
    parser.add_argument("--no-progress", "--quiet", dest="no_progress", action="store_true",
                        help="no progress bar, e.g. for logs that are files (--quiet is the "
                             "same)")
