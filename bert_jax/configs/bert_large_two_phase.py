"""BERT-large, the original two-phase recipe: 90% of 1M steps at sequence 128, then 512.

  bert-jax pretrain --config configs/bert_large_two_phase.py:1 --workdir W \\
      --config.data.train_files=... --config.data.vocab_path=...
  bert-jax pretrain --config configs/bert_large_two_phase.py:2 --workdir W \\
      --config.data.train_files=...(shards made with --max-seq-len 512) ...

Phase 2 resumes phase 1's checkpoint in the same work directory: the step count and the
learning-rate schedule (one 1M-step schedule over both phases) continue; the new data
starts from its beginning.
"""

SUMMARY = "BERT-large's two phases (:1 at 128 tokens, :2 at 512), one work dir"

from bert_jax.errors import UserError
from bert_jax.run_config import pod_config

TOTAL_STEPS = 1_000_000
PHASE_1_STEPS = 900_000  # 90% of the steps at sequence length 128


def get_config(phase: str = "1"):
    if phase not in ("1", "2"):
        raise UserError(f"bert_large_two_phase.py: phase must be 1 or 2, got {phase!r}")
    config = pod_config("large")
    config.schedule_steps = TOTAL_STEPS  # one schedule over both phases
    if phase == "1":
        config.num_train_steps = PHASE_1_STEPS
        config.data.seq_len, config.data.max_predictions = 128, 20
    else:
        config.num_train_steps = TOTAL_STEPS
        config.data.seq_len, config.data.max_predictions = 512, 80
    return config
