"""BERT-large, the original two-phase recipe: 90% of 1M steps at sequence 128, then 512.

  bert-jax pretrain --config configs/bert_large_two_phase.py:1 --workdir W \\
      --config.data.train_files=... --config.data.vocab_path=...
  bert-jax pretrain --config configs/bert_large_two_phase.py:2 --workdir W \\
      --config.data.train_files=...(shards made with --max-seq-len 512) ...

Phase 2 resumes phase 1's checkpoint in the same work directory: the step count and the
learning-rate schedule (one 1M-step schedule over both phases) continue; the new data
starts from its beginning.
"""

from bert_jax.errors import UserError
from bert_jax.run_config import base_config

TOTAL_STEPS = 1_000_000
PHASE_1_STEPS = 900_000  # 90% of the steps at sequence length 128


def get_config(phase: str = "1"):
    if phase not in ("1", "2"):
        raise UserError(f"bert_large_two_phase.py: phase must be 1 or 2, got {phase!r}")
    config = base_config("large")
    config.model.dtype = "bfloat16"
    config.batch_size = 256
    config.schedule_steps = TOTAL_STEPS
    config.optimizer.learning_rate = 1e-4
    config.optimizer.warmup_steps = 10_000
    config.mesh.data = 1
    config.mesh.fsdp = -1
    config.checkpoint.every_steps = 5000
    config.eval.every_steps = 20_000
    config.peak_flops_per_device = 275e12  # TPU v4 bf16; set for your chip
    if phase == "1":
        config.num_train_steps = PHASE_1_STEPS
        config.data.seq_len, config.data.max_predictions = 128, 20
    else:
        config.num_train_steps = TOTAL_STEPS
        config.data.seq_len, config.data.max_predictions = 512, 80
    return config
