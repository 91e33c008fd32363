"""bert-jax: BERT in JAX, from a laptop CPU to a TPU pod.

`bert_jax.load(path_or_name)` gives a model for notebooks (see bert_jax/api.py),
`bert_jax.continue_pretraining(model, texts, workdir, steps=N)` continues pre-training one on
raw text; the command line is `bert-jax` (bert_jax/cli.py).
"""

from bert_jax import quiet as _quiet

_quiet.install()


def load(path_or_name: str):
    """The model at `path_or_name` with its tokenizer: `.features`, `.fill_mask`,
    `.attention`, `.save` (see bert_jax/api.py). Imports JAX on first use, not before."""
    from bert_jax.api import load as load_model

    return load_model(path_or_name)


def continue_pretraining(model, texts, workdir: str, **options) -> dict:
    """Continues pre-training `model` on the text files `texts` in `workdir`, as
    `bert-jax pretrain --model M --text FILE --workdir W` does; returns eval_results.json's
    content (see bert_jax/tasks/continued_pretraining.py for the options: steps, tokens,
    config, overrides, ...). Imports JAX on first use, not before."""
    from bert_jax.tasks.continued_pretraining import continue_pretraining as run

    return run(model, [texts] if isinstance(texts, str) else list(texts), workdir, **options)
