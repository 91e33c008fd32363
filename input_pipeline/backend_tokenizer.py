"""What every tokenizer run by a Hugging Face `tokenizers.Tokenizer` shares, whatever its model:
the floor beneath `tokenization.py` (BERT's WordPiece, and `load_tokenizer`, which picks a
kind) and `tokenizer_json.py` (a tokenizer.json), so that each imports it and neither the
other."""

from collections.abc import Sequence

import numpy as np
import tokenizers

from input_pipeline.vocabulary_files import vocabulary_hash


class BackendTokenizer:
    """What a tokenizer run by a `tokenizers.Tokenizer` (`backend`) does the same way whatever
    its model: WordPiece here, a tokenizer.json's in `tokenizer_json.py`.

    A subclass sets `backend` (its post-processor makes `[CLS] A [SEP] (B [SEP])`),
    `tokens` (id -> token), `split_special_tokens` and the ids pad_id, unk_id, cls_id,
    sep_id, mask_id.
    """

    backend: tokenizers.Tokenizer
    tokens: list[str]
    split_special_tokens: bool
    pad_id: int
    unk_id: int | None  # None: a byte-level BPE, which has no unknown piece
    cls_id: int
    sep_id: int
    mask_id: int

    @property
    def vocab_size(self) -> int:
        return len(self.tokens)

    @property
    def hash(self) -> str:
        """The vocabulary's fingerprint: shards made with another one are refused."""
        if not hasattr(self, "_hash"):
            self._hash = vocabulary_hash(self.tokens)
        return self._hash

    def tokenize(self, text: str) -> list[str]:
        """The pieces as transformers' `tokenize` gives them (a token that took the space
        before it, ModernBERT's `[MASK]`, is shown with it: " [MASK]")."""
        return self.backend.encode(text, add_special_tokens=False).tokens

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids of each text, without special tokens; the batch runs on every core."""
        encodings = self.backend.encode_batch_fast(list(texts), add_special_tokens=False)
        return [encoding.ids for encoding in encodings]

    def encode_for_model(self, texts: Sequence[str | tuple[str, str]], max_seq_len: int,
                         pad_to_max: bool = False) -> dict[str, np.ndarray]:
        """`[CLS] A [SEP] (B [SEP])` for each text or pair, truncated longest-first.

        Returns int32 arrays `input_ids`, `segment_ids` and `input_mask`, shaped
        (len(texts), seq_len), where seq_len is the longest input or, with `pad_to_max`,
        `max_seq_len`.
        """
        self.backend.enable_truncation(max_seq_len, strategy="longest_first")
        self.backend.enable_padding(pad_id=self.pad_id, pad_token=self.tokens[self.pad_id],
                                    length=max_seq_len if pad_to_max else None)
        try:
            encodings = self.backend.encode_batch_fast(list(texts), add_special_tokens=True)
        finally:
            self.backend.no_truncation()
            self.backend.no_padding()
        return dict(
            input_ids=np.array([e.ids for e in encodings], np.int32),
            segment_ids=np.array([e.type_ids for e in encodings], np.int32),
            input_mask=np.array([e.attention_mask for e in encodings], np.int32))

    @property
    def special_ids(self) -> tuple[int, ...]:
        """Ids masking never chooses: [PAD] [CLS] [SEP], as google-research/bert's masking."""
        return (self.pad_id, self.cls_id, self.sep_id)

    def decode(self, ids: Sequence[int]) -> str:
        return self.backend.decode(list(ids), skip_special_tokens=False)

    def id_to_token(self, index: int) -> str:
        return self.tokens[index]

    def token_text(self, index: int) -> str:
        """A token as a person reads it (fill-mask's candidates, attention's labels)."""
        return self.tokens[index]

    def token_to_id(self, token: str) -> int | None:
        return self.backend.token_to_id(token)
