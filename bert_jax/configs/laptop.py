"""BERT shrunk for a laptop CPU: the BERT-Base recipe with a small model and CPU-sized
step counts, warm-up and checkpoint/evaluation intervals; one flag instead of seventeen.

  bert-jax pretrain --config laptop --config.data.train_files='shards/train/*.tfrecord' \\
      --config.data.eval_files='shards/eval/*.tfrecord' --config.data.vocab_path=vocab.txt
  bert-jax pretrain --config laptop --config.data.demo_dir=runs/laptop_data   # no data yet

data.seq_len and data.max_predictions come from the shards' manifest (with data.demo_dir:
128 and 20, BERT's phase 1). Everything else is base_config's (AdamW, linear warm-up and
decay, float32 on the CPU).
"""

SUMMARY = "BERT's recipe with a small model and CPU-sized steps, on your shards"

from bert_jax.run_config import base_config


def get_config():
    config = base_config("mini")  # 4 layers, hidden 256, 4 heads: ~11M parameters
    config.data.demo_vocab_size = 8000  # if data.demo_dir is set
    config.batch_size = 32  # a laptop's worth; raise it with grad_accum_steps
    config.num_train_steps = 2000
    config.optimizer.learning_rate = 3e-4  # small models take a larger step than Base's 1e-4
    config.optimizer.warmup_steps = 200  # 10% of the run
    config.checkpoint.every_steps = 500
    config.checkpoint.keep = 2
    config.eval.every_steps = 500
    config.eval.num_batches = 10
    config.eval.batch_size = 64
    config.log_every_steps = 50
    return config
