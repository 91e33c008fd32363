"""Shared pieces of the training tests (no tests here): a tiny run config, synthetic batches,
the pre-training task.

Also imported by the subprocesses those tests start, which put this directory on sys.path.
"""

import os
import signal
import time

import numpy as np

from bert_jax.run_config import base_config

VOCAB_SIZE = 64


def tiny_run_config(**overrides):
    """A one-layer BERT, 16 tokens, 4 predictions, batch 8, checkpoints every 3 steps."""
    config = base_config("tiny")
    config.model.update(vocab_size=VOCAB_SIZE, hidden_dim=32, num_layers=1, num_heads=2,
                        mlp_dim=64, max_positions=16)
    config.data.update(train_files="synthetic", seq_len=16, max_predictions=4)
    config.update(batch_size=8, num_train_steps=12, log_every_steps=1)
    config.optimizer.update(learning_rate=1e-3, warmup_steps=3)
    config.checkpoint.update(every_steps=3, keep=10)
    for key, value in overrides.items():
        node = config
        *parents, leaf = key.split(".")
        for parent in parents:
            node = node[parent]
        node[leaf] = value
    return config


def synthetic_batch(position: int, batch_size: int, seq_len: int, max_predictions: int,
                    seed: int = 0) -> dict:
    """The global batch number `position`: random tokens, some padding, some empty slots."""
    rng = np.random.default_rng([seed, position])
    lengths = rng.integers(seq_len // 2, seq_len + 1, size=batch_size)
    input_mask = (np.arange(seq_len)[None] < lengths[:, None]).astype(np.int32)
    positions = np.stack([rng.choice(np.arange(1, length), max_predictions, replace=False)
                          for length in lengths]).astype(np.int32)
    weights = np.ones((batch_size, max_predictions), np.float32)
    weights[:, -1] = rng.integers(0, 2, size=batch_size)  # some padded prediction slots
    return dict(
        input_ids=(rng.integers(5, VOCAB_SIZE, (batch_size, seq_len)) * input_mask
                   ).astype(np.int32),
        input_mask=input_mask,
        segment_ids=((np.arange(seq_len)[None] >= lengths[:, None] // 2) * input_mask
                     ).astype(np.int32),
        masked_lm_positions=positions,
        masked_lm_ids=rng.integers(5, VOCAB_SIZE, (batch_size, max_predictions)
                                   ).astype(np.int32),
        masked_lm_weights=weights,
        next_sentence_labels=rng.integers(0, 2, batch_size).astype(np.int32))


class SyntheticDataset:
    """The reader's interface (iterator, state, restore) over `synthetic_batch`.

    Each process takes its rows of the same global batch, as shards split across hosts
    would; `delay` slows each batch down, `nan_at` / `sigterm_at` inject faults.
    """

    def __init__(self, batch_size, seq_len, max_predictions, process_index=0, process_count=1,
                 seed=0, delay=0.0, nan_at=None, sigterm_at=None):
        self.local_size, self.shape = batch_size, (seq_len, max_predictions)
        self.process_index, self.process_count, self.seed = process_index, process_count, seed
        self.delay, self.nan_at, self.sigterm_at = delay, nan_at, sigterm_at
        self.position = 0

    def state(self):
        return {"position": self.position}

    def restore(self, state):
        self.position = state["position"]

    def __iter__(self):
        return self

    def __next__(self):
        time.sleep(self.delay)
        batch = synthetic_batch(self.position, self.local_size * self.process_count,
                                *self.shape, seed=self.seed)
        rows = slice(self.process_index * self.local_size,
                     (self.process_index + 1) * self.local_size)
        batch = {name: value[rows] for name, value in batch.items()}
        if self.position == self.nan_at:
            batch["masked_lm_weights"][0, 0] = np.nan
        if self.position == self.sigterm_at:
            os.kill(os.getpid(), signal.SIGTERM)
        self.position += 1
        return batch


def pretraining(run_config, dataset_factory=None, log=lambda *_: None) -> dict:
    """`trainer.train`'s task, dataset_factory and init_weights for a pre-training run, its
    data section completed first as `bert-jax pretrain` does it; `dataset_factory` (e.g.
    `synthetic_factory`) replaces the shard reader."""
    from bert_jax.tasks.pretraining_data import prepare_run

    run = prepare_run(run_config, log)
    return dict(task=run.task, dataset_factory=dataset_factory or run.dataset_factory,
                init_weights=run.init_weights)


def synthetic_factory(run_config, **faults):
    """A trainer `dataset_factory`; eval batches come from another seed."""
    def make(split, batch_size, process_index, process_count):
        return SyntheticDataset(batch_size, run_config.data.seq_len,
                                run_config.data.max_predictions, process_index, process_count,
                                seed=0 if split == "train" else 1,
                                **(faults if split == "train" else {}))
    return make
