"""`transformers.BertForPreTraining`'s loss with its MLM head on the masked positions only.

`BertForPreTraining(**inputs, labels=...)` scores every one of the T positions with the
(hidden x vocab) decoder and then ignores all but P of them; bert-jax gathers the P masked
positions first (as the original TF code does). For a like-for-like comparison the
benchmarks run the same model's own heads on the gathered positions: same weights, same
loss, P/T of the head's FLOPs.
"""


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
