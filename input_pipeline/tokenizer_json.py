"""A Hugging Face `tokenizer.json` (ModernBERT's byte-level BPE) behind the one interface.

The file runs in `tokenizers` itself, so the ids are those of transformers'
`PreTrainedTokenizerFast` (what `AutoTokenizer` gives for the directory): its normaliser,
pre-tokenizer, model, added tokens (special tokens written in text, ModernBERT's `[MASK]`
taking the space before it) and its post-processor's template. From beside it, read as
transformers reads them:
  - tokenizer_config.json: the special tokens' roles (`cls_token`, `sep_token`, `pad_token`,
    `mask_token`, `unk_token`; else special_tokens_map.json's; for [CLS] and [SEP] else
    `bos_token` and `eos_token`, as a Llama-3-style tokenizer (EuroBERT's) names them; else
    BERT's names); a byte-level BPE without an unknown token needs no [UNK] (`unk_id` None),
    `split_special_tokens`, and `added_tokens_decoder`, whose lstrip/rstrip/... win over
    tokenizer.json's when they differ (transformers adds those tokens again);
  - truncation and padding stored in tokenizer.json are not applied (transformers applies
    them only when asked, and bert-jax asks for its own).
The template must make BERT's layout, `[CLS] A [SEP]` and `[CLS] A [SEP] B [SEP]`, as
ModernBERT's does: shard writing, fill-mask, NER and SQuAD windows assemble that layout from
ids, so a tokenizer.json with another (RoBERTa's `<s> A </s></s> B </s>`) is refused when
loaded rather than followed in some places only.

`encode_corpus` (the shard writer's path) gives `encode_batch`'s ids; for a byte-level BPE of
GPT-2's kind (ModernBERT's) it encodes each distinct word once (`_ByteLevelChunks`).

Words (whole-word masking): a byte-level BPE marks a word's first piece with the byte-level
space `Ġ` (newline `Ċ`, tab `ĉ`); a piece without it continues the word before it, unless
that one ended in whitespace or is an added (special) token. A Metaspace tokenizer marks word
starts with `▁`, a WordPiece its continuations with `##`.
"""

import json
import re

import numpy as np
import tokenizers

from bert_jax.errors import UserError
from bert_jax.storage import files
from input_pipeline.backend_tokenizer import BackendTokenizer
from input_pipeline.vocabulary_files import (SPECIAL_TOKENS, SPECIAL_TOKENS_MAP, TOKENIZER_CONFIG,
                                             TOKENIZER_JSON, concatenate_ids, read_json_settings)
from input_pipeline.wordpiece_chunk_cache import SEPARATOR, ChunkCache

# The role of each of BERT's special tokens, in SPECIAL_TOKENS' order.
ROLES = ("pad_token", "unk_token", "cls_token", "sep_token", "mask_token")
# Where a Llama-3-style tokenizer (EuroBERT's) names a role: its template puts BOS and EOS
# where BERT's puts [CLS] and [SEP] (`_check_template` holds it to that).
_ROLE_FALLBACKS = {"cls_token": "bos_token", "sep_token": "eos_token"}
# Byte-level BPE writes byte b < 33 as chr(256 + b) (GPT-2's bytes_to_unicode): these are
# tab, newline, vertical tab, form feed, carriage return and space, the whitespace that
# starts (or, alone, is) a pre-tokenizer word.
_BYTE_LEVEL_WHITESPACE = frozenset(chr(256 + byte) for byte in b"\t\n\x0b\x0c\r ")
# Whitespace other than single spaces between words: such a text is encoded whole.
_IRREGULAR_SPACE = re.compile(r"[^\S ]| {2}|^ | $")


def _components(node: dict | None, key: str) -> list[dict]:
    """A normaliser or pre-tokenizer and, for a Sequence, each of its parts (`key`)."""
    if not node:
        return []
    if node.get("type") == "Sequence":
        return [part for child in node.get(key, []) for part in _components(child, key)]
    return [node]


def _lowercases(normalizer: dict | None) -> bool:
    return any(part.get("type") == "Lowercase"
               or (part.get("type") == "BertNormalizer" and part.get("lowercase"))
               for part in _components(normalizer, "normalizers"))


