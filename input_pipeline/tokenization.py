"""Tokenizers: BERT WordPiece through Hugging Face `tokenizers`, one interface for all kinds.

`load_tokenizer(path)` takes a `vocab.txt`, or a directory holding one (a Hugging Face or
bert-jax model directory), or a SentencePiece `.model` (see `sentencepiece_tokenizer.py`),
and returns a tokenizer with one interface. Its `encode_for_model` builds the
`[CLS] A [SEP] B [SEP]` inputs the model takes, as numpy arrays; `encode_corpus` is the
shard writer's fast path.

Special tokens written in the text (`[MASK] and [SEP] inside`) are single tokens (ids 103 and
102 for bert-base-uncased), matched exactly as written before lower-casing, as Hugging Face's
`BertTokenizerFast` and sentence-transformers do. The original google-research/bert
tokenizer read them as plain text (`[`, `mask`, `]`); `split_special_tokens=True` (Hugging
Face's name: the key of that name in `tokenizer_config.json`, or `load_tokenizer`'s argument)
asks for that.
"""

import json
from collections.abc import Sequence

import numpy as np
import tokenizers
from tokenizers import decoders, models, normalizers, pre_tokenizers, processors

from bert_jax.storage import files
from bert_jax.errors import UserError
from input_pipeline.vocabulary_files import (SENTENCEPIECE_MODEL, SPECIAL_TOKENS,
                                             read_vocabulary, vocabulary_hash)

def _looks_uncased(tokens: Sequence[str]) -> bool:
    """An uncased BERT vocabulary has no upper-case letters outside its [SPECIAL] tokens."""
    return not any(token != token.lower() for token in tokens
                   if not (token.startswith("[") and token.endswith("]")))


def _tokenizer_settings(directory: str) -> dict:
    """A Hugging Face `tokenizer_config.json` beside the vocabulary (`do_lower_case`,
    `split_special_tokens`), or {} when there is none."""
    path = files.join(directory, "tokenizer_config.json")
    if not files.exists(path):
        return {}
    try:
        with files.open_file(path) as file:
            settings = json.load(file)
    except json.JSONDecodeError as error:
        raise UserError(f"{path}: not valid JSON ({error})") from None
    if not isinstance(settings, dict):
        raise UserError(f"{path}: expected a JSON object")
    return settings


class Tokenizer:
    """A WordPiece tokenizer with BERT's normalisation, pre-tokenisation and special tokens.

    `split_special_tokens`: read `[MASK]` etc. in the text as plain text, as the original
    google-research/bert tokenizer did, instead of as the special tokens.
    """

    def __init__(self, tokens: Sequence[str], lowercase: bool, split_special_tokens: bool = False):
        self.tokens = list(tokens)
        self.lowercase = lowercase
        self.split_special_tokens = split_special_tokens
        self.hash = vocabulary_hash(self.tokens)
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

    @property
    def vocab_size(self) -> int:
        return len(self.tokens)

    def tokenize(self, text: str) -> list[str]:
        return self.backend.encode(text, add_special_tokens=False).tokens

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids of each text, without special tokens; the batch runs on every core."""
        encodings = self.backend.encode_batch(list(texts), add_special_tokens=False)
        return [encoding.ids for encoding in encodings]

    def encode_for_model(self, texts: Sequence[str | tuple[str, str]], max_seq_len: int,
                         pad_to_max: bool = False) -> dict[str, np.ndarray]:
        """`[CLS] A [SEP] (B [SEP])` for each text or pair, truncated longest-first.

        Returns int32 arrays `input_ids`, `segment_ids` and `input_mask`, shaped
        (len(texts), seq_len), where seq_len is the longest input or, with `pad_to_max`,
        `max_seq_len`.
        """
        self.backend.enable_truncation(max_seq_len, strategy="longest_first")
        self.backend.enable_padding(
            pad_id=self.pad_id, pad_token="[PAD]", length=max_seq_len if pad_to_max else None)
        try:
            encodings = self.backend.encode_batch(list(texts), add_special_tokens=True)
        finally:
            self.backend.no_truncation()
            self.backend.no_padding()
        return dict(
            input_ids=np.array([e.ids for e in encodings], np.int32),
            segment_ids=np.array([e.type_ids for e in encodings], np.int32),
            input_mask=np.array([e.attention_mask for e in encodings], np.int32))

    def encode_corpus(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """All texts' ids, without special tokens, concatenated: (tokens int32, lengths int64).

        The same ids as `encode_batch`, several times faster on large corpora: each
        distinct whitespace-separated chunk is encoded once (see `wordpiece_chunk_cache.py`).
        """
        if not hasattr(self, "_chunk_cache"):
            from input_pipeline.wordpiece_chunk_cache import ChunkCache
            self._chunk_cache = ChunkCache(self.backend)
        return self._chunk_cache.encode(texts)

    def continuation_ids(self) -> np.ndarray:
        """(V,) bool: tokens that continue the previous token's word (`##` pieces)."""
        return np.array([token.startswith("##") for token in self.tokens], bool)

    def decode(self, ids: Sequence[int]) -> str:
        return self.backend.decode(list(ids), skip_special_tokens=False)

    def id_to_token(self, index: int) -> str:
        return self.tokens[index]

    def token_to_id(self, token: str) -> int | None:
        return self.backend.token_to_id(token)


def load_tokenizer(path: str, lowercase: bool | None = None,
                   split_special_tokens: bool | None = None):
    """A tokenizer from `vocab.txt`, a SentencePiece `.model`, or a directory holding one.

    A directory with a `sentencepiece.model` gives a SentencePiece tokenizer. Lower-casing
    comes from `lowercase` if given, else from a Hugging Face `tokenizer_config.json`
    beside the vocabulary, else from the vocabulary itself (an uncased BERT vocabulary has
    no upper-case tokens). `split_special_tokens` (special tokens in text read as plain
    text) comes from the argument if given, else from `tokenizer_config.json`, else False.
    """
    is_directory = files.isdir(path)
    if is_directory and files.exists(files.join(path, SENTENCEPIECE_MODEL)):
        path, is_directory = files.join(path, SENTENCEPIECE_MODEL), False
    directory = path if is_directory else files.dirname(path)
    settings = _tokenizer_settings(directory)
    if split_special_tokens is None:
        split_special_tokens = bool(settings.get("split_special_tokens", False))
    if path.endswith(".model"):
        from input_pipeline.sentencepiece_tokenizer import SentencePieceTokenizer
        if lowercase is None:
            lowercase = bool(settings.get("do_lower_case", False))
        with files.local_copy(path) as local_path:  # sentencepiece reads local files only
            return SentencePieceTokenizer(local_path, lowercase, split_special_tokens)
    vocab_path = files.join(path, "vocab.txt") if is_directory else path
    if is_directory and not files.exists(vocab_path):
        raise UserError(f"{path}: no vocab.txt in this directory")
    tokens = read_vocabulary(vocab_path)
    if lowercase is None:
        lowercase = settings.get("do_lower_case")
    if lowercase is None:
        lowercase = _looks_uncased(tokens)
    return Tokenizer(tokens, lowercase, split_special_tokens)

