"""The peer side of the SQuAD benchmark: transformers' AutoModelForQuestionAnswering in PyTorch.

Trained and run on exactly the windows bert-jax uses (`squad_windows.make_windows`), its
logits post-processed by the same `squad_postprocess.postprocess`, so the two differ only
in the framework. Its recipe is the peer's best practice: torch AdamW with weight decay
0.01 off biases and LayerNorm, linear warm-up over 10% then linear decay, batches padded
only to their longest window (as DataCollatorWithPadding does), no gradient on evaluation.
"""

import time

import numpy as np


def _batches(count: int, batch_size: int, rng: np.random.Generator | None):
    order = rng.permutation(count) if rng is not None else np.arange(count)
    for begin in range(0, count, batch_size):
        yield order[begin:begin + batch_size]


def _tensors(windows, rows):
    import torch

    width = int(windows.input_mask[rows].sum(axis=1).max())  # dynamic padding
    return dict(input_ids=torch.from_numpy(windows.input_ids[rows, :width].astype(np.int64)),
                token_type_ids=torch.from_numpy(windows.segment_ids[rows, :width].astype(np.int64)),
                attention_mask=torch.from_numpy(windows.input_mask[rows, :width].astype(np.int64)))


def load_peer(model_directory: str, seed: int):
    import torch
    import transformers

    torch.manual_seed(seed)
    transformers.logging.set_verbosity_error()  # qa_outputs is new: a known warning
    return transformers.AutoModelForQuestionAnswering.from_pretrained(model_directory)


def train_peer(model, windows, epochs: int, batch_size: int, learning_rate: float,
               seed: int) -> tuple[float, int]:
    """Fine-tunes `model` in place; returns (seconds, windows seen)."""
    import torch
    import transformers

    decay = [p for n, p in model.named_parameters() if not ("bias" in n or "LayerNorm" in n)]
    no_decay = [p for n, p in model.named_parameters() if "bias" in n or "LayerNorm" in n]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                                   {"params": no_decay, "weight_decay": 0.0}], lr=learning_rate)
    steps = epochs * -(-len(windows) // batch_size)
    schedule = transformers.get_linear_schedule_with_warmup(optimizer, int(0.1 * steps), steps)
    rng = np.random.default_rng(seed)
    model.train()
    started = time.perf_counter()
    for _ in range(epochs):
        for rows in _batches(len(windows), batch_size, rng):
            inputs = _tensors(windows, rows)
            loss = model(**inputs,
                         start_positions=torch.from_numpy(windows.start_positions[rows].astype(np.int64)),
                         end_positions=torch.from_numpy(windows.end_positions[rows].astype(np.int64))).loss
            loss.backward()
            optimizer.step()
            schedule.step()
            optimizer.zero_grad()
    return time.perf_counter() - started, epochs * len(windows)


def peer_logits(model, windows, batch_size: int = 64) -> tuple[np.ndarray, np.ndarray, float]:
    """(start (W, T), end (W, T), seconds): padding positions left at -inf."""
    import torch

    model.eval()
    shape = windows.input_ids.shape
    start, end = np.full(shape, -np.inf, np.float32), np.full(shape, -np.inf, np.float32)
    started = time.perf_counter()
    with torch.inference_mode():
        for rows in _batches(len(windows), batch_size, None):
            inputs = _tensors(windows, rows)
            output = model(**inputs)
            width = inputs["input_ids"].shape[1]
            start[rows, :width] = output.start_logits.numpy()
            end[rows, :width] = output.end_logits.numpy()
    return start, end, time.perf_counter() - started
