"""bert-jax: BERT in JAX, from a laptop CPU to a TPU pod.

`bert_jax.load(path_or_name)` gives a model for notebooks (see bert_jax/api.py); the
command line is `bert-jax` (bert_jax/cli.py).
"""

from bert_jax import quiet as _quiet

_quiet.install()


def load(path_or_name: str):
    """The model at `path_or_name` with its tokenizer: `.features`, `.fill_mask`,
    `.attention`, `.save` (see bert_jax/api.py). Imports JAX on first use, not before."""
    from bert_jax.api import load as load_model

    return load_model(path_or_name)