class TokenizerJson(BackendTokenizer):
    """The tokenizer of a `tokenizer.json` text (`path` names it in messages); `settings`:
    its tokenizer_config.json, `special_map`: its special_tokens_map.json."""

    def __init__(self, json_text: str, path: str, settings: dict, special_map: dict,
                 split_special_tokens: bool = False):
        self.json_text, self.path, self.settings = json_text, path, settings
        self.special_map, self.split_special_tokens = special_map, split_special_tokens
        try:
            self.structure = json.loads(json_text)
            backend = tokenizers.Tokenizer.from_str(json_text)
        except Exception as error:  # tokenizers raises a plain Exception for a bad file
            raise UserError(f"{path}: not a readable tokenizer.json ({error})") from None
        backend.no_truncation()
        backend.no_padding()
        _apply_added_tokens_decoder(backend, settings.get("added_tokens_decoder") or {}, path)
        backend.encode_special_tokens = split_special_tokens
        self.backend = backend
        vocabulary = backend.get_vocab(with_added_tokens=True)
        self.tokens = [""] * (max(vocabulary.values()) + 1)  # an unused id stays ""
        for token, index in vocabulary.items():
            self.tokens[index] = token
        self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id = (
            self._role_id(role, default, vocabulary)
            for role, default in zip(ROLES, SPECIAL_TOKENS))
        self.lowercase = _lowercases(self.structure.get("normalizer"))
        self._check_template()

    def __reduce__(self):
        # Rebuilt from its text when pickled (Beam workers): the backend's pickle would drop
        # `encode_special_tokens`.
        return TokenizerJson, (self.json_text, self.path, self.settings, self.special_map,
                               self.split_special_tokens)

    def _named(self, role: str | None) -> str | None:
        """The token tokenizer_config.json (else special_tokens_map.json) names for `role`."""
        name = self.settings.get(role) or self.special_map.get(role) if role else None
        if isinstance(name, dict):  # an AddedToken written out: {"content": ..., "lstrip": ...}
            name = name.get("content")
        return name

    def _role_id(self, role: str, default: str, vocabulary: dict) -> int | None:
        name = self._named(role) or self._named(_ROLE_FALLBACKS.get(role)) or default
        if name in vocabulary:
            return vocabulary[name]
        if role == "unk_token" and self._never_unknown():
            return None  # no text has an unknown piece, so no [UNK] is needed
        raise UserError(f"{self.path}: its {role} {name!r} is not in its vocabulary; "
                        f"bert-jax needs a [CLS] (or BOS), [SEP] (or EOS), [PAD] and [MASK] "
                        f"token, and an [UNK] unless the tokenizer is byte-level (name them as "
                        f"{', '.join(ROLES)}, bos_token, eos_token in {TOKENIZER_CONFIG})")

    def _never_unknown(self) -> bool:
        """A byte-level BPE without an unknown token (Llama 3's, GPT-2's): every byte of any
        text is a piece of its vocabulary."""
        model = self.structure.get("model") or {}
        kinds = [part.get("type") for part in
                 _components(self.structure.get("pre_tokenizer"), "pretokenizers")]
        return model.get("type") == "BPE" and not model.get("unk_token") and "ByteLevel" in kinds

    def _check_template(self) -> None:
        """Refuses a post-processor that does not make `[CLS] A [SEP] (B [SEP])`."""
        encode = self.backend.encode
        first, second = (encode(text, add_special_tokens=False).ids for text in ("a", "b"))
        cls_id, sep_id = self.cls_id, self.sep_id
        if (encode("a").ids != [cls_id, *first, sep_id]
                or encode("a", "b").ids != [cls_id, *first, sep_id, *second, sep_id]):
            made = " ".join(encode("a", "b").tokens)
            raise UserError(
                f"{self.path}: its post-processor makes {made!r} of the texts 'a' and 'b'; "
                f"bert-jax builds {self.tokens[cls_id]} A {self.tokens[sep_id]} B "
                f"{self.tokens[sep_id]} (BERT's and ModernBERT's layout)")

    @property
    def special_ids(self) -> tuple[int, ...]:
        """Ids masking never chooses: every special token (the five roles, and others such as
        ModernBERT's <|endoftext|> and [unused0]), as transformers' masking collator skips
        its special tokens."""
        added = self.backend.get_added_tokens_decoder()
        roles = {self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id} - {None}
        return tuple(sorted(roles | {index for index, token in added.items() if token.special}))

    def encode_corpus(self, texts) -> tuple[np.ndarray, np.ndarray]:
        """All texts' ids, without special tokens, concatenated: (tokens int32, lengths int64).

        The same ids as `encode_batch`; a byte-level BPE of GPT-2's kind encodes each
        distinct word once (see `_ByteLevelChunks`), about twice as fast on natural text.
        """
        if not hasattr(self, "_chunk_cache"):
            self._chunk_cache = (ChunkCache(self.backend, chunks=_ByteLevelChunks(self.backend))
                                 if self._cuts_at_spaces() else None)
        if self._chunk_cache is None or SEPARATOR in texts:  # a text of SEPARATOR alone
            return concatenate_ids(self.encode_batch(texts))
        return self._chunk_cache.encode(texts)

    def _cuts_at_spaces(self) -> bool:
        """Whether a text's ids are its single-space-separated words' ids (each but the first
        with its space): GPT-2's byte-level pre-tokenizer never joins across a space but to
        the word after it, NFC and lower-casing change no space, and BPE without dropout
        encodes a word alike wherever it stands."""
        model = self.structure.get("model") or {}
        pre_tokenizer = self.structure.get("pre_tokenizer") or {}
        normalizers = _components(self.structure.get("normalizer"), "normalizers")
        return (model.get("type") == "BPE" and not model.get("dropout")
                and pre_tokenizer.get("type") == "ByteLevel"
                and pre_tokenizer.get("use_regex", True)
                and all(part.get("type") in ("NFC", "Lowercase") for part in normalizers))

    def token_text(self, index: int) -> str:
        """The text of one token, through the tokenizer's decoder (`Ġworld` -> " world")."""
        return self.backend.decode([int(index)], skip_special_tokens=False)

    def continues_word(self, tokens: np.ndarray) -> np.ndarray:
        """For a stream of token ids, whether each continues the word of the token before it
        (see the module's docstring); whole-word masking keeps such a word's pieces together."""
        if not hasattr(self, "_word_marks"):
            self._word_marks = self._word_boundaries()
        continues, ends_word = self._word_marks
        result = continues[tokens]
        result[1:] &= ~ends_word[tokens[:-1]]
        return result

    def _word_boundaries(self) -> tuple[np.ndarray, np.ndarray]:
        """(continues (V,), ends_word (V,)) bool: a token that continues the word before it,
        one after which a new word starts."""
        model = self.structure.get("model") or {}
        pre_tokenizers = _components(self.structure.get("pre_tokenizer"), "pretokenizers")
        kinds = [part.get("type") for part in pre_tokenizers]
        tokens = self.tokens
        if model.get("type") == "WordPiece":
            prefix = model.get("continuing_subword_prefix") or "##"
            continues = [token.startswith(prefix) for token in tokens]
            ends_word = [False] * len(tokens)
        elif "ByteLevel" in kinds:
            continues = [bool(token) and token[0] not in _BYTE_LEVEL_WHITESPACE
                         for token in tokens]
            ends_word = [bool(token) and token[-1] in _BYTE_LEVEL_WHITESPACE for token in tokens]
        elif "Metaspace" in kinds:
            marker = pre_tokenizers[kinds.index("Metaspace")].get("replacement", "\u2581")
            continues = [bool(token) and not token.startswith(marker) for token in tokens]
            ends_word = [False] * len(tokens)
        else:
            raise UserError(
                f"{self.path}: whole-word masking cannot tell where words start with this "
                f"tokenizer.json (model {model.get('type')}, pre-tokenizer {kinds or 'none'}); "
                "it reads WordPiece's ##, byte-level BPE's Ġ and Metaspace's ▁")
        continues, ends_word = np.array(continues, bool), np.array(ends_word, bool)
        added = list(self.backend.get_added_tokens_decoder())  # each is a word of its own
        continues[added], ends_word[added] = False, True
        return continues, ends_word

    def save(self, directory: str, settings: dict | None = None) -> None:
        """tokenizer.json as read, tokenizer_config.json (the special tokens' roles named,
        `settings` added) and special_tokens_map.json if it had one: a directory that
        load_tokenizer and transformers' AutoTokenizer read back to the same ids."""
        # A tokenizer.json is read by transformers' own class for it, whatever class a
        # BERT export names (`tokenizer_class` BertTokenizer would read a vocab.txt).
        config = {**self.settings, **{key: value for key, value in (settings or {}).items()
                                      if key != "tokenizer_class"}}
        config.setdefault("tokenizer_class", "PreTrainedTokenizerFast")
        for role, index in zip(ROLES, (self.pad_id, self.unk_id, self.cls_id, self.sep_id,
                                       self.mask_id)):
            if index is not None:
                config.setdefault(role, self.tokens[index])
        if self.split_special_tokens:
            config["split_special_tokens"] = True
        files.write_text(files.join(directory, TOKENIZER_JSON), self.json_text)
        written = {TOKENIZER_CONFIG: config, SPECIAL_TOKENS_MAP: self.special_map}
        for name, values in written.items():
            if values:
                files.write_text(files.join(directory, name),
                                 json.dumps(values, indent=2, ensure_ascii=False))


