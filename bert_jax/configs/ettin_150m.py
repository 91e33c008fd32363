"""Ettin-150M (encoder)'s published pre-training, its three phases (pretrain, extension, decay) as one
run in one work directory (bert_jax/run_config/ettin_recipe.py cites every setting).

  bert-jax pretrain --config ettin_150m --workdir W --config.data.sources_root=gs://B/shards \\
      --config.data.vocab_path=tokenizer.json

reads each source's MLM-only shards (create-data --objective mlm) from
sources_root/NAME_LENGTH: pretraining_1024, extension_8192, prolong_8192.
"""

SUMMARY = "Ettin-150M (encoder)'s three published phases (pretrain, extension, decay), one run"

from bert_jax.run_config import ettin_recipe
from bert_jax.run_config.phase_recipe import phase_config

PHASES = ettin_recipe.BASE.phase_names()


def get_config(phase: str):
    return phase_config(ettin_recipe.BASE, phase)
