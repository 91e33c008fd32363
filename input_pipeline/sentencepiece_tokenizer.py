"""SentencePiece models (`.model`) behind the same interface as the WordPiece `Tokenizer`.

BERT's special tokens are looked up by name ([PAD] [UNK] [CLS] [SEP] [MASK]); a model
trained by `bert-jax vocab --type sentencepiece` has them at ids 0-4, and models trained
elsewhere (ALBERT's, for example) use <pad>/<unk> for the first two, which we accept.
Those five pieces written in the text are read as the special tokens (sentencepiece itself
would spell `[MASK]` out piece by piece), as the WordPiece tokenizer and Hugging Face's
ALBERT tokenizer do; `split_special_tokens=True` keeps sentencepiece's reading.
"""

import re
from collections.abc import Sequence

import numpy as np
import sentencepiece

from bert_jax.errors import UserError
from bert_jax.storage import files
from input_pipeline.vocabulary_files import (SENTENCEPIECE_MODEL, SPECIAL_TOKENS,
                                             concatenate_ids, vocabulary_hash, write_vocabulary)

_ALTERNATIVES = {"[PAD]": "<pad>", "[UNK]": "<unk>"}
WORD_START = "\u2581"  # SentencePiece's "▁": the piece begins a word


class SentencePieceTokenizer:
    """A SentencePiece model with BERT's special tokens mapped."""

    def __init__(self, path: str, lowercase: bool = False, split_special_tokens: bool = False):
        self.processor = sentencepiece.SentencePieceProcessor()
        try:
            self.processor.Load(path)
        except (OSError, RuntimeError) as error:
            raise UserError(f"{path}: not a readable SentencePiece model ({error})") from None
        self.path, self.lowercase = path, lowercase
        self.tokens = [self.processor.IdToPiece(index)
                       for index in range(self.processor.GetPieceSize())]
        self.hash = vocabulary_hash(self.tokens)
        lookup = {token: index for index, token in enumerate(self.tokens)}
        ids = []
        for token in SPECIAL_TOKENS:
            index = lookup.get(token, lookup.get(_ALTERNATIVES.get(token)))
            if index is None:
                raise UserError(f"{path}: SentencePiece model lacks the special token {token}")
            ids.append(index)
        self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id = ids
        self.split_special_tokens = split_special_tokens
        # The special pieces as written in text, longest first so none hides a longer one.
        self._special_ids = {self.tokens[index]: index for index in ids}
        written = sorted(self._special_ids, key=len, reverse=True)
        self._special_pattern = None if split_special_tokens else re.compile(
            "(" + "|".join(map(re.escape, written)) + ")")

    @property
    def vocab_size(self) -> int:
        return len(self.tokens)

    def _prepare(self, texts: Sequence[str]) -> list[str]:
        return [text.lower() for text in texts] if self.lowercase else list(texts)

    def _parts(self, text: str) -> list[str] | None:
        """`text` cut around the special pieces written in it (odd items are those pieces),
        or None when it holds none (or they are read as plain text)."""
        if self._special_pattern is None or not self._special_pattern.search(text):
            return None
        return self._special_pattern.split(text)

    def _encode_parts(self, parts: list[str], encode) -> list:
        """`encode(texts) -> one list per text` over the plain parts, the special ids between."""
        plain = encode(self._prepare(parts[0::2]))
        pieces = list(plain[0])
        for special, following in zip(parts[1::2], plain[1:]):
            pieces += [self._special_ids[special], *following]
        return pieces

    def tokenize(self, text: str) -> list[str]:
        parts = self._parts(text)
        if parts is None:
            return self.processor.EncodeAsPieces(self._prepare([text])[0])
        return [self.tokens[piece] if isinstance(piece, int) else piece
                for piece in self._encode_parts(parts, self.processor.EncodeAsPieces)]

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids of each text, without special tokens."""
        encoded = self.processor.Encode(self._prepare(texts), out_type=int)
        for row, text in enumerate(texts):
            parts = self._parts(text)
            if parts is not None:
                encoded[row] = self._encode_parts(
                    parts, lambda plain: self.processor.Encode(plain, out_type=int))
        return encoded

    def encode_corpus(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """All texts' ids concatenated: (tokens int32, lengths int64)."""
        return concatenate_ids(self.encode_batch(texts))

    def encode_for_model(self, texts: Sequence[str | tuple[str, str]], max_seq_len: int,
                         pad_to_max: bool = False) -> dict[str, np.ndarray]:
        """`[CLS] A [SEP] (B [SEP])` per text or pair, truncated longest-first; int32 (N, T)."""
        rows = []
        for text in texts:
            pair = [text] if isinstance(text, str) else list(text)
            parts = self.encode_batch(pair)
            budget = max_seq_len - 1 - len(parts)
            while sum(map(len, parts)) > budget:
                longest = max(parts, key=len)
                longest.pop()
            ids = [self.cls_id] + parts[0] + [self.sep_id]
            segments = [0] * len(ids)
            if len(parts) == 2:
                ids += parts[1] + [self.sep_id]
                segments += [1] * (len(parts[1]) + 1)
            rows.append((ids, segments))
        seq_len = max_seq_len if pad_to_max else max(len(ids) for ids, _ in rows)
        input_ids = np.full((len(rows), seq_len), self.pad_id, np.int32)
        segment_ids = np.zeros((len(rows), seq_len), np.int32)
        input_mask = np.zeros((len(rows), seq_len), np.int32)
        for row, (ids, segments) in enumerate(rows):
            input_ids[row, :len(ids)], segment_ids[row, :len(ids)] = ids, segments
            input_mask[row, :len(ids)] = 1
        return dict(input_ids=input_ids, segment_ids=segment_ids, input_mask=input_mask)

    def continues_word(self, tokens: np.ndarray) -> np.ndarray:
        """For a stream of token ids, whether each continues the word of the token before it
        (no leading ▁, not a special token); whole-word masking keeps a word together."""
        if not hasattr(self, "_continuation"):
            special = set(SPECIAL_TOKENS) | set(_ALTERNATIVES.values())
            self._continuation = np.array([not token.startswith(WORD_START)
                                           and token not in special for token in self.tokens])
        return self._continuation[tokens]

    @property
    def special_ids(self) -> tuple[int, ...]:
        """Ids masking never chooses: [PAD] [CLS] [SEP], as google-research/bert's masking."""
        return (self.pad_id, self.cls_id, self.sep_id)

    def save(self, directory: str, settings: dict | None = None) -> None:
        """sentencepiece.model, and vocab.txt (its pieces) and tokenizer_config.json as
        `bert-jax vocab --type sentencepiece` writes them."""
        with files.atomic_write(files.join(directory, SENTENCEPIECE_MODEL), "wb") as file:
            file.write(self.processor.serialized_model_proto())
        write_vocabulary(directory, self.tokens, self.lowercase, self.split_special_tokens,
                         settings)

    def decode(self, ids: Sequence[int]) -> str:
        special = {self.pad_id, self.cls_id, self.sep_id, self.mask_id}
        return self.processor.Decode([int(i) for i in ids if int(i) not in special])

    def id_to_token(self, index: int) -> str:
        return self.tokens[index]

    token_text = id_to_token  # a piece as a person reads it: its ▁ marks a word's start

    def token_to_id(self, token: str) -> int | None:
        index = self.processor.PieceToId(token)
        return None if index == self.unk_id and token != self.tokens[self.unk_id] else index
