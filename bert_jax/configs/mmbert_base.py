"""mmBERT-base's published pre-training, its three phases (pretrain, extension, decay) as one
run in one work directory (bert_jax/run_config/mmbert_recipe.py cites every setting).

  bert-jax pretrain --config mmbert_base --workdir W --config.data.sources_root=gs://B/shards \\
      --config.data.vocab_path=tokenizer.json

reads each source's MLM-only shards (create-data --objective mlm) from
sources_root/NAME_LENGTH: high_resource_1024, high_resource_8192, mid_resource_8192,
low_resource_8192.
"""

SUMMARY = "mmBERT-base's three published phases (pretrain, extension, decay), one run"

from bert_jax.run_config import mmbert_recipe
from bert_jax.run_config.phase_recipe import phase_config

PHASES = mmbert_recipe.BASE.phase_names()


def get_config(phase: str):
    return phase_config(mmbert_recipe.BASE, phase)
