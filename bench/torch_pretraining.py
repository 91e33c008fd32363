"""transformers' side of the pre-training benchmarks: `BertForPreTraining`'s loss with its
MLM head on the masked positions only, and ModernBERT's attention masks of packed rows.

`BertForPreTraining(**inputs, labels=...)` scores every one of the T positions with the
(hidden x vocab) decoder and then ignores all but P of them; bert-jax gathers the P masked
positions first (as the original TF code does). For a like-for-like comparison the
benchmarks run the same model's own heads on the gathered positions: same weights, same
loss, P/T of the head's FLOPs.
"""

import numpy as np


def gathered_pretraining_losses(model, tensors: dict):
    """(mlm_loss, nsp_loss) of `model` (a BertForPreTraining) on a batch of torch tensors
    named as the project's batch features; the MLM head sees only `masked_lm_positions`."""
    import torch

    encoded = model.bert(input_ids=tensors["input_ids"].long(),
                         attention_mask=tensors["input_mask"].long(),
                         token_type_ids=tensors["segment_ids"].long())
    positions = tensors["masked_lm_positions"].long()  # (B, P)
    hidden = encoded.last_hidden_state  # (B, T, H)
    gathered = torch.gather(hidden, 1, positions[..., None].expand(-1, -1, hidden.shape[-1]))
    logits = model.cls.predictions(gathered)  # (B, P, V)
    weights = tensors["masked_lm_weights"].float()
    nll = torch.nn.functional.cross_entropy(
        logits.transpose(1, 2), tensors["masked_lm_ids"].long(), reduction="none")  # (B, P)
    mlm_loss = (nll * weights).sum() / (weights.sum() + 1e-5)
    nsp_loss = torch.nn.functional.cross_entropy(
        model.cls.seq_relationship(encoded.pooler_output),
        tensors["next_sentence_labels"].long())
    return mlm_loss, nsp_loss


def instance_masks(instance_ids: np.ndarray, window: int) -> dict:
    """transformers' per-layer-type attention masks of rows whose tokens carry `instance_ids`
    (R, T) (1, 2, ... per sequence, 0 at padding), (R, 1, T, T) bool: a sequence's tokens
    see only its tokens (sliding layers: within `window` on each side); a padding query
    sees every key, so that no row of sdpa's softmax is empty (NaN)."""
    import torch
    query, key = instance_ids[:, None, :, None], instance_ids[:, None, None, :]
    full = ((query == key) & (key > 0)) | (query == 0)  # (R, 1, T, T)
    positions = np.arange(instance_ids.shape[1])
    near = np.abs(positions[:, None] - positions[None, :]) <= window  # (T, T)
    return {"full_attention": torch.from_numpy(full),
            "sliding_attention": torch.from_numpy(full & near)}
