"""bench/pretraining_curves.py's own logic: the recorder that replays bert-jax's reader to
transformers, and transformers' side of packed ModernBERT rows."""

import numpy as np
import pytest

from bench import pretraining_curves
from modernbert_helpers import HF_CONFIG, hf_model


class _Reader:
    """A reader of numbered batches with a position, as the trainer's readers have."""

    def __init__(self, offset: int = 0):
        self.read, self.offset = 0, offset

    def __next__(self):
        self.read += 1
        return {"input_ids": np.full((2, 3), self.read + self.offset, np.int32)}

    def state(self):
        return {"read": self.read}


def test_the_recorder_keeps_copies_of_what_the_trainer_read_and_checks_the_held_out_batches():
    offsets = {"train": 0, "eval": 0}
    recorder = pretraining_curves.Recorder(
        lambda split, *_: _Reader(offsets[split]))
    train = recorder("train", 2, 0, 1)
    first = next(train)
    first["input_ids"][:] = -1  # the trainer may reuse its buffers: the copy must not change
    next(train)
    assert train.state() == {"read": 2}  # the trainer's position calls reach the reader
    assert [int(batch["input_ids"][0, 0]) for batch in recorder.train] == [1, 2]
    assert recorder.second_batch_time is not None
    for _ in range(2):  # two evaluations of the same held-out batches
        held_out = recorder("eval", 2, 0, 1)
        next(held_out), next(held_out)
    assert [int(b["input_ids"][0, 0]) for b in recorder.check_held_out()] == [1, 2]
    offsets["eval"] = 5
    held_out = recorder("eval", 2, 0, 1)
    next(held_out), next(held_out)
    with pytest.raises(AssertionError, match="held-out batches changed"):
        recorder.check_held_out()


def _packed_batch(rng, lengths_per_row, seq_len: int, predictions: int):
    """Rows of several sequences each (bert-jax's packed masked-LM batch) and, per sequence,
    (token ids, masked positions within it)."""
    rows = len(lengths_per_row)
    batch = {name: np.zeros((rows, seq_len), np.int32)
             for name in ("input_ids", "instance_ids", "position_ids")}
    batch.update(masked_lm_positions=np.zeros((rows, predictions), np.int32),
                 masked_lm_ids=np.zeros((rows, predictions), np.int32),
                 masked_lm_weights=np.zeros((rows, predictions), np.float32))
    sequences = []
    for row, lengths in enumerate(lengths_per_row):
        start, slot = 0, 0
        for instance, length in enumerate(lengths, 1):
            ids = rng.integers(5, HF_CONFIG["vocab_size"], length).astype(np.int32)
            masked = np.sort(rng.choice(length, 3, replace=False))
            span = slice(start, start + length)
            batch["input_ids"][row, span] = ids
            batch["input_ids"][row, start + masked] = 3  # [MASK]-like: not the label
            batch["instance_ids"][row, span] = instance
            batch["position_ids"][row, span] = np.arange(length)
            batch["masked_lm_positions"][row, slot:slot + 3] = start + masked
            batch["masked_lm_ids"][row, slot:slot + 3] = ids[masked]
            batch["masked_lm_weights"][row, slot:slot + 3] = 1.0
            sequences.append((batch["input_ids"][row, span].copy(), masked, ids[masked]))
            start, slot = start + length, slot + 3
    return batch, sequences


# The bench keeps optimi's foreach path (no triton on a CPU), which optimi now warns about.
@pytest.mark.filterwarnings("ignore:Parameter `foreach` is deprecated")
def test_packed_rows_give_transformers_the_loss_of_the_same_sequences_unpacked(tmp_path):
    """transformers' own padding and sliding-window masks on one sequence a row are the
    reference for the bench's 4-D masks and restarting positions of packed rows. The
    sequences are longer than the 4-token half window, so sliding layers are exercised."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("optimi", reason="torch-optimi: the demo's StableAdamW")
    from bert_jax.run_config import load_run_config

    hf_model("ModernBertForMaskedLM", tmp_path, seed=1)
    side = pretraining_curves.TorchSide("modernbert", str(tmp_path),
                                        load_run_config("modernbert_demo", []))
    batch, sequences = _packed_batch(np.random.default_rng(0), [(10, 12), (15, 5)], 24, 8)
    packed = side.held_out_loss([batch])

    longest = max(len(ids) for ids, _, _ in sequences)
    ids = np.zeros((len(sequences), longest), np.int64)
    labels = np.full(ids.shape, -100, np.int64)
    for row, (tokens, masked, targets) in enumerate(sequences):
        ids[row, :len(tokens)], labels[row, masked] = tokens, targets
    side.model.eval()
    with torch.no_grad():
        unpacked = side.model(input_ids=torch.from_numpy(ids),
                              attention_mask=torch.from_numpy((ids > 0).astype(np.int64)),
                              labels=torch.from_numpy(labels)).loss.item()
    # One float32 model on the same tokens in two layouts: the sums differ only in order
    # (~1e-7 relative per term), far below 1e-5; a mask that lets a sequence see its
    # neighbour, or a window one token wider, moves it by ~1e-3 (measured 7e-4, 1.2e-3).
    np.testing.assert_allclose(packed, unpacked, rtol=1e-5)
