"""ModernBERT's pre-training recipe (Warner et al., 2024, and its public training configs) as
run configs: `configs/modernbert_base.py:PHASE` and `configs/modernbert_large.py:PHASE`.

Three phases run as one run, in one work directory, each resuming the last one's
checkpoint (step count, optimizer state and the one warmup-stable-decay schedule carried):

  1  1.7T tokens at 1,024 tokens a row, both RoPE thetas 10,000; the batch warmed up from
     768 to 4,608 rows over the first 50B tokens;
  2  250B tokens at 8,192 (576 rows a step: the same 4.7M tokens), the global layers' RoPE
     theta raised to 160,000 (context extension);
  3  50B tokens at 8,192: the learning rate's 1-sqrt decay to 0.

Masked LM only (objective mlm) at 30%, StableAdamW (betas 0.9/0.98, eps 1e-6, decoupled
weight decay 1e-5 following the schedule, no decay on norms and biases, no global clip),
packed rows (create-data --objective mlm). The paper averages the decay phase's checkpoints:
`bert-jax average WORKDIR OUT --last N` after phase 3.
"""

import math

from bert_jax.errors import UserError
from bert_jax.run_config import pod_config
from bert_jax.run_config.phase_recipe import token_steps

TOKENS = {"1": 1.7e12, "2": 250e9, "3": 50e9}
PHASE_1_ROW, LONG_ROW = 1024, 8192
BATCH_ROWS = 4608  # phase 1's rows a step after the warm-up: 4.72M tokens
MICRO_BATCH_ROWS = 768  # the warm-up's first batch, and the accumulation unit
WARMUP_TOKENS = 50e9  # the batch grows over these
LEARNING_RATE_WARMUP_TOKENS = 3e9


def _phase_steps() -> dict[str, int]:
    """Optimizer steps of each phase from its token budget: every step holds phase 1's
    4.72M tokens; phase 1's batch warms up from one micro-batch over WARMUP_TOKENS."""
    step_tokens = BATCH_ROWS * PHASE_1_ROW  # phases 2 and 3 keep the tokens a step
    first, warmup = token_steps(TOKENS["1"], step_tokens, WARMUP_TOKENS,
                                MICRO_BATCH_ROWS * PHASE_1_ROW)
    return {"1": first, "batch_warmup": warmup, "2": token_steps(TOKENS["2"], step_tokens)[0],
            "3": token_steps(TOKENS["3"], step_tokens)[0]}


def modernbert_config(size: str, phase: str, learning_rate: float):
    """The run config of `size` ("base", "large") in `phase` ("1", "2", "3")."""
    if phase not in TOKENS:
        raise UserError(f"modernbert_{size}.py: phase must be 1, 2 or 3, got {phase!r}")
    steps = _phase_steps()
    config = pod_config(f"modernbert-{size}")
    config.objective = "mlm"
    config.data.masking_rate = 0.3
    config.schedule_steps = steps["1"] + steps["2"] + steps["3"]  # one schedule over all three
    config.num_train_steps = sum(steps[name] for name in ("1", "2", "3")[:int(phase)])
    optimizer = config.optimizer
    optimizer.name, optimizer.learning_rate = "stable_adamw", learning_rate
    optimizer.beta1, optimizer.beta2, optimizer.epsilon = 0.9, 0.98, 1e-6
    optimizer.weight_decay, optimizer.decouple_learning_rate = 1e-5, True
    optimizer.clip_norm = 0.0  # StableAdamW clips each tensor's update itself
    optimizer.schedule, optimizer.decay_shape = "wsd", "1-sqrt"
    optimizer.decay_steps = steps["3"]
    optimizer.warmup_steps = math.ceil(steps["batch_warmup"] * LEARNING_RATE_WARMUP_TOKENS
                                       / WARMUP_TOKENS)
    if phase == "1":
        config.model.global_rope_theta = 10_000.0  # raised for the long phases
        config.data.seq_len = PHASE_1_ROW
        config.batch_size = BATCH_ROWS
        config.grad_accum_steps = BATCH_ROWS // MICRO_BATCH_ROWS
        config.batch_warmup.steps = steps["batch_warmup"]
        config.batch_warmup.start_batch_size = MICRO_BATCH_ROWS
    else:
        config.data.seq_len = LONG_ROW
        config.batch_size = BATCH_ROWS * PHASE_1_ROW // LONG_ROW  # 576 rows: 4.72M tokens
    return config
