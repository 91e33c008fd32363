"""EuroBERT's pre-training recipe (Boizard et al., 2025) as run configs: the optimizer both
`configs/eurobert_demo.py` and `configs/eurobert_210m.py` take, and the 210m run.

Masked LM only (objective mlm), packed rows; 50% of the tokens masked in pre-training, 10%
in the annealing phase that ends the run while the learning rate decays; AdamW (betas
0.9/0.95, eps 1e-5, weight decay 0.1 on all but norms and biases, clipping at 1);
warmup-stable-decay. The masking rates (50%, then 10%) are those issue 49 quotes from the
paper. AdamW's betas, eps and weight decay, the token budgets (4.8T tokens of
pre-training at 2,048 tokens a row, then 200B of annealing), the 2,000-step warm-up, the
3.6e-4 peak and the 2,304-row batch were written from the paper's account without its text
at hand (no network here): check them against its training table before a paid run.
"""

PRETRAINING_TOKENS, ANNEALING_TOKENS = 4.8e12, 200e9
ROW, BATCH_ROWS = 2048, 2304  # tokens a row; rows a step: 4.7M tokens
WARMUP_STEPS = 2000
PRETRAINING_RATE, ANNEALING_RATE = 0.5, 0.1


def eurobert_optimizer(config, learning_rate: float) -> None:
    """AdamW as EuroBERT trains with it, on a warmup-stable-decay schedule (linear decay)."""
    optimizer = config.optimizer
    optimizer.name, optimizer.learning_rate = "adamw", learning_rate
    optimizer.beta1, optimizer.beta2, optimizer.epsilon = 0.9, 0.95, 1e-5
    optimizer.weight_decay, optimizer.clip_norm = 0.1, 1.0
    optimizer.schedule, optimizer.decay_shape = "wsd", "linear"


def eurobert_210m_config(learning_rate: float = 3.6e-4):
    """EuroBERT-210m's run: pre-training at 50%, then annealing at 10% during the decay."""
    from bert_jax.run_config import pod_config

    config = pod_config("eurobert-210m")
    config.objective = "mlm"
    config.data.seq_len = ROW
    config.batch_size = BATCH_ROWS
    tokens_a_step = ROW * BATCH_ROWS
    pretraining = round(PRETRAINING_TOKENS / tokens_a_step)
    annealing = round(ANNEALING_TOKENS / tokens_a_step)
    config.num_train_steps = pretraining + annealing
    config.data.masking_rate = PRETRAINING_RATE
    config.data.masking_rate_schedule = f"{pretraining}:{ANNEALING_RATE}"
    eurobert_optimizer(config, learning_rate)
    config.optimizer.warmup_steps = WARMUP_STEPS
    config.optimizer.decay_steps = annealing
    return config
