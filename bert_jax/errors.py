"""The one exception type for mistakes a user can make (bad path, bad text, bad config).

The command line catches it, prints its message without a traceback and exits non-zero;
anything else that escapes is a bug in bert-jax and keeps its traceback.
"""


class UserError(Exception):
    """A problem with the user's input; the message names the file or key and what was expected."""
