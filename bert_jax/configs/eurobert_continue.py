"""Continued pre-training of a EuroBERT on your text (`bert-jax pretrain --model
EuroBERT/EuroBERT-210m --text my.txt --workdir W --tokens 1e8`, sized as
bert_jax/tasks/continued_pretraining.py says): EuroBERT's recipe, masked LM only on
packed rows with AdamW 0.9/0.95 and a linear warmup-stable-decay, at its annealing phase's
10% masking, the rate its own training ended on."""

from bert_jax.run_config.continued import continued_config
from bert_jax.run_config.eurobert_recipe import ANNEALING_RATE, ROW, eurobert_optimizer

SUMMARY = "EuroBERT continued pre-training on your text: --model M --text FILE"


def get_config():
    config = continued_config("eurobert-210m", seq_len=ROW, masking_rate=ANNEALING_RATE)
    # Below the from-scratch peak: a choice for a trained starting point, not a published
    # value; set --config.optimizer.learning_rate to change it.
    eurobert_optimizer(config, learning_rate=1e-4)
    return config
