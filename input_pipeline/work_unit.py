"""One work unit of the shard writer: a window of documents in, serialized Examples out.

Runs in a worker process (or in-process with one worker). Everything random is seeded by
(seed, unit index, dupe), so a unit's output does not depend on which process ran it or
how many there are. Objective mlm_nsp makes BERT's masked segment pairs (`instances.py`,
`masking.py`); objective mlm makes unmasked `[CLS] text [SEP]` sequences
(`mlm_sequences.py`), once each (no dupes: the reader draws new masks every epoch).
"""

import random
from dataclasses import asdict, dataclass

import numpy as np

from input_pipeline import example_codec, instances, masking, mlm_sequences, packing

_BATCH_ROWS = 2048  # instances assembled, masked and serialized together


@dataclass(frozen=True)
class Settings:
    """Every setting that shapes the instances (also recorded in the manifest)."""
    max_seq_len: int = 128  # tokens per instance, [CLS] and [SEP]s included
    max_predictions: int = 20  # masked positions stored per instance
    masked_lm_prob: float = 0.15  # fraction of tokens to predict (0: write unmasked shards)
    dupe_factor: int = 10  # passes over the corpus, each with fresh segments and masks
    short_seq_prob: float = 0.1  # chance a document uses a shorter random target length
    random_token: str = "uniform"  # 10% replacements: "uniform" (as the code) or "unigram"
    whole_word_mask: bool = False  # mask all pieces of a word together
    seed: int = 12345  # the output is a function of this and the inputs only
    max_sequences_per_row: int = 1  # instances packed into a row (1: unpacked, the original)
    objective: str = "mlm_nsp"  # mlm_nsp: BERT's pairs, masked; mlm: sequences, masks when read

    def to_dict(self) -> dict:
        """The settings that shaped the rows: objective mlm's have no masks and no pairs."""
        values = asdict(self)
        if self.objective == "mlm":
            for key in MASK_AND_PAIR_SETTINGS:
                del values[key]
        return values


# Settings that only objective mlm_nsp uses (its masks and pairs are made at creation).
MASK_AND_PAIR_SETTINGS = ("max_predictions", "masked_lm_prob", "dupe_factor",
                          "short_seq_prob", "random_token", "whole_word_mask")


@dataclass
class UnitResult:
    """A unit's records in their final (shuffled) order, as one buffer and row offsets."""
    index: int
    buffer: np.ndarray
    offsets: np.ndarray
    num_documents: int
    num_sentences: int
    num_tokens: int
    masked_tokens: int
    long_sentences: int = 0  # sentences longer than an instance's token budget
    dropped_tokens: int = 0  # their tokens beyond that budget: no instance can hold them
    num_instances: int = 0  # instances in the records (more than records when packed)
    real_tokens: int = 0  # tokens of the records that are not padding


def _spans_for_all_dupes(corpus, settings: Settings, unit_index: int) -> instances.Spans:
    parts = []
    for dupe in range(settings.dupe_factor):
        rng = random.Random(f"{settings.seed}/{unit_index}/{dupe}")
        parts.append(instances.create_spans(corpus, settings.max_seq_len,
                                            settings.short_seq_prob, rng))
    return instances.Spans.concatenate(parts)


def _continues_word(corpus, tokenizer) -> np.ndarray:
    """(num_tokens,) bool: each corpus token continues the word of the token before it; a
    sentence's first token starts a word (a byte-level BPE's has no `Ġ`: it had no space)."""
    continues = tokenizer.continues_word(corpus.tokens)
    continues[corpus.sentence_starts[:-1]] = False
    return continues


def _features(corpus, spans, tokenizer, settings, replacement, continues, rng) -> dict:
    """Assembled and masked features of some instances, (N, T) and (N, P) arrays."""
    features = instances.assemble(corpus, spans, settings.max_seq_len, tokenizer.cls_id,
                                  tokenizer.sep_id, tokenizer.pad_id, continues)
    # Special tokens written in the text are never masked, as [CLS] and [SEP] are not.
    candidates = features.pop("candidates") & ~np.isin(features["input_ids"],
                                                       tokenizer.special_ids)
    continuation = features.pop("continuation", None)
    rows = len(spans.a_len)
    if settings.masked_lm_prob > 0:
        positions = masking.choose_positions(
            candidates, features["input_mask"].sum(axis=1), settings.max_predictions,
            settings.masked_lm_prob, rng, continuation)
        features.update(masking.apply_masks(features["input_ids"], positions,
                                            tokenizer.mask_id, replacement, rng))
    else:  # unmasked shards, for masks drawn in the reader (dynamic masking)
        features.update(masked_lm_positions=np.zeros((rows, settings.max_predictions), np.int32),
                        masked_lm_ids=np.zeros((rows, settings.max_predictions), np.int32),
                        masked_lm_weights=np.zeros((rows, settings.max_predictions), np.float32))
    features["next_sentence_labels"] = spans.is_random_next.astype(np.int32)
    return features


