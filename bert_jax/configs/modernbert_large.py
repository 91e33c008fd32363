"""ModernBERT-large (28 layers, hidden 1,024, GeGLU 2,624, 16 heads, 395M parameters) pre-trained
as the paper did, in three phases of one run (bert_jax/run_config/modernbert_recipe.py):
peak learning rate 5e-4.

  bert-jax pretrain --config modernbert_large:1 --workdir W \\
      --config.data.train_files=... --config.data.vocab_path=tokenizer.json
  bert-jax pretrain --config modernbert_large:2 --workdir W ...   (then :3)
"""

SUMMARY = "ModernBERT-large's three phases (:1, :2, :3) as the paper ran them"

from bert_jax.run_config.modernbert_recipe import modernbert_config


def get_config(phase: str = "1"):
    return modernbert_config("large", phase, learning_rate=5e-4)
