"""What the continued-pre-training recipes (configs/bert_continue.py, modernbert_continue.py)
share: masked LM only on packed rows of the user's text, a CPU-to-chip-sized batch, and
intervals that `pretrain --model` sizes from --steps or --tokens
(bert_jax/tasks/continued_pretraining.py)."""

from bert_jax.run_config import base_config


def continued_config(model_preset: str, seq_len: int, masking_rate: float):
    """The shared part of a continued-pre-training recipe; the file sets its optimizer."""
    config = base_config(model_preset)  # the sizes come from --model
    config.objective = "mlm"
    config.data.seq_len = seq_len  # capped at the model's positions
    config.data.masking_rate = masking_rate
    config.batch_size = 32
    config.num_train_steps = 1000  # sized from --steps or --tokens
    config.checkpoint.keep = 2
    config.eval.batch_size = 32
    config.eval.num_batches = 20  # at most; fewer when the held-out split is smaller
    config.log_every_steps = 10
    return config
