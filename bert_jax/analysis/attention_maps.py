"""Every layer's attention probabilities for one text, or for a stream of pre-split sentences.

Both run the encoder through `bert_jax.inference.extract_features`, which collects the
attention maps the model `sow`s; nothing here re-implements the model.
"""

import dataclasses
import warnings
from collections.abc import Iterable, Iterator, Sequence

import numpy as np

from bert_jax import inference
from bert_jax.models.config import BertConfig
from input_pipeline.tasks import word_labels


class TruncationWarning(UserWarning):
    """An input had more tokens than the model (or --max-seq-len) takes and was cut."""


@dataclasses.dataclass(frozen=True)
class TextAttention:
    tokens: list[str]  # word pieces, [CLS] ... [SEP] (... [SEP])
    segment_ids: np.ndarray  # (T,) int32: 0 for the first text, 1 for the second
    attention: np.ndarray  # (L, H, T, T) float32: layer l+1, head h, from token q to token k
    truncated_from: int | None  # the untruncated length in tokens, if it was cut


def _all_layers_attention(config: BertConfig, params: dict, encoded: dict[str, np.ndarray],
                          max_seq_len: int, batch_size: int) -> np.ndarray:
    """(N, L, H, T, T) attention of encoder layers 1..L, zero at padding."""
    layers = tuple(range(1, config.num_layers + 1))
    results = inference.extract_features(config, params, encoded, layers, max_seq_len,
                                         batch_size=batch_size, with_attention=True,
                                         progress=False)
    return np.stack([results["attention"][layer] for layer in layers], axis=1)


def text_attention(config: BertConfig, params: dict, tokenizer, text: str,
                   text_b: str | None = None, max_seq_len: int | None = None) -> TextAttention:
    """Attention of every layer and head for `[CLS] text [SEP] (text_b [SEP])`.

    An input longer than `max_seq_len` (default: the model's positions) is truncated,
    longest text first, with a TruncationWarning.
    """
    limit = min(max_seq_len or config.max_positions, config.max_positions)
    item = text if text_b is None else (text, text_b)
    full_length = int(tokenizer.encode_for_model([item], 1 << 30)["input_mask"].sum())
    truncated_from = None
    if full_length > limit:
        truncated_from = full_length
        warnings.warn(f"the input is {full_length} tokens long, more than the limit of "
                      f"{limit} (max_seq_len, at most the model's {config.max_positions} "
                      f"positions); it was truncated to {limit} tokens", TruncationWarning,
                      stacklevel=2)
    encoded = tokenizer.encode_for_model([item], limit)
    attention = _all_layers_attention(config, params, encoded, limit, batch_size=1)[0]
    tokens = [tokenizer.token_text(int(index)) for index in encoded["input_ids"][0]]
    return TextAttention(tokens, encoded["segment_ids"][0], attention, truncated_from)


@dataclasses.dataclass(frozen=True)
class SentenceAttention:
    item: object  # whatever the caller passed with the words (e.g. a conllu.Sentence)
    tokens: list[str]  # [CLS] pieces... [SEP]
    word_ids: np.ndarray  # (T,) the word of each token, -1 for [CLS]/[SEP]
    attention: np.ndarray  # (L, H, T, T) float32


def _encode_chunk(tokenizer, pieces: list[list[list[int]]]) -> dict[str, np.ndarray]:
    """[CLS] pieces [SEP] for each sentence, padded: input_ids/segment_ids/input_mask (N, T)."""
    rows = [[tokenizer.cls_id, *[i for word in sentence for i in word], tokenizer.sep_id]
            for sentence in pieces]
    seq_len = max(len(row) for row in rows)
    input_ids = np.full((len(rows), seq_len), tokenizer.pad_id, np.int32)
    input_mask = np.zeros((len(rows), seq_len), np.int32)
    for index, row in enumerate(rows):
        input_ids[index, :len(row)] = row
        input_mask[index, :len(row)] = 1
    return dict(input_ids=input_ids, segment_ids=np.zeros_like(input_ids), input_mask=input_mask)


def sentence_attention(config: BertConfig, params: dict, tokenizer,
                       sentences: Iterable[tuple[object, Sequence[str]]], max_seq_len: int,
                       batch_size: int = 32, on_skip=None) -> Iterator[SentenceAttention]:
    """Streams (item, words) pairs through the model, `batch_size` sentences per forward pass.

    Each sentence is `[CLS] pieces of every word [SEP]`; one that needs more than
    `max_seq_len` tokens is skipped and reported to `on_skip(item, length)`. Results come
    in input order.
    """
    from bert_jax.analysis.word_attention import piece_word_ids

    def flush(chunk):
        pieces = [entry[2] for entry in chunk]
        attention = _all_layers_attention(config, params, _encode_chunk(tokenizer, pieces),
                                          max_seq_len, batch_size)  # (N, L, H, T, T)
        for (item, _, word_pieces), maps in zip(chunk, attention):
            word_ids = piece_word_ids([len(word) for word in word_pieces])
            length = len(word_ids)
            ids = [tokenizer.cls_id, *[i for word in word_pieces for i in word],
                   tokenizer.sep_id]
            yield SentenceAttention(item, [tokenizer.token_text(i) for i in ids], word_ids,
                                    maps[:, :, :length, :length])

    # Several batches per chunk let extract_features sort by length and pad little.
    chunk, chunk_size = [], batch_size * 8
    for item, words in sentences:
        word_pieces = word_labels.word_pieces(tokenizer, [words])[0]
        length = sum(len(word) for word in word_pieces) + 2
        if length > max_seq_len:
            if on_skip:
                on_skip(item, length)
            continue
        chunk.append((item, words, word_pieces))
        if len(chunk) == chunk_size:
            yield from flush(chunk)
            chunk = []
    if chunk:
        yield from flush(chunk)
