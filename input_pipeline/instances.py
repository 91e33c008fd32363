"""BERT's training instances from tokenised documents, as google-research/bert makes them.

`create_instances_from_document`, `truncate_seq_pair` and the `[CLS] A [SEP] B [SEP]`
layout of the original `create_pretraining_data.py`, restructured for speed: the chunking
loop walks sentence *offsets* (one bisect per chunk, no token lists are built), truncation
is solved in closed form for a whole batch, and the (N, T) arrays are gathered in one
numpy step. The distribution of instances is the original's; the random stream is not.

Random-next segments come from another document of the same window (the documents of one
work unit, see `create_data.py`) rather than from the whole corpus, so memory stays bounded.
"""

import bisect
import random
from dataclasses import dataclass, fields

import numpy as np


@dataclass
class Corpus:
    """The tokenised documents of one window: all token ids in one flat array.

    tokens (num_tokens,) int32; sentence_starts (num_sentences + 1,) int64 offsets into
    `tokens`; document_starts (num_documents + 1,) offsets into the sentences.
    """
    tokens: np.ndarray
    sentence_starts: np.ndarray
    document_starts: np.ndarray

    def __post_init__(self):
        # The chunking loop indexes these one element at a time: Python ints are far faster.
        self.starts_list = self.sentence_starts.tolist()
        self.document_starts_list = self.document_starts.tolist()

    @classmethod
    def from_lengths(cls, tokens: np.ndarray, sentence_lengths: np.ndarray,
                     document_sizes: np.ndarray) -> "Corpus":
        """From flat tokens, each sentence's token count and each document's sentence count.

        Drops sentences without tokens and then documents without sentences, as the
        original does.
        """
        document_of = np.repeat(np.arange(len(document_sizes)), document_sizes)
        kept = sentence_lengths > 0
        kept_per_document = np.bincount(document_of[kept], minlength=len(document_sizes))
        kept_per_document = kept_per_document[kept_per_document > 0]
        sentence_starts = np.zeros(int(kept.sum()) + 1, np.int64)
        np.cumsum(sentence_lengths[kept], out=sentence_starts[1:])
        document_starts = np.zeros(len(kept_per_document) + 1, np.int64)
        np.cumsum(kept_per_document, out=document_starts[1:])
        return cls(np.asarray(tokens, np.int32), sentence_starts, document_starts)

    @property
    def num_documents(self) -> int:
        return len(self.document_starts) - 1


@dataclass
class Spans:
    """Segment A and B of each instance as token ranges in `Corpus.tokens`; all (N,) arrays."""
    a_start: np.ndarray
    a_len: np.ndarray
    b_start: np.ndarray
    b_len: np.ndarray
    is_random_next: np.ndarray

    def take(self, index) -> "Spans":
        """The instances at `index` (a slice, or an array of indices)."""
        return Spans(*(getattr(self, field.name)[index] for field in fields(self)))

    @classmethod
    def concatenate(cls, parts: list["Spans"]) -> "Spans":
        return cls(*(np.concatenate([getattr(part, field.name) for part in parts])
                     for field in fields(cls)))


def _random_other_document(document: int, num_documents: int, rng: random.Random) -> int:
    for _ in range(10):  # as the original: try ten times to avoid the same document
        other = int(rng.random() * num_documents)
        if other != document:
            break
    return other


def document_spans(corpus: Corpus, document: int, max_num_tokens: int, short_seq_prob: float,
                   rng: random.Random, out: list) -> None:
    """Appends (a_start, a_len, b_start, b_len, is_random_next) of one document's instances.

    The original's loop over sentences, with each chunk's end found by bisecting the
    cumulative token offsets instead of adding sentences one at a time.
    """
    starts, document_starts = corpus.starts_list, corpus.document_starts_list
    first, end = document_starts[document], document_starts[document + 1]
    uniform, bisect_left, append = rng.random, bisect.bisect_left, out.append  # hot loop
    target = max_num_tokens
    if uniform() < short_seq_prob:
        target = 2 + int(uniform() * (max_num_tokens - 1))  # randint(2, max_num_tokens)
    i = first
    while i < end:
        # The chunk is sentences [i, k): the fewest reaching `target` tokens, or the rest.
        k = min(bisect_left(starts, starts[i] + target, i + 1, end + 1), end)
        a_end = i + 1 + (int(uniform() * (k - i - 1)) if k - i >= 2 else 0)
        a_start, a_len = starts[i], starts[a_end] - starts[i]
        if k - i == 1 or uniform() < 0.5:
            other = _random_other_document(document, corpus.num_documents, rng)
            other_first, other_end = document_starts[other], document_starts[other + 1]
            b_first = other_first + int(uniform() * (other_end - other_first))
            b_end = min(bisect_left(starts, starts[b_first] + target - a_len, b_first + 1,
                                    other_end + 1), other_end)
            append((a_start, a_len, starts[b_first], starts[b_end] - starts[b_first], 1))
            i = a_end  # the unused sentences of the chunk are put back
        else:
            append((a_start, a_len, starts[a_end], starts[k] - starts[a_end], 0))
            i = k


