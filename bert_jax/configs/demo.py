"""`make pretrain`: a tiny BERT on the standard library's docstrings, a few minutes on a CPU.

Builds its own vocabulary and shards in runs/demo_data on first use (no download).
"""

SUMMARY = "a tiny BERT on the standard library's docstrings, minutes on a CPU"

from bert_jax.run_config import base_config


def get_config():
    config = base_config("tiny")  # 2 layers, hidden 128, 2 heads
    config.data.demo_dir = "runs/demo_data"  # vocab + train/eval shards built here once
    config.data.demo_vocab_size = 4000
    config.data.seq_len = 64  # short sequences: half the FLOPs per step of 128
    config.data.max_predictions = 10
    config.data.shuffle_buffer = 20_000  # all of it: the modules come in alphabetical order
    config.batch_size = 32
    config.num_train_steps = 1000
    config.optimizer.learning_rate = 5e-4
    config.optimizer.warmup_steps = 100
    config.checkpoint.every_steps = 250
    config.checkpoint.keep = 2
    config.eval.every_steps = 250
    config.eval.num_batches = 6
    config.eval.batch_size = 64
    config.log_every_steps = 50
    return config
