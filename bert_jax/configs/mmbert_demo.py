"""mmBERT's three phases at laptop size (a tiny ModernBERT, minutes on a CPU): masking
30% -> 15% -> 5%, tau 0.7 -> 0.5 -> 0.3 over a tier of sources added in each phase, 64-
then 128-token rows with both RoPE bases raised to 160,000, the published optimizer, the
peak held and then a 1-sqrt decay to 0.02 x (bert_jax/run_config/mmbert_recipe.py).

  bert-jax pretrain --config mmbert_demo --workdir runs/mmbert_demo

reads vocab/vocab.txt and shards/NAME_LENGTH (create-data --objective mlm):
high_resource_64, high_resource_128, mid_resource_128, low_resource_128 (docs/pretraining.md
makes them from the demo corpus).
"""

SUMMARY = "mmBERT's three phases (masking, tau, languages added) at laptop size"

from bert_jax.run_config import mmbert_recipe
from bert_jax.run_config.phase_recipe import demo_config

PHASES = mmbert_recipe.DEMO.phase_names()


def get_config(phase: str):
    return demo_config(mmbert_recipe.DEMO, phase)
