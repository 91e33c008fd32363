"""Continued pre-training of a BERT model (BERT, RoBERTa-style WordPiece models, MiniLM) on
your text: BERT's recipe (AdamW at 1e-4, weight decay 0.01, linear warm-up then linear decay,
15% masking), masked LM only on packed rows (the next-sentence head is not trained).

  bert-jax pretrain --model bert-base-uncased --text my.txt --workdir W --tokens 1e8

`pretrain --model` takes the architecture and vocabulary from the model, makes the shards
from --text, and sizes num_train_steps, warm-up and the evaluation and checkpoint intervals
from --steps or --tokens (bert_jax/tasks/continued_pretraining.py); any key can still be
set with --config.KEY=VALUE.
"""

from bert_jax.run_config.continued import continued_config

SUMMARY = "BERT continued pre-training on your text: pretrain --model M --text FILE"


def get_config():
    config = continued_config("base", seq_len=128, masking_rate=0.15)  # BERT's phase 1
    config.optimizer.learning_rate = 1e-4  # BERT's peak; AdamW, linear warm-up and decay
    return config
