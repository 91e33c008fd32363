"""The masked-LM corruption of google-research/bert (`create_masked_lm_predictions`), vectorised.

For each instance: num_to_predict = min(P, max(1, round(num_tokens * masked_lm_prob))),
num_tokens counting [CLS] and the [SEP]s; candidate words (every token, or with whole-word
masking a token and its continuation pieces) are visited in a random order and taken while
they fit, skipping a word that would overflow; of the chosen positions 80% become [MASK],
10% keep their token and 10% get a random token, drawn uniformly from the vocabulary (as the
original code does) or from the corpus unigram distribution (as textbooks describe it).
Whole-word masking groups a `##` piece with the token before it, as the original does,
except after [CLS] or [SEP], where the original would join it to the other segment's word;
the tokenizer tells which tokens continue a word (`continues_word`: a `##` WordPiece, a
SentencePiece or byte-level BPE piece without its word-start mark `▁` / `Ġ`).
"""

import numpy as np


def _choose_words(word_id: np.ndarray, num_words: np.ndarray, num_to_predict: np.ndarray,
                  rng: np.random.Generator) -> np.ndarray:
    """Which words (N, T + 1) are chosen: a random order per row, greedy with skipping.

    word_id (N, T): 1..num_words for candidate tokens, 0 elsewhere.
    """
    rows, seq_len = word_id.shape
    word_len = np.zeros((rows, seq_len + 1), np.int64)
    np.add.at(word_len, (np.arange(rows)[:, None], word_id), 1)
    word_len[:, 0] = 0
    keys = rng.random((rows, seq_len + 1))
    keys[np.arange(seq_len + 1)[None, :] > num_words[:, None]] = 2.0  # no such word
    keys[:, 0] = 2.0
    order = np.argsort(keys, axis=1)  # (N, T + 1): word ids in a random order
    ordered_len = np.take_along_axis(word_len, order, axis=1)
    chosen = np.zeros((rows, seq_len + 1), bool)
    filled = np.zeros(rows, np.int64)
    for rank in range(int(num_words.max(initial=0))):
        fits = (ordered_len[:, rank] > 0) & (filled + ordered_len[:, rank] <= num_to_predict)
        filled += np.where(fits, ordered_len[:, rank], 0)
        chosen[np.arange(rows), order[:, rank]] = fits
    return chosen


def choose_positions(candidates: np.ndarray, num_tokens: np.ndarray, max_predictions: int,
                     masked_lm_prob: float, rng: np.random.Generator,
                     continuation: np.ndarray | None = None) -> np.ndarray:
    """Positions (N, P) to predict, ascending, padded with seq_len.

    candidates (N, T) bool: real, non-special tokens. continuation (N, T) bool marks a
    token that continues the previous one's word (whole-word masking); None masks tokens.
    """
    rows, seq_len = candidates.shape
    num_to_predict = np.minimum(
        max_predictions, np.maximum(1, np.round(num_tokens * masked_lm_prob).astype(np.int64)))
    position = np.broadcast_to(np.arange(seq_len), (rows, seq_len))
    if continuation is None:
        # Every word is one token: the first num_to_predict in a random order.
        keys = np.where(candidates, rng.random((rows, seq_len), np.float32), 2.0)
        if max_predictions < seq_len:  # the P smallest keys, then only those sorted
            smallest = np.argpartition(keys, max_predictions - 1, axis=1)[:, :max_predictions]
            ranks = np.argsort(np.take_along_axis(keys, smallest, 1), axis=1)
            order = np.take_along_axis(smallest, ranks, 1)
        else:
            order = np.argsort(keys, axis=1)
        rank = np.arange(order.shape[1])[None, :]
        taken = (rank < num_to_predict[:, None]) & np.take_along_axis(candidates, order, 1)
        chosen_positions = np.where(taken, order, seq_len)
    else:
        starts = candidates & ~(continuation & np.roll(candidates, 1, axis=1))
        word_id = np.where(candidates, np.cumsum(starts, axis=1), 0)
        chosen_words = _choose_words(word_id, word_id.max(axis=1, initial=0), num_to_predict,
                                     rng)
        chosen = candidates & np.take_along_axis(chosen_words, word_id, axis=1)
        chosen_positions = np.where(chosen, position, seq_len)
    chosen_positions = np.sort(chosen_positions, axis=1)
    if chosen_positions.shape[1] < max_predictions:
        pad = np.full((rows, max_predictions - chosen_positions.shape[1]), seq_len)
        chosen_positions = np.concatenate([chosen_positions, pad], axis=1)
    return chosen_positions[:, :max_predictions]


def apply_masks(input_ids: np.ndarray, positions: np.ndarray, mask_id: int,
                replacement_cdf: np.ndarray | int, rng: np.random.Generator) -> dict:
    """Corrupts input_ids (N, T) in place at positions (N, P) (seq_len = padding).

    `replacement_cdf`: the vocabulary size for uniform random tokens, or a cumulative
    distribution (V,) over token ids for unigram ones. Returns the features
    masked_lm_positions, masked_lm_ids (N, P) int32 and masked_lm_weights (N, P) float32.
    """
    rows, seq_len = input_ids.shape
    weights = positions < seq_len
    positions = np.where(weights, positions, 0)
    row_index = np.arange(rows)[:, None]
    labels = np.where(weights, input_ids[row_index, positions], 0)
    draw = rng.random(positions.shape)
    if isinstance(replacement_cdf, int):
        random_ids = rng.integers(0, replacement_cdf, positions.shape)
    else:
        random_ids = np.searchsorted(replacement_cdf, rng.random(positions.shape), side="right")
    replacement = np.where(draw < 0.8, mask_id, np.where(draw < 0.9, labels, random_ids))
    row_index, column = np.nonzero(weights)
    input_ids[row_index, positions[row_index, column]] = replacement[row_index, column]
    return dict(masked_lm_positions=positions.astype(np.int32),
                masked_lm_ids=labels.astype(np.int32),
                masked_lm_weights=weights.astype(np.float32))


def unigram_cdf(tokens: np.ndarray, vocab_size: int, excluded: tuple[int, ...]) -> np.ndarray:
    """The cumulative unigram distribution (V,) of `tokens`, special tokens excluded."""
    counts = np.bincount(tokens, minlength=vocab_size).astype(np.float64)
    counts[list(excluded)] = 0
    cdf = np.cumsum(counts)
    return cdf / cdf[-1]
