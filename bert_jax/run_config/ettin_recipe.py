"""Ettin's encoder pre-training (Weller et al., 2025, arXiv 2507.11412) as a phased run:
`configs/ettin_150m.py` at full size, `configs/ettin_demo.py` at laptop size.

Settings from the released training files, github.com/jhu-clsp/ettin-encoder-vs-decoder
pretraining/configs/standard/base/encoder_base.yaml (pre-training), de_decay/ (the
extension) and prolong_decay/ (the decay): StableAdamW (decoupled), betas 0.9/0.98, eps
1e-6, weight decay 1e-5; 1.7T tokens of 1,024 at 30% masking and 8e-4, a 3B-token warm-up
and a batch warm-up over 50B tokens, both RoPE bases 10,000, the peak held; then 250B
tokens at 30% masking, both bases 160,000, 8e-4 decaying by 1-sqrt over the phase to 0.5 x
(alpha_f 0.5); then the decay: 50B tokens of ProLong data at 15% masking, 4e-4 decaying by
1-sqrt to 0.04 x. Each phase reads its own data (the pre-training mix, a 250B sample of
it, ProLong): one source each. The files' later phases take unpacked rows of up to 7,999
tokens; here rows are packed to 8,192 (ModernBERT's) with the same tokens a step.
"""

from bert_jax.run_config.phase_recipe import Phase, Recipe


def _phases(tokens: tuple[float, float, float], lengths: tuple[int, int],
            warmup_tokens: float, batch_warmup_tokens: float) -> tuple[Phase, ...]:
    pretrain, extension, decay = tokens
    short, long = lengths
    return (
        Phase("pretrain", pretrain, short, 0.30, 8e-4, 10_000.0, ("pretraining",),
              warmup_tokens=warmup_tokens, batch_warmup_tokens=batch_warmup_tokens),
        Phase("extension", extension, long, 0.30, 8e-4, 160_000.0, ("extension",),
              decay_shape="1-sqrt", final_ratio=0.5),
        Phase("decay", decay, long, 0.15, 4e-4, 160_000.0, ("prolong",),
              decay_shape="1-sqrt", final_ratio=0.04),
    )


BASE = Recipe("ettin_150m", "modernbert-base",
              _phases((1.7e12, 250e9, 50e9), (1024, 8192), 3e9, 50e9),
              beta2=0.98, epsilon=1e-6, weight_decay=1e-5)
# The same phases at laptop size: 32 rows of 64 tokens a step; 40, 20 and 20 steps.
DEMO = Recipe("ettin_demo", "modernbert-tiny",
              _phases((74_240, 40_960, 40_960), (64, 128), 5_120, 12_800),
              beta2=0.98, epsilon=1e-6, weight_decay=1e-5, batch_rows=32, phase_1_row=64,
              start_rows=8, demo=True)
