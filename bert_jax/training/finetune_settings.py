"""The settings every fine-tuning run shares (the common flags of `bert-jax finetune TASK`).

They live in the training system, which builds a run config from them; the command-line
flags (bert_jax/tasks/arguments.py) take their defaults from here. No JAX is imported, so
`bert-jax finetune TASK --help` stays instant.
"""

import dataclasses


@dataclasses.dataclass(frozen=True)
class Settings:
    """The common flags of `bert-jax finetune`; defaults follow the BERT paper's recipe."""
    epochs: int = 3  # the paper: 2-4
    learning_rate: float = 2e-5  # the paper: 2e-5 .. 5e-5 (AdamW)
    batch_size: int = 32  # the paper: 16 or 32
    max_seq_len: int = 128
    seed: int = 0
