"""A tiny ModernBERT pre-trained on the standard library's docstrings in minutes on a CPU:
ModernBERT's recipe (masked LM only at 30%, StableAdamW, warmup-stable-decay with a 1-sqrt
decay, packed rows, a byte-level BPE tokenizer.json) at laptop size.

  bert-jax pretrain --config modernbert_demo

Builds its own byte-level BPE and MLM-only shards in runs/modernbert_demo_data on first use.
"""

SUMMARY = "a tiny ModernBERT on the standard library's docstrings, minutes on a CPU"

from bert_jax.run_config import base_config


def get_config():
    config = base_config("modernbert-tiny")  # 3 layers (one global), hidden 128, 2 heads
    config.objective = "mlm"
    config.data.demo_dir = "runs/modernbert_demo_data"  # tokenizer.json + shards built here
    config.data.demo_vocab_type = "bpe"
    config.data.demo_vocab_size = 4000
    config.data.seq_len = 128  # the window (64 each side) is narrower than a row
    config.data.masking_rate = 0.3
    config.data.shuffle_buffer = 20_000  # all of it: the modules come in alphabetical order
    config.batch_size = 32
    config.num_train_steps = 1000
    config.optimizer.name = "stable_adamw"
    config.optimizer.learning_rate = 2e-3  # a tiny model takes large steps
    config.optimizer.beta2 = 0.98
    config.optimizer.weight_decay = 1e-5
    config.optimizer.decouple_learning_rate = True
    config.optimizer.clip_norm = 0.0  # StableAdamW clips each tensor's update itself
    config.optimizer.schedule = "wsd"
    config.optimizer.warmup_steps = 100
    config.optimizer.decay_steps = 300
    config.optimizer.decay_shape = "1-sqrt"
    config.checkpoint.every_steps = 250
    config.checkpoint.keep = 2
    config.eval.every_steps = 250
    config.eval.num_batches = 6
    config.eval.batch_size = 64
    config.log_every_steps = 50
    return config
