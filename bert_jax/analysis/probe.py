"""The most-attended-word probe of Clark et al. (2019), "What Does BERT Look At?", section 4.

Each attention head is a classifier: given a word, it predicts the word it attends to most
(its attention to itself ignored) as that word's syntactic head ("dependent->head"), or,
read the other way, the word that attends most to it ("head->dependent"). Both are scored
against a treebank's gold heads, per relation, next to fixed-offset baselines that always
predict the word `offset` positions away. Procedure as in the paper's code
(github.com/clarkkev/attention-analysis):
  - word-level attention from word pieces (`word_attention`), [CLS]/[SEP] excluded;
  - a word's predictions can never be the root (0), so `root` words only score for offsets
    that fall off the sentence's start or end, which predict the root;
  - possessives: a `nmod:poss` word followed by the clitic 's (or ') is scored by the
    clitic's prediction, since the clitic, not the possessor, carries the relation in the
    paper's treebank (Stanford Dependencies).
Layers and heads are numbered from 1 in names ("layer-head"), from 0 in arrays.
"""

import dataclasses

import numpy as np


DIRECTIONS = ("dependent->head", "head->dependent")
OFFSETS = (-3, -2, -1, 1, 2, 3)
POSSESSIVE_CLITICS = ("'s", "'", "\u2019s", "\u2019")
POSSESSIVE = "nmod:poss"
ALL = "all"
ROOT = "root"


def head_predictions(attention: np.ndarray) -> np.ndarray:
    """(L, H, W, W) word attention -> (2, L, H, W) predicted heads, 1-based word numbers.

    [0] is dependent->head (argmax of the word's own row), [1] head->dependent (argmax of
    its column: the word attending to it most). Attention to oneself is ignored.
    """
    num_words = attention.shape[-1]
    scores = attention.copy()
    scores[..., np.arange(num_words), np.arange(num_words)] = -np.inf
    if num_words == 1:  # a one-word sentence has no other word to predict
        scores[...] = 0.0
    forward = scores.argmax(axis=-1)  # (L, H, W)
    backward = scores.argmax(axis=-2)  # (L, H, W): over the attending words of each column
    return np.stack([forward, backward]) + 1


def offset_predictions(num_words: int) -> np.ndarray:
    """(len(OFFSETS), W): word i's prediction is word i + offset, clipped to the sentence;
    falling off either end predicts the root (0) on the left and the last word on the right,
    as in the paper's code."""
    positions = np.arange(1, num_words + 1)[None] + np.array(OFFSETS)[:, None]  # (O, W)
    return np.clip(positions, 0, num_words)


def scored_positions(words, relations) -> np.ndarray:
    """(W,) the word whose prediction counts for each word: itself, or the clitic after a
    possessor (see the module docstring)."""
    positions = np.arange(len(words))
    for index, relation in enumerate(relations[:-1]):
        if relation == POSSESSIVE and words[index + 1].lower() in POSSESSIVE_CLITICS:
            positions[index] = index + 1
    return positions


@dataclasses.dataclass
class ProbeResult:
    relations: list[str]  # sorted by count, most frequent first; "all" last
    counts: np.ndarray  # (R,) scored words per relation
    head_accuracy: np.ndarray  # (R, 2, L, H): direction, layer, head
    offset_accuracy: np.ndarray  # (R, len(OFFSETS))

    def index(self, relation: str) -> int:
        return self.relations.index(relation)

    def best_head(self, relation: str) -> dict:
        accuracy = self.head_accuracy[self.index(relation)]
        direction, layer, head = np.unravel_index(np.argmax(accuracy), accuracy.shape)
        return dict(layer=int(layer) + 1, head=int(head) + 1, direction=DIRECTIONS[direction],
                    accuracy=float(accuracy[direction, layer, head]))

    def best_offset(self, relation: str) -> dict:
        accuracy = self.offset_accuracy[self.index(relation)]
        best = int(np.argmax(accuracy))
        return dict(offset=OFFSETS[best], accuracy=float(accuracy[best]))

    def rows(self, min_count: int = 100) -> list[dict]:
        """One row per relation with at least `min_count` words, then the "all" row.

        `root` has no row: its head is the sentence's root, which no attention head can
        predict (its words still count in "all", as in the paper's code).
        """
        rows = []
        for relation, count in zip(self.relations, self.counts):
            if relation != ROOT and (count >= min_count or relation == ALL):
                best_head, best_offset = self.best_head(relation), self.best_offset(relation)
                rows.append(dict(relation=relation, count=int(count), best_head=best_head,
                                 best_offset=best_offset,
                                 margin=best_head["accuracy"] - best_offset["accuracy"]))
        return rows


class ProbeCounts:
    """Correct predictions per relation, summed over sentences."""

    def __init__(self, num_layers: int, num_heads: int):
        self.shape = (len(DIRECTIONS), num_layers, num_heads)
        self.head_correct: dict[str, np.ndarray] = {}  # relation -> (2, L, H)
        self.offset_correct: dict[str, np.ndarray] = {}  # relation -> (O,)
        self.counts: dict[str, int] = {}

    def add(self, words, heads, relations, attention: np.ndarray) -> None:
        """One sentence: its words, gold heads (1-based, 0 = root), relations, and its
        (L, H, W, W) word-level attention."""
        gold = np.asarray(heads)
        positions = scored_positions(words, relations)
        head_hits = head_predictions(attention)[..., positions] == gold  # (2, L, H, W)
        offset_hits = offset_predictions(len(words))[:, positions] == gold  # (O, W)
        relations = np.asarray(relations)
        for relation in np.unique(relations):
            chosen = relations == relation
            if relation not in self.counts:
                self.counts[relation] = 0
                self.head_correct[relation] = np.zeros(self.shape, np.int64)
                self.offset_correct[relation] = np.zeros(len(OFFSETS), np.int64)
            self.counts[relation] += int(chosen.sum())
            self.head_correct[relation] += head_hits[..., chosen].sum(axis=-1)
            self.offset_correct[relation] += offset_hits[:, chosen].sum(axis=-1)

    def result(self) -> ProbeResult:
        relations = sorted(self.counts, key=lambda name: (-self.counts[name], name))
        counts = np.array([self.counts[name] for name in relations] + [sum(self.counts.values())])
        head = np.stack([self.head_correct[name] for name in relations])
        offset = np.stack([self.offset_correct[name] for name in relations])
        head = np.concatenate([head, head.sum(axis=0, keepdims=True)])
        offset = np.concatenate([offset, offset.sum(axis=0, keepdims=True)])
        safe = np.maximum(counts, 1)
        return ProbeResult(relations + [ALL], counts, head / safe[:, None, None, None],
                           offset / safe[:, None])

