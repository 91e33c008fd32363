"""EuroBERT-210m (12 layers, hidden 768, SwiGLU 3,072, 12 heads, the 128,256-token Llama-3
vocabulary) pre-trained as the paper did (bert_jax/run_config/eurobert_recipe.py): masked LM
at 50%, then the annealing phase at 10% while the learning rate decays; AdamW 0.9/0.95.

  bert-jax pretrain --config eurobert_210m --workdir W \\
      --config.data.train_files=... --config.data.vocab_path=EUROBERT_DIR/tokenizer.json
"""

from bert_jax.run_config.eurobert_recipe import eurobert_210m_config

SUMMARY = "EuroBERT-210m: 4.8T tokens at 50% masking, then 200B annealing at 10%"


def get_config():
    return eurobert_210m_config()
