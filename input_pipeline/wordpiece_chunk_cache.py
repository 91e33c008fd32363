"""Fast WordPiece ids for a large corpus: each distinct whitespace-separated chunk once.

BERT's normalisation, pre-tokenisation and WordPiece never look across whitespace, so the
ids of a text are the concatenated ids of its whitespace-separated chunks. Natural text
repeats its chunks (Zipf), so encoding each distinct chunk once with `tokenizers` and
gathering the rest with numpy is several times faster than encoding every sentence.
The cache is bounded: it starts again when it holds `max_entries` chunks.
A tokenizer that cuts text otherwise passes its own `chunks` (a byte-level BPE's:
`tokenizer_json.py`).
"""

import itertools
import re
from collections.abc import Sequence

import numpy as np

# Characters Python's str.split() takes for whitespace but BERT's normaliser deletes as
# control characters (and our sentence separator): a text holding one is encoded whole.
_SPLIT_DISAGREES = re.compile("[\\x00\\x0b\\x0c\\x1c-\\x1f\\x85\\u2028\\u2029]")
SEPARATOR = "\x00"  # ends each text in the chunk stream; has no ids


class ChunkCache:
    """Remembers the ids of each chunk a `tokenizers.Tokenizer` (no special tokens) gave.

    `chunks(texts)`: every text's chunks, each text followed by SEPARATOR (default: BERT's
    whitespace-separated ones).
    """

    def __init__(self, backend, max_entries: int = 1 << 20, chunks=None):
        self.backend, self.max_entries = backend, max_entries
        self._chunks = chunks or self._whitespace_chunks
        self._clear()

    def _clear(self) -> None:
        self.rows = {SEPARATOR: 0}  # chunk -> row; row r's ids: table[starts[r]:starts[r+1]]
        self.table = np.zeros(0, np.int32)
        self.starts = np.zeros(2, np.int64)

    @staticmethod
    def _whitespace_chunks(texts: Sequence[str]) -> list[str]:
        """Every text's chunks, each text followed by the separator."""
        joined = f" {SEPARATOR} ".join(texts)
        if not _SPLIT_DISAGREES.search(joined.replace(SEPARATOR, " ")):
            return (joined + f" {SEPARATOR}").split()
        chunks = []
        for text in texts:
            chunks.extend(text.split() if not _SPLIT_DISAGREES.search(text) else [text])
            chunks.append(SEPARATOR)
        return chunks

    def _learn(self, unseen: list[str]) -> None:
        encodings = self.backend.encode_batch_fast(unseen, add_special_tokens=False)
        new_ids = [encoding.ids for encoding in encodings]
        first_row = len(self.starts) - 1
        self.rows.update(zip(unseen, range(first_row, first_row + len(unseen))))
        lengths = np.fromiter(map(len, new_ids), np.int64, len(new_ids))
        self.starts = np.concatenate([self.starts, self.starts[-1] + np.cumsum(lengths)])
        self.table = np.concatenate([self.table, np.fromiter(
            itertools.chain.from_iterable(new_ids), np.int32, int(lengths.sum()))])

    def encode(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """All texts' ids concatenated (tokens int32) and each text's count (lengths int64)."""
        if len(self.rows) > self.max_entries:
            self._clear()
        chunks = self._chunks(texts)
        unseen = sorted(set(chunks).difference(self.rows))  # sorted: same rows every run
        if unseen:
            self._learn(unseen)
        chunk_rows = np.array(list(map(self.rows.__getitem__, chunks)), np.int64)
        starts = self.starts[chunk_rows]
        chunk_lengths = self.starts[chunk_rows + 1] - starts
        # Token k of the output comes from table[start of its chunk + its rank in the chunk].
        token_ends = np.cumsum(chunk_lengths)
        first = token_ends - chunk_lengths
        tokens = self.table[np.repeat(starts - first, chunk_lengths)
                            + np.arange(token_ends[-1] if len(token_ends) else 0)]
        text_ends = token_ends[chunk_rows == 0]  # at each separator
        return tokens, np.diff(text_ends, prepend=0)
