"""Surface statistics of each head (Clark et al. 2019, section 3), averaged over tokens.

For every layer and head: the mean entropy of a token's attention distribution (nats), and
the mean share of a token's attention that goes to [CLS], to [SEP], to punctuation and to
the token itself. Averages run over every real token (word pieces, [CLS] and [SEP]
included) of every sentence, so long sentences weigh more, as in the paper.
"""

import unicodedata

import numpy as np

SPECIAL = ("[CLS]", "[SEP]")
NAMES = ("entropy", "to_cls", "to_sep", "to_punctuation", "to_self")
TITLES = dict(entropy="entropy (nats)", to_cls="attention to [CLS]", to_sep="attention to [SEP]",
              to_punctuation="attention to punctuation", to_self="attention to itself")


def is_punctuation(token: str) -> bool:
    """A word piece made only of Unicode punctuation (its ## continuation mark aside)."""
    text = token[2:] if token.startswith("##") and len(token) > 2 else token
    return token not in SPECIAL and bool(text) and all(
        unicodedata.category(character).startswith("P") for character in text)


def token_masks(tokens: list[str]) -> dict[str, np.ndarray]:
    """(T,) bool masks of the attended tokens each share counts."""
    return dict(to_cls=np.array([token == "[CLS]" for token in tokens]),
                to_sep=np.array([token == "[SEP]" for token in tokens]),
                to_punctuation=np.array([is_punctuation(token) for token in tokens]))


class StatisticsAccumulator:
    """Sums over attending tokens; `result()` divides by their number."""

    def __init__(self, num_layers: int, num_heads: int):
        self.sums = {name: np.zeros((num_layers, num_heads)) for name in NAMES}
        self.uniform_entropy = 0.0  # what uniform attention over the same tokens would give
        self.tokens = 0

    def add(self, attention: np.ndarray, tokens: list[str]) -> None:
        """One input's (L, H, T, T) attention over its T real tokens."""
        probabilities = attention.astype(np.float64)
        logs = np.log(np.where(probabilities > 0, probabilities, 1.0))
        self.sums["entropy"] += -(probabilities * logs).sum(axis=(-1, -2))
        for name, mask in token_masks(tokens).items():
            self.sums[name] += probabilities[..., mask].sum(axis=(-1, -2))
        self.sums["to_self"] += np.trace(probabilities, axis1=-2, axis2=-1)
        self.uniform_entropy += len(tokens) * np.log(len(tokens))
        self.tokens += len(tokens)

    def result(self) -> dict:
        """{name: (L, H) mean per attending token} and "uniform_entropy", a float."""
        count = max(self.tokens, 1)
        means = {name: total / count for name, total in self.sums.items()}
        return {**means, "uniform_entropy": self.uniform_entropy / count}


def attention_statistics(attention: np.ndarray, tokens: list[str]) -> dict:
    """The statistics of one input's (L, H, T, T) attention."""
    accumulator = StatisticsAccumulator(*attention.shape[:2])
    accumulator.add(attention, tokens)
    return accumulator.result()
