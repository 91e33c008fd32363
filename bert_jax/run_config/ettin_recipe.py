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

from bert_jax.run_config.phase_recipe import Phase, full_and_demo


def _phases(pretrain: float, extension: float, decay: float, short: int, long: int,
            warmup_tokens: float, batch_warmup_tokens: float) -> tuple[Phase, ...]:
    return (
        Phase("pretrain", pretrain, short, 0.30, 8e-4, 10_000.0, ("pretraining",),
              warmup_tokens=warmup_tokens, batch_warmup_tokens=batch_warmup_tokens),
        Phase("extension", extension, long, 0.30, 8e-4, 160_000.0, ("extension",),
              decay_shape="1-sqrt", final_ratio=0.5),
        Phase("decay", decay, long, 0.15, 4e-4, 160_000.0, ("prolong",),
              decay_shape="1-sqrt", final_ratio=0.04),
    )


BASE, DEMO = full_and_demo(
    "ettin_150m", "ettin_demo", _phases,
    dict(pretrain=1.7e12, extension=250e9, decay=50e9, short=1024, long=8192,
         warmup_tokens=3e9, batch_warmup_tokens=50e9),
    beta2=0.98, epsilon=1e-6, weight_decay=1e-5)
