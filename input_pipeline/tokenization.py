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
from input_pipeline.backend_tokenizer import BackendTokenizer
from input_pipeline.tokenizer_json import load_tokenizer_json
from input_pipeline.vocabulary_files import (SPECIAL_TOKENS, TOKENIZER_CONFIG, read_json_settings,
                                             read_vocabulary, resolve_tokenizer_path,
                                             tokenizer_kind, write_vocabulary)

def _looks_uncased(tokens: Sequence[str]) -> bool:
    """An uncased BERT vocabulary has no upper-case letters outside its [SPECIAL] tokens."""
    return not any(token != token.lower() for token in tokens
                   if not (token.startswith("[") and token.endswith("]")))


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