class _ByteLevelChunks:
    """A byte-level BPE's `ChunkCache` chunks: a text's words, each but the first with the
    space before it (" fox"), as its pre-tokenizer cuts them. A text with other whitespace,
    or holding an added token's text (special or not, raw or normalised: [MASK] takes the
    space before it), is one chunk, encoded whole."""

    def __init__(self, backend):
        self.normalize = backend.normalizer.normalize_str if backend.normalizer else str
        contents = [token.content for token in backend.get_added_tokens_decoder().values()]
        # Raw text is searched for the tokens as written, normalised text for them normalised
        # (a normalised "new york" is found in "New York" by a lower-casing tokenizer).
        self.added = [re.compile("|".join(map(re.escape, sorted(
            variants, key=len, reverse=True)))) if contents else None
            for variants in (contents, [self.normalize(text) for text in contents])]

    def _whole(self, text: str) -> bool:
        raw, normalised = self.added
        return bool(_IRREGULAR_SPACE.search(text) or raw and (
            raw.search(text) or normalised.search(self.normalize(text))))

    def __call__(self, texts) -> list[str]:
        chunks = []
        for text in texts:
            if self._whole(text):
                chunks.append(text)
            elif text:
                words = text.split(" ")
                chunks.append(words[0])
                chunks.extend(" " + word for word in words[1:])
            chunks.append(SEPARATOR)
        return chunks


