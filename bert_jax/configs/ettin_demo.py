"""Ettin's three encoder phases at laptop size (a tiny ModernBERT, minutes on a CPU): 30%
masking at 64 tokens, then 30% at 128 with both RoPE bases at 160,000 and a 1-sqrt decay
to 0.5 x the peak, then the decay phase on its own data at 15% from half the peak to 0.04 x
(bert_jax/run_config/ettin_recipe.py).

  bert-jax pretrain --config ettin_demo --workdir runs/ettin_demo

reads vocab/vocab.txt and shards/NAME_LENGTH (create-data --objective mlm):
pretraining_64, extension_128, prolong_128 (docs/pretraining.md makes them from the demo
corpus).
"""

SUMMARY = "Ettin's three encoder phases (its decay on its own data) at laptop size"

from bert_jax.run_config import ettin_recipe
from bert_jax.run_config.phase_recipe import demo_config

PHASES = ettin_recipe.DEMO.phase_names()


def get_config(phase: str):
    return demo_config(ettin_recipe.DEMO, phase)
