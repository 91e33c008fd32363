"""BERT-base (Devlin et al., 2019): 12 layers, hidden 768; 1M steps of 256 x 128 tokens.

Set data.train_files / data.eval_files / data.vocab_path on the command line. bf16 compute
with fp32 parameters; FSDP over the slice (change mesh.* for other layouts).
"""

SUMMARY = "BERT-base (Devlin et al., 2019): 1M steps of 256 x 128 tokens"

from bert_jax.run_config import pod_config


def get_config():
    return pod_config("base")  # batch 256, 1M steps, lr 1e-4, 10k warm-up: the defaults
