"""BERT-base in the fast attention setting: bert_base.py without attention-probability dropout.

With `model.attention_dropout_rate = 0` the TPU step runs attention in the Pallas splash
kernel and a bf16 GPU step in cuDNN's fused kernel (bert_jax/models/layers/attention_kernels.py);
neither applies dropout to the probabilities. MosaicBERT, ModernBERT and Cramming pre-train
without it; `bench/learning_curve.py --attention-dropout` measures what it costs BERT-mini
(README). The same override turns any config fast: --config.model.attention_dropout_rate=0.
"""

SUMMARY = "bert_base without attention dropout, for the fused attention kernels"

from bert_jax.run_config import pod_config


def get_config():
    config = pod_config("base")
    config.model.attention_dropout_rate = 0.0  # the paper's 0.1 keeps attention unfused
    return config