def _apply_added_tokens_decoder(backend, entries: dict, path: str) -> None:
    """tokenizer_config.json's `added_tokens_decoder` over tokenizer.json's added tokens, as
    transformers does: each entry that differs from tokenizer.json's is added again."""
    present = {repr(token) for token in backend.get_added_tokens_decoder().values()}
    changed = []
    for index, entry in sorted(entries.items(), key=lambda item: int(item[0])):
        try:
            token = tokenizers.AddedToken(
                entry["content"], single_word=entry.get("single_word", False),
                lstrip=entry.get("lstrip", False), rstrip=entry.get("rstrip", False),
                normalized=entry.get("normalized", True), special=entry.get("special", False))
        except (KeyError, TypeError, AttributeError):
            raise UserError(f"{files.join(files.dirname(path), TOKENIZER_CONFIG)}: "
                            f"added_tokens_decoder[{index!r}] is not an added token "
                            "(expected {\"content\": ..., \"special\": ...})") from None
        if repr(token) not in present:
            changed.append(token)
    if changed:
        backend.add_tokens(changed)


def load_tokenizer_json(path: str, settings: dict, lowercase: bool | None,
                        split_special_tokens: bool) -> TokenizerJson:
    """The tokenizer of the tokenizer.json at `path`, `settings` its tokenizer_config.json.
    `lowercase` (create-data's --lowercase) must agree with its normaliser, which decides."""
    try:
        text = files.read_text(path)
    except FileNotFoundError:
        raise UserError(f"{path}: tokenizer file not found") from None
    except UnicodeDecodeError as error:
        raise UserError(f"{path}: not UTF-8 text ({error.reason} at byte {error.start})") \
            from None
    special_map = read_json_settings(files.join(files.dirname(path), SPECIAL_TOKENS_MAP))
    tokenizer = TokenizerJson(text, path, settings, special_map, split_special_tokens)
    if lowercase is not None and lowercase != tokenizer.lowercase:
        raise UserError(f"{path}: a tokenizer.json's normaliser decides the casing (this one "
                        f"{'lower-cases' if tokenizer.lowercase else 'keeps case'}); leave out "
                        "--lowercase / --no-lowercase")
    return tokenizer
