"""Inference on a loaded model: every layer's hidden states and attention, pooled features,
and masked-token predictions.

Inputs are padded to a few fixed lengths (`bucket_length`) and a fixed batch size, so the
jitted functions compile once per bucket instead of once per batch.
"""

import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from bert_jax.errors import UserError
from bert_jax.models.families import family_of


def encoder_params(config, params: dict) -> dict:
    """The encoder's own tree of a model's `params`, with zeros for an absent BERT pooler so
    the encoder can be applied.

    A BertForMaskedLM file has no pooler; the encoder's hidden states do not depend on it,
    and callers must not read the pooled output then. ModernBERT has no pooler at all.
    """
    family = family_of(config)
    encoder = params[family.encoder_key]
    if family.name != "bert" or "pooler" in encoder:
        return encoder
    hidden_dim = config.hidden_dim
    return {**encoder, "pooler": dict(kernel=np.zeros((hidden_dim, hidden_dim), np.float32),
                                      bias=np.zeros((hidden_dim,), np.float32))}


@functools.partial(jax.jit, static_argnames=("config", "layers", "with_attention"))
def encode(encoder: dict, input_ids: jax.Array, segment_ids: jax.Array,
           input_mask: jax.Array, *, config, layers: tuple[int, ...],
           with_attention: bool = False) -> dict[str, jax.Array]:
    """Hidden states of `layers` (0 = embedding output, N = the sequence output) of the
    `encoder` params (`encoder_params`) and, optionally, their attention.

    Returns `hidden_states` (len(layers), B, T, H), `pooled` (B, H; BERT only) and, with
    `with_attention`, `attention` (len(layers), B, heads, T, T) (layer 0 has none: zeros).
    """
    (_, pooled), state = family_of(config).encoder(config).apply(
        {"params": encoder}, input_ids, segment_ids, input_mask, False,
        mutable=["intermediates"])
    intermediates = state["intermediates"]
    hidden = jnp.stack([intermediates["hidden_states"][layer] for layer in layers])
    outputs = dict(hidden_states=hidden)
    if pooled is not None:
        outputs["pooled"] = pooled
    if with_attention:
        batch_size, seq_len = input_ids.shape
        none = jnp.zeros((batch_size, config.num_heads, seq_len, seq_len), jnp.float32)
        outputs["attention"] = jnp.stack([
            intermediates[f"layer_{layer - 1}"]["attention"]["attention_probabilities"][0]
            if layer else none for layer in layers])
    return outputs


def parse_layers(text: str) -> list[int]:
    """`--layers=-1,-2` as distinct layer numbers (resolved against a model later)."""
    try:
        layers = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise UserError(
            f"--layers={text!r}: expected comma-separated integers, e.g. -1,-2") from None
    if not layers or len(set(layers)) != len(layers):
        raise UserError(f"--layers={text!r}: expected one or more distinct layer numbers")
    return layers


def resolve_layers(requested: Sequence[int], num_layers: int) -> tuple[int, ...]:
    """Layer numbers in 0..num_layers (0 = embeddings); negatives count back from the last."""
    resolved = []
    for layer in requested:
        absolute = layer + num_layers + 1 if layer < 0 else layer
        if not 0 <= absolute <= num_layers:
            raise UserError(f"layer {layer} does not exist: the model has layers 0 (embedding "
                            f"output) to {num_layers}, or -1 to -{num_layers + 1}")
        resolved.append(absolute)
    return tuple(resolved)


