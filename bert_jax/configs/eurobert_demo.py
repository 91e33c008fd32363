"""A tiny EuroBERT pre-trained on the standard library's docstrings in minutes on a CPU:
EuroBERT's recipe (masked LM only at 50%, AdamW with betas 0.9/0.95, eps 1e-5 and weight
decay 0.1, warmup-stable-decay with a linear decay, packed rows, a byte-level BPE
tokenizer.json) at laptop size, with grouped-query attention (4 query heads on 2 key/value
heads).

  bert-jax pretrain --config eurobert_demo

Builds its own byte-level BPE and MLM-only shards in runs/eurobert_demo_data on first use.
"""

from bert_jax.run_config import base_config
from bert_jax.run_config.eurobert_recipe import eurobert_optimizer

SUMMARY = "a tiny EuroBERT (grouped-query) on the standard library's docstrings, minutes on a CPU"


def get_config():
    config = base_config("eurobert-tiny")  # 3 layers, hidden 128, 4 query / 2 key-value heads
    config.objective = "mlm"
    config.data.demo_dir = "runs/eurobert_demo_data"  # tokenizer.json + shards built here
    config.data.demo_vocab_type = "bpe"
    config.data.demo_vocab_size = 4000
    config.data.seq_len = 128
    config.data.masking_rate = 0.5  # EuroBERT's pre-training rate
    config.data.shuffle_buffer = 20_000  # all of it: the modules come in alphabetical order
    config.batch_size = 32
    config.num_train_steps = 1000
    eurobert_optimizer(config, learning_rate=2e-3)  # a tiny model takes large steps
    config.optimizer.warmup_steps = 100
    config.optimizer.decay_steps = 300
    config.checkpoint.every_steps = 250
    config.checkpoint.keep = 2
    config.eval.every_steps = 250
    config.eval.num_batches = 6
    config.eval.batch_size = 64
    config.log_every_steps = 50
    return config