def process_unit(unit_index: int, documents: list[list[str]], tokenizer,
                 settings: Settings) -> UnitResult:
    """Tokenise a window of documents and turn it into serialized training instances."""
    sentences = [sentence for document in documents for sentence in document]
    tokens, lengths = tokenizer.encode_corpus(sentences)
    corpus = instances.Corpus.from_lengths(tokens, lengths, np.array([len(d) for d in documents]))
    rng = np.random.default_rng([settings.seed, unit_index])
    if settings.objective == "mlm":
        return _mlm_unit(unit_index, corpus, tokenizer, settings, rng)
    # A sentence is never split across instances (as in the original), so the tokens of one
    # longer than [CLS] A [SEP] B [SEP] can hold are cut by truncation in every dupe.
    budget = settings.max_seq_len - 3
    long = np.asarray(lengths) > budget
    overflow = dict(long_sentences=int(long.sum()),
                    dropped_tokens=int((np.asarray(lengths)[long] - budget).sum()))
    spans = _spans_for_all_dupes(corpus, settings, unit_index) if corpus.num_documents else None
    if spans is None or not len(spans.a_len):
        return UnitResult(unit_index, np.zeros(0, np.uint8), np.zeros(1, np.int64),
                          corpus.num_documents, len(corpus.sentence_starts) - 1, len(tokens), 0,
                          **overflow)
    spans = instances.truncate_pairs(spans, settings.max_seq_len - 3, rng)
    # Shuffle within the unit, so each shard mixes documents and dupes.
    spans = spans.take(rng.permutation(len(spans.a_len)))
    special = (*tokenizer.special_ids, tokenizer.mask_id)
    replacement = (masking.unigram_cdf(corpus.tokens, tokenizer.vocab_size, special)
                   if settings.random_token == "unigram" else tokenizer.vocab_size)
    continues = _continues_word(corpus, tokenizer) if settings.whole_word_mask else None
    rows = [_features(corpus, spans.take(slice(start, start + _BATCH_ROWS)), tokenizer,
                      settings, replacement, continues, rng)
            for start in range(0, len(spans.a_len), _BATCH_ROWS)]
    if settings.max_sequences_per_row > 1:
        unit = {name: np.concatenate([part[name] for part in rows]) for name in rows[0]}
        unit = packing.pack_unit(unit, settings.max_seq_len, settings.max_sequences_per_row,
                                 rng)
        rows = [{name: value[start:start + _BATCH_ROWS] for name, value in unit.items()}
                for start in range(0, len(unit["input_ids"]), _BATCH_ROWS)]
    return _serialized(unit_index, corpus, rows, len(spans.a_len), overflow)


def _serialized(unit_index: int, corpus, rows: list[dict], num_instances: int,
                overflow: dict) -> UnitResult:
    """A unit's rows (batches of features) as one buffer of serialized Examples."""
    buffers, offsets, masked, real_tokens = [], [np.zeros(1, np.int64)], 0, 0
    for features in rows:
        masked += int(features.get("masked_lm_weights", np.zeros(0)).sum())  # mlm: none
        real_tokens += int(features["input_mask"].sum())
        buffer, row_offsets = example_codec.serialize_examples(features)
        offsets.append(row_offsets[1:] + sum(len(b) for b in buffers))
        buffers.append(buffer)
    return UnitResult(unit_index, np.concatenate(buffers), np.concatenate(offsets),
                      corpus.num_documents, len(corpus.sentence_starts) - 1,
                      len(corpus.tokens), masked, **overflow, num_instances=num_instances,
                      real_tokens=real_tokens)


def _mlm_unit(unit_index: int, corpus, tokenizer, settings: Settings,
              rng: np.random.Generator) -> UnitResult:
    """Objective mlm: every document cut into sequences, packed, unmasked. A sentence
    longer than a sequence is cut too, so nothing is dropped."""
    no_overflow = dict(long_sentences=0, dropped_tokens=0)
    if not corpus.num_documents:
        return UnitResult(unit_index, np.zeros(0, np.uint8), np.zeros(1, np.int64), 0,
                          len(corpus.sentence_starts) - 1, len(corpus.tokens), 0, **no_overflow)
    sequences = mlm_sequences.unit_sequences(corpus, tokenizer, settings.max_seq_len, rng)
    unit = packing.pack_unit(sequences, settings.max_seq_len, settings.max_sequences_per_row,
                             rng)
    rows = [{name: value[start:start + _BATCH_ROWS] for name, value in unit.items()}
            for start in range(0, len(unit["input_ids"]), _BATCH_ROWS)]
    return _serialized(unit_index, corpus, rows, len(sequences["input_ids"]), no_overflow)
