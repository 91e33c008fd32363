"""mmBERT's pre-training (Marone, Weller et al., 2025, arXiv 2509.06888) as a phased run:
`configs/mmbert_base.py` at full size, `configs/mmbert_demo.py` at laptop size.

Settings from the released training files, github.com/jhu-clsp/mmBERT configs/
mmBERT-base.yaml, mmBERT-base-ext.yaml and mmBERT-base-decay.yaml: StableAdamW (decoupled)
at 8e-4, betas 0.9/0.95, eps 1e-8, weight decay 8e-5; 1,024-token rows, both RoPE bases
10,000, a 3B-token warm-up and a batch warm-up over 60B tokens, then the peak held; the
extension at 8,192 tokens with both bases 160,000, the peak still held; the decay a 1-sqrt
over the whole phase to 0.02 x the peak. Token budgets and the cascade of languages from
the paper and the data cards (jhu-clsp/mmBERT-pretrain-*, mmBERT-decay-data): 2.3T tokens
over 60 languages sampled at tau 0.7, then 600B over 110 at tau 0.5, then 100B over 1,833
at tau 0.3; masking 30% -> 15% -> 5% (the paper; mmBERT-base.yaml itself sets 25% for
phase 1, mmBERT-small.yaml 30%).

The mixture is tau sampling over the sources (p_i proportional to rows_i^tau): here one
source per tier of languages the phases add (high_resource: the first 60; mid_resource:
the 50 added in the extension; low_resource: the 1,723 added in the decay). mmBERT samples
each language of FineWeb2 so: a config with one source per language does exactly that.
"""

from bert_jax.run_config.phase_recipe import Phase, full_and_demo

TIERS = ("high_resource", "mid_resource", "low_resource")


def _phases(pretrain: float, extension: float, decay: float, short: int, long: int,
            warmup_tokens: float, batch_warmup_tokens: float) -> tuple[Phase, ...]:
    return (
        Phase("pretrain", pretrain, short, 0.30, 8e-4, 10_000.0, TIERS[:1], mixture_tau=0.7,
              warmup_tokens=warmup_tokens, batch_warmup_tokens=batch_warmup_tokens),
        Phase("extension", extension, long, 0.15, 8e-4, 160_000.0, TIERS[:2],
              mixture_tau=0.5),
        Phase("decay", decay, long, 0.05, 8e-4, 160_000.0, TIERS, mixture_tau=0.3,
              decay_shape="1-sqrt", final_ratio=0.02),
    )


BASE, DEMO = full_and_demo(
    "mmbert_base", "mmbert_demo", _phases,
    dict(pretrain=2.3e12, extension=600e9, decay=100e9, short=1024, long=8192,
         warmup_tokens=3e9, batch_warmup_tokens=60e9),
    beta2=0.95, epsilon=1e-8, weight_decay=8e-5)