def bucket_length(length: int, max_seq_len: int, per_octave: int = 2) -> int:
    """The padded length for a batch whose longest input is `length`, capped at `max_seq_len`.

    Buckets split each octave from 8 up into `per_octave` equal steps of at least 4 tokens.
    Training uses 2: 8, 12, 16, 24, 32, 48, 64, 96, 128, ...; a batch pads by less than
    half its length instead of up to double, which on real text (SST-2, War and Peace)
    cuts the padded tokens by 15-27%, for about twice the (few) compiled programs of a
    powers-of-two ladder. Inference (`padded_batches`: embed, features, search) uses 4:
    8, 12, 16, 20, 24, 28, 32, 40, 48, 56, 64, 80, ...; its forward-only programs compile in
    a fraction of a training step's time, and on the 10,000 War and Peace lines of
    bench/embed.py the padding over each batch's longest row falls from 1.18x to 1.09x
    (15 programs instead of 10).
    """
    if length <= 8:
        return min(8, max_seq_len)
    power = 8
    while True:
        step = max(power // per_octave, 4)
        for bucket in range(power + step, 2 * power + 1, step):
            if bucket >= length or bucket >= max_seq_len:
                return min(bucket, max_seq_len)
        power *= 2


def pool(hidden: np.ndarray, input_mask: np.ndarray, mode: str) -> np.ndarray:
    """(N, T, H) -> (N, H): the [CLS] vector, or the mean or maximum over real tokens (the
    names and meanings of `embed --pool`); 'none' keeps it."""
    if mode == "cls":
        return hidden[:, 0]
    if mode == "mean":
        weights = input_mask[..., None].astype(hidden.dtype)  # (N, T, 1)
        return (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1.0)
    if mode == "max":
        return np.where(input_mask[..., None] > 0, hidden, -np.inf).max(axis=1)
    return hidden


def combine(arrays: Sequence[np.ndarray], mode: str) -> np.ndarray:
    """Joins per-layer features: concatenated on the feature axis, or summed."""
    if mode == "concat":
        return np.concatenate(arrays, axis=-1)
    if mode == "sum":
        return np.sum(np.stack(arrays), axis=0)
    raise ValueError(f"unknown combine mode {mode!r}")


def _batches(lengths: np.ndarray, batch_size: int):
    """Row indices of each batch, shortest inputs first so that batches pad little."""
    order = np.argsort(lengths, kind="stable")
    return [order[start:start + batch_size] for start in range(0, len(order), batch_size)]


def _padded_batch(encoded: dict[str, np.ndarray], rows: np.ndarray, batch_size: int,
                  seq_len: int) -> dict[str, np.ndarray]:
    """The rows cut to `seq_len` and padded to `batch_size` rows (extra rows: one [PAD] token)."""
    batch = {}
    for name in ("input_ids", "segment_ids", "input_mask"):
        values = np.zeros((batch_size, seq_len), np.int32)
        selected = encoded[name][rows, :seq_len]
        values[:len(rows), :selected.shape[1]] = selected
        batch[name] = values
    batch["input_mask"][len(rows):, 0] = 1  # keeps the filler rows' softmax well defined
    return batch


def padded_batches(encoded: dict[str, np.ndarray], batch_size: int, max_seq_len: int):
    """Yields (rows, batch, seq_len): inputs sorted by length, each batch padded to a bucket.

    `rows` are indices into `encoded` (so results go back to input order); `batch` holds
    (batch_size, seq_len) int32 arrays, filler rows beyond len(rows) included.
    """
    lengths = encoded["input_mask"].sum(axis=1)
    for rows in _batches(lengths, batch_size):
        # Buckets depend on max_seq_len only, so any input file reuses the compilations.
        seq_len = bucket_length(int(lengths[rows].max()), max_seq_len, per_octave=4)
        yield rows, _padded_batch(encoded, rows, batch_size, seq_len), seq_len


def extract_features(config, params: dict, encoded: dict[str, np.ndarray],
                     layers: tuple[int, ...], max_seq_len: int, pooling: str = "none",
                     batch_size: int = 32, with_attention: bool = False, progress: bool = True
                     ) -> dict[str, dict[int, np.ndarray]]:
    """Runs the encoder over `encoded` (the tokenizer's `encode_for_model(texts, max_seq_len)`
    output, (N, T) with T the longest input).

    Returns {"hidden": {layer: (N, T, H) or pooled (N, H)}, "attention": {layer: (N, heads,
    T, T)}}, in input order. Unpooled features are zero at padding positions, so they do
    not depend on how inputs were batched.
    """
    from tqdm import tqdm

    config.check_seq_len(max_seq_len, "max_seq_len")
    count, total_len = encoded["input_mask"].shape
    encoder = encoder_params(config, params)
    batch_size = min(batch_size, count)  # a short input need not pay for a full batch
    hidden_shape = (count, config.hidden_dim) if pooling != "none" else (
        count, total_len, config.hidden_dim)
    hidden = {layer: np.zeros(hidden_shape, np.float32) for layer in layers}
    attention_layers = [layer for layer in layers if layer > 0] if with_attention else []
    attention = {layer: np.zeros((count, config.num_heads, total_len, total_len), np.float32)
                 for layer in attention_layers}
    with tqdm(total=count, unit="line", desc="features", disable=not progress) as bar:
        for rows, batch, seq_len in padded_batches(encoded, batch_size, max_seq_len):
            kept = min(seq_len, total_len)  # every real token lies within the longest input
            outputs = jax.device_get(encode(
                encoder, batch["input_ids"], batch["segment_ids"], batch["input_mask"],
                config=config, layers=layers, with_attention=bool(attention_layers)))
            mask = batch["input_mask"][:len(rows)]
            for index, layer in enumerate(layers):
                states = outputs["hidden_states"][index, :len(rows)] * mask[..., None]
                if pooling == "none":
                    hidden[layer][rows, :kept] = states[:, :kept]
                else:
                    hidden[layer][rows] = pool(states, mask, pooling)
                if layer in attention:
                    attention[layer][rows, :, :kept, :kept] = (
                        outputs["attention"][index, :len(rows), :, :kept, :kept])
            bar.update(len(rows))
    return dict(hidden=hidden, attention=attention)


@functools.partial(jax.jit, static_argnames=("config",))
def masked_token_probabilities(params: dict, input_ids: jax.Array, input_mask: jax.Array,
                               positions: jax.Array, *, config) -> jax.Array:
    """Softmax over the vocabulary at `positions` (B, P): (B, P, vocab), in float32. `params`
    hold the encoder and the masked-LM head (a pooler or NSP head beside them is unused)."""
    mlm_logits = family_of(config).masked_lm_model(config).apply(
        {"params": params}, input_ids, jnp.zeros_like(input_ids), input_mask, positions, False)
    return jax.nn.softmax(mlm_logits.astype(jnp.float32), axis=-1)


def masked_input(tokenizer, text: str, max_seq_len: int) -> tuple[list[int], list[int]]:
    """Token ids of `[CLS] text [SEP]` and the positions of its [MASK] tokens (the tokenizer
    reads the special tokens written in text)."""
    mask = tokenizer.id_to_token(tokenizer.mask_id)
    ids = [tokenizer.cls_id, *tokenizer.encode_batch([text])[0], tokenizer.sep_id]
    positions = [index for index, token in enumerate(ids) if token == tokenizer.mask_id]
    if not positions:
        plain = (" (this tokenizer reads special tokens as plain text: split_special_tokens "
                 "in its tokenizer_config.json)" if tokenizer.split_special_tokens else "")
        raise UserError(f"no {mask} in {text!r}: write {mask} where a word should be "
                        f"predicted{plain}")
    if len(ids) > max_seq_len:
        raise UserError(f"{text!r} is {len(ids)} tokens long; the model takes at most "
                        f"{max_seq_len}")
    return ids, positions


def fill_mask(config, params: dict, tokenizer, text: str, top_k: int = 5
              ) -> list[list[tuple[str, float]]]:
    """For each [MASK] in `text`, the `top_k` (token, probability) pairs, most likely first."""
    if "mlm_head" not in params:
        raise UserError("this model has no masked-LM head (it is an encoder only, such as "
                        "all-MiniLM-L6-v2's BertModel); fill-mask needs a BertForPreTraining, "
                        "BertForMaskedLM or ModernBertForMaskedLM checkpoint")
    ids, positions = masked_input(tokenizer, text, config.max_positions)
    seq_len = bucket_length(len(ids), config.max_positions)
    input_ids = np.full((1, seq_len), tokenizer.pad_id, np.int32)
    input_ids[0, :len(ids)] = ids
    input_mask = (np.arange(seq_len) < len(ids)).astype(np.int32)[None]  # (1, T)
    probabilities = np.asarray(masked_token_probabilities(
        params, input_ids, input_mask, np.array([positions], np.int32),
        config=config))[0]  # (P, vocab)
    top = np.argsort(-probabilities, axis=-1, kind="stable")[:, :top_k]  # (P, k)
    return [[(tokenizer.token_text(int(token)), float(row[token])) for token in tokens]
            for row, tokens in zip(probabilities, top)]

