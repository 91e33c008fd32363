"""Masked-LM-only sequences (`create-data --objective mlm`): documents cut to `[CLS] text [SEP]`.

ModernBERT's objective has no sentence pairs and no next-sentence task, so a sequence is one
stretch of one document: each document's tokens are cut into consecutive pieces of
seq_len - 2 tokens (the last piece holds the rest), each piece framed by [CLS] and [SEP].
A cut may fall inside a sentence, as RoBERTa's and transformers' `group_texts` packing
does: cutting at sentence ends instead leaves on average half a sentence of every row
empty, and on War and Peace at 1,024 tokens (rows packed 3 to a row) the real-token
fraction was 0.970 with sentence-end cuts against 0.983 with these. No token is dropped
and none is seen twice in an epoch; sequences never cross documents. The short last
pieces of documents are what `packing.py` fits together into rows.

No masks are chosen here: the reader draws them for each row at the rate of the step it
trains (`dynamic_masking.mask_rows`), so a change of masking rate needs no new shards.
"""

import numpy as np

from input_pipeline.instances import Corpus


def document_pieces(corpus: Corpus, body: int) -> tuple[np.ndarray, np.ndarray]:
    """(start, length) in `corpus.tokens` of every piece of every document, in corpus
    order: each document's tokens cut into pieces of `body` tokens, the last one shorter."""
    token_starts = corpus.sentence_starts[corpus.document_starts]  # (D + 1,)
    document_start, document_length = token_starts[:-1], np.diff(token_starts)
    pieces = -(-document_length // body)  # ceil: (D,)
    document = np.repeat(np.arange(len(pieces)), pieces)
    first_piece = np.cumsum(pieces) - pieces  # (D,): index of each document's first piece
    within = np.arange(len(document)) - first_piece[document]  # piece number in its document
    start = document_start[document] + within * body
    length = np.minimum(body, document_length[document] - within * body)
    return start.astype(np.int64), length.astype(np.int64)


def assemble(tokens: np.ndarray, start: np.ndarray, length: np.ndarray, seq_len: int,
             cls_id: int, sep_id: int, pad_id: int) -> dict[str, np.ndarray]:
    """`[CLS] piece [SEP]` padded to seq_len: input_ids and input_mask (N, T) int32."""
    position = np.arange(seq_len, dtype=np.int64)[None, :]  # (1, T)
    length = length[:, None]  # (N, 1)
    inside = (position >= 1) & (position <= length)
    source = np.where(inside, start[:, None] + position - 1, 0)
    input_ids = np.where(inside, tokens[source], pad_id)
    input_ids[:, 0] = cls_id
    input_ids = np.where(position == length + 1, sep_id, input_ids)
    return dict(input_ids=input_ids.astype(np.int32),
                input_mask=(position < length + 2).astype(np.int32))


def unit_sequences(corpus: Corpus, tokenizer, seq_len: int,
                   rng: np.random.Generator) -> dict[str, np.ndarray]:
    """A work unit's sequences, shuffled within the unit (so each shard mixes documents):
    input_ids and input_mask (N, seq_len)."""
    start, length = document_pieces(corpus, seq_len - 2)
    order = rng.permutation(len(start))
    return assemble(corpus.tokens, start[order], length[order], seq_len, tokenizer.cls_id,
                    tokenizer.sep_id, tokenizer.pad_id)
