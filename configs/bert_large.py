"""BERT-large (Devlin et al., 2019): 24 layers, hidden 1024; 1M steps of 256 x 128 tokens.

Set data.train_files / data.eval_files / data.vocab_path on the command line.
"""

from bert_jax.run_config import base_config


def get_config():
    config = base_config("large")
    config.model.dtype = "bfloat16"  # compute; parameters and loss stay float32
    config.batch_size = 256
    config.num_train_steps = 1_000_000
    config.optimizer.learning_rate = 1e-4
    config.optimizer.warmup_steps = 10_000
    config.mesh.data = 1
    config.mesh.fsdp = -1
    config.checkpoint.every_steps = 5000
    config.eval.every_steps = 20_000
    config.peak_flops_per_device = 275e12  # TPU v4 bf16; set for your chip
    return config
