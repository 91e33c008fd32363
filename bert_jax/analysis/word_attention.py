"""Word-level attention from word-piece attention, as Clark et al. (2019) convert it.

Attention *to* a word that the tokenizer split is the sum of the attention to its pieces
(it is a share of the attending token's attention); attention *from* a split word is the
mean of its pieces' rows (each piece is one attending token). Tokens that belong to no word
([CLS], [SEP], padding) are dropped on both axes without renormalising, so a word's row sums
to its share of attention on real words: at most 1.
"""

import numpy as np


def piece_word_ids(pieces_per_word: list[int], cls: bool = True, sep: bool = True
                   ) -> np.ndarray:
    """(T,) int: the word each token belongs to, -1 for [CLS]/[SEP].

    `pieces_per_word[w]` is how many word pieces word w became; the tokens are laid out
    as `[CLS] pieces... [SEP]`.
    """
    ids = [np.full(count, word) for word, count in enumerate(pieces_per_word)]
    parts = ([np.array([-1])] if cls else []) + ids + ([np.array([-1])] if sep else [])
    return np.concatenate(parts).astype(np.int64)


def word_attention(attention: np.ndarray, word_ids: np.ndarray) -> np.ndarray:
    """(..., T, T) token attention -> (..., W, W) word attention.

    `word_ids` (T,) gives each token's word (0..W-1), or -1 for a token outside every word;
    W = word_ids.max() + 1. Rows are attending words, columns attended words.
    """
    word_ids = np.asarray(word_ids)
    num_words = int(word_ids.max()) + 1
    if attention.shape[-1] != len(word_ids) or attention.shape[-2] != len(word_ids):
        raise ValueError(f"attention {attention.shape} does not fit {len(word_ids)} word ids")
    membership = (word_ids[:, None] == np.arange(num_words)[None]).astype(attention.dtype)  # (T, W)
    counts = membership.sum(axis=0)  # (W,)
    if (counts == 0).any():
        raise ValueError(f"words {np.flatnonzero(counts == 0).tolist()} have no word piece")
    to_words = attention @ membership  # (..., T, W): summed over the pieces of each target
    mean_from = (membership / counts).T  # (W, T): averages the rows of each source's pieces
    return np.einsum("wt,...tv->...wv", mean_from, to_words)
