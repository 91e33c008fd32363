"""ModernBERT-base (22 layers, hidden 768, GeGLU 1,152, 12 heads, 149M parameters with its
50,368-token vocabulary) pre-trained as the paper did, in three phases of one run
(bert_jax/run_config/modernbert_recipe.py): peak learning rate 8e-4.

  bert-jax pretrain --config modernbert_base:1 --workdir W \\
      --config.data.train_files=... --config.data.vocab_path=tokenizer.json
  bert-jax pretrain --config modernbert_base:2 --workdir W --config.data.train_files=...(8,192)
  bert-jax pretrain --config modernbert_base:3 --workdir W --config.data.train_files=...(8,192)
"""

SUMMARY = "ModernBERT-base's three phases (:1, :2, :3) as the paper ran them"

from bert_jax.run_config.modernbert_recipe import modernbert_config


def get_config(phase: str = "1"):
    return modernbert_config("base", phase, learning_rate=8e-4)