def truncate_pairs(spans: Spans, max_num_tokens: int, rng: np.random.Generator) -> Spans:
    """The original `truncate_seq_pair` for all instances at once.

    It removes one token at a time from the longer segment (B on a tie), from the front or
    the back with equal chance. So the longer one is cut down to the shorter, then the two
    alternate starting with B; the front count of each is Binomial(removed, 1/2).
    """
    a_len, b_len = spans.a_len, spans.b_len
    excess = np.maximum(a_len + b_len - max_num_tokens, 0)
    gap = np.abs(a_len - b_len)
    beyond_gap = np.maximum(excess - gap, 0)  # removals after the two are equal
    a_longer = a_len > b_len
    a_cut = np.where(a_longer, np.minimum(excess, gap), 0) + beyond_gap // 2
    b_cut = np.where(a_longer, 0, np.minimum(excess, gap)) + (beyond_gap + 1) // 2
    a_front = rng.binomial(a_cut, 0.5)
    b_front = rng.binomial(b_cut, 0.5)
    return Spans(spans.a_start + a_front, a_len - a_cut, spans.b_start + b_front,
                 b_len - b_cut, spans.is_random_next)


def assemble(corpus: Corpus, spans: Spans, seq_len: int, cls_id: int, sep_id: int,
             pad_id: int, continues: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """`[CLS] A [SEP] B [SEP]` padded to seq_len: input_ids, segment_ids, input_mask (N, T),
    and `candidates` (N, T) bool, the segments' tokens. With `continues` (num_tokens,) bool,
    whether each corpus token continues its word, also `continuation` (N, T) bool."""
    # int32 throughout: offsets into one unit's tokens are small, and halve the memory traffic.
    position = np.arange(seq_len, dtype=np.int32)[None, :]  # (1, T)
    a_len = spans.a_len.astype(np.int32)[:, None]  # (N, 1)
    b_len = spans.b_len.astype(np.int32)[:, None]
    in_a = (position >= 1) & (position < 1 + a_len)
    in_b = (position >= 2 + a_len) & (position < 2 + a_len + b_len)
    a_start = spans.a_start.astype(np.int32)[:, None]
    b_start = spans.b_start.astype(np.int32)[:, None]
    source = np.where(in_a, a_start + (position - 1),
                      np.where(in_b, b_start + (position - 2) - a_len, 0))
    length = 3 + a_len + b_len
    input_ids = np.where(in_a | in_b, corpus.tokens[source], pad_id)
    input_ids = np.where((position == 1 + a_len) | (position == length - 1), sep_id, input_ids)
    input_ids[:, 0] = cls_id
    segment_ids = (position >= 2 + a_len) & (position < length)
    features = dict(input_ids=input_ids.astype(np.int32),
                    segment_ids=segment_ids.astype(np.int32),
                    input_mask=(position < length).astype(np.int32), candidates=in_a | in_b)
    if continues is not None:
        features["continuation"] = (in_a | in_b) & continues[source]
    return features


def create_spans(corpus: Corpus, max_seq_len: int, short_seq_prob: float,
                 rng: random.Random) -> Spans:
    """One pass of the original over every document of the window (one dupe)."""
    rows = []
    for document in range(corpus.num_documents):
        document_spans(corpus, document, max_seq_len - 3, short_seq_prob, rng, rows)
    table = np.asarray(rows, np.int64).reshape(-1, 5)
    return Spans(*(table[:, column] for column in range(5)))
