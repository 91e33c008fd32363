"""Tokenizers: BERT WordPiece through Hugging Face `tokenizers`, one interface for all kinds.

`load_tokenizer(path)` takes a `vocab.txt`, a SentencePiece `.model` (see
`sentencepiece_tokenizer.py`), a Hugging Face `tokenizer.json` (ModernBERT's byte-level BPE:
see `tokenizer_json.py`), or a directory holding one (a Hugging Face or bert-jax model
directory), and returns a tokenizer with one interface. Its `encode_for_model` builds the
`[CLS] A [SEP] B [SEP]` inputs the model takes, as numpy arrays; `encode_corpus` is the
shard writer's fast path.

Special tokens written in the text (`[MASK] and [SEP] inside`) are single tokens (ids 103 and
102 for bert-base-uncased), matched exactly as written before lower-casing, as Hugging Face's
`BertTokenizerFast` and sentence-transformers do. The original google-research/bert
tokenizer read them as plain text (`[`, `mask`, `]`); `split_special_tokens=True` (Hugging
Face's name: the key of that name in `tokenizer_config.json`, or `load_tokenizer`'s argument)
asks for that.
"""

from collections.abc import Sequence

import numpy as np
import tokenizers
from tokenizers import decoders, models, normalizers, pre_tokenizers, processors

from bert_jax.storage import files
from bert_jax.errors import UserError
from input_pipeline.vocabulary_files import (SPECIAL_TOKENS, TOKENIZER_CONFIG, read_json_settings,
                                             read_vocabulary, resolve_tokenizer_path,
                                             tokenizer_kind, vocabulary_hash, write_vocabulary)

def _looks_uncased(tokens: Sequence[str]) -> bool:
    """An uncased BERT vocabulary has no upper-case letters outside its [SPECIAL] tokens."""
    return not any(token != token.lower() for token in tokens
                   if not (token.startswith("[") and token.endswith("]")))


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
    unk_id: int
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


class Tokenizer(BackendTokenizer):
    """A WordPiece tokenizer with BERT's normalisation, pre-tokenisation and special tokens.

    `split_special_tokens`: read `[MASK]` etc. in the text as plain text, as the original
    google-research/bert tokenizer did, instead of as the special tokens.
    """

    def __init__(self, tokens: Sequence[str], lowercase: bool, split_special_tokens: bool = False):
        self.tokens = list(tokens)
        self.lowercase = lowercase
        self.split_special_tokens = split_special_tokens
        vocabulary = {token: index for index, token in enumerate(self.tokens)}
        self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id = (
            vocabulary[token] for token in SPECIAL_TOKENS)
        backend = tokenizers.Tokenizer(models.WordPiece(
            vocab=vocabulary, unk_token="[UNK]", max_input_chars_per_word=100))
        # strip_accents=None follows `lowercase`, as BERT's BasicTokenizer does.
        backend.normalizer = normalizers.BertNormalizer(
            clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=lowercase)
        backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        backend.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
            special_tokens=[("[CLS]", self.cls_id), ("[SEP]", self.sep_id)])
        backend.decoder = decoders.WordPiece()
        # Matched in the raw text, before normalisation (normalized=False), whole and with no
        # whitespace taken (lstrip/rstrip off): what BertTokenizerFast's added tokens do.
        backend.add_special_tokens([
            tokenizers.AddedToken(token, special=True, normalized=False, single_word=False,
                                  lstrip=False, rstrip=False) for token in SPECIAL_TOKENS])
        backend.encode_special_tokens = split_special_tokens
        self.backend = backend

    def __reduce__(self):
        # Rebuilt from its settings when pickled (Beam workers): the backend's pickle would
        # drop `encode_special_tokens`, and the chunk cache need not travel.
        return Tokenizer, (self.tokens, self.lowercase, self.split_special_tokens)

    def encode_corpus(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """All texts' ids, without special tokens, concatenated: (tokens int32, lengths int64).

        The same ids as `encode_batch`, several times faster on large corpora: each
        distinct whitespace-separated chunk is encoded once (see `wordpiece_chunk_cache.py`).
        """
        if not hasattr(self, "_chunk_cache"):
            from input_pipeline.wordpiece_chunk_cache import ChunkCache
            self._chunk_cache = ChunkCache(self.backend)
        return self._chunk_cache.encode(texts)

    def continues_word(self, tokens: np.ndarray) -> np.ndarray:
        """For a stream of token ids, whether each continues the word of the token before it
        (a `##` piece); whole-word masking keeps such a word's pieces together."""
        if not hasattr(self, "_continuation"):
            self._continuation = np.array([token.startswith("##") for token in self.tokens])
        return self._continuation[tokens]

    def save(self, directory: str, settings: dict | None = None) -> None:
        """vocab.txt and tokenizer_config.json, so the casing (and special tokens read as plain
        text, if so) travel with the vocabulary; `settings`: more tokenizer_config.json keys."""
        write_vocabulary(directory, self.tokens, self.lowercase, self.split_special_tokens,
                         settings)


def load_tokenizer(path: str, lowercase: bool | None = None,
                   split_special_tokens: bool | None = None):
    """A tokenizer from `vocab.txt`, a SentencePiece `.model`, a Hugging Face `tokenizer.json`
    (`tokenizer_json.py`), or a directory holding one (looked for in that order:
    `vocabulary_files.TOKENIZER_FILES`).

    Lower-casing comes from `lowercase` if given, else from a Hugging Face
    `tokenizer_config.json` beside the vocabulary, else from the vocabulary itself (an
    uncased BERT vocabulary has no upper-case tokens); a tokenizer.json's own normaliser
    decides it. `split_special_tokens` (special tokens in text read as plain text) comes
    from the argument if given, else from `tokenizer_config.json`, else False.
    """
    path = resolve_tokenizer_path(path)
    settings = read_json_settings(files.join(files.dirname(path), TOKENIZER_CONFIG))
    if split_special_tokens is None:
        split_special_tokens = bool(settings.get("split_special_tokens", False))
    kind = tokenizer_kind(path)
    if kind == "tokenizer.json":
        from input_pipeline.tokenizer_json import load_tokenizer_json
        return load_tokenizer_json(path, settings, lowercase, split_special_tokens)
    if kind == "sentencepiece":
        from input_pipeline.sentencepiece_tokenizer import SentencePieceTokenizer
        if lowercase is None:
            lowercase = bool(settings.get("do_lower_case", False))
        with files.local_copy(path) as local_path:  # sentencepiece reads local files only
            return SentencePieceTokenizer(local_path, lowercase, split_special_tokens)
    tokens = read_vocabulary(path)
    if lowercase is None:
        lowercase = settings.get("do_lower_case")
    if lowercase is None:
        lowercase = _looks_uncased(tokens)
    return Tokenizer(tokens, lowercase, split_special_tokens)
