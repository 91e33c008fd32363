"""bert-jax: BERT in JAX, from a laptop CPU to a TPU pod."""

from bert_jax import quiet as _quiet

_quiet.install()
