"""Continued pre-training of a ModernBERT-family model (ModernBERT, Ettin, mmBERT) on your text:
ModernBERT's recipe (masked LM only at 30%, StableAdamW, warmup-stable-decay with a 1-sqrt
decay, packed rows).

  bert-jax pretrain --model answerdotai/ModernBERT-base --text my.txt --workdir W --tokens 1e8

`pretrain --model` takes the architecture and tokenizer from the model, makes the shards
from --text, and sizes num_train_steps, warm-up, decay and the evaluation and checkpoint
intervals from --steps or --tokens (bert_jax/tasks/continued_pretraining.py); any key
can still be set with --config.KEY=VALUE.
"""

from bert_jax.run_config.continued import continued_config

SUMMARY = "ModernBERT-family continued pre-training on your text: --model M --text FILE"


def get_config():
    config = continued_config("modernbert-base", seq_len=1024, masking_rate=0.3)  # phase 1's
    optimizer = config.optimizer
    optimizer.name = "stable_adamw"
    # Below ModernBERT-base's from-scratch peak (8e-4): a choice for a trained starting
    # point, not a published value; set --config.optimizer.learning_rate to change it.
    optimizer.learning_rate = 3e-4
    optimizer.beta1, optimizer.beta2, optimizer.epsilon = 0.9, 0.98, 1e-6
    optimizer.weight_decay, optimizer.decouple_learning_rate = 1e-5, True
    optimizer.clip_norm = 0.0  # StableAdamW clips each tensor's update itself
    optimizer.schedule, optimizer.decay_shape = "wsd", "1-sqrt"
    return config
