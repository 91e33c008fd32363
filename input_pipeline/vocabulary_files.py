"""What every tokenizer's vocabulary shares: BERT's special tokens, the files a tokenizer is
read from (and which one a directory's is), reading a `vocab.txt` and a tokenizer's JSON
settings, and the fingerprint that ties shards to a vocabulary.

The tokenizers (`tokenization.py`'s WordPiece, `sentencepiece_tokenizer.py`,
`tokenizer_json.py`) and the vocabulary trainer (`vocabulary.py`) import it, so none of them
imports another for these.
"""

import hashlib
import itertools
import json
from collections.abc import Sequence

import numpy as np

from bert_jax.storage import files
from bert_jax.errors import UserError

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
SENTENCEPIECE_MODEL = "sentencepiece.model"  # its name in a vocabulary or model directory
VOCAB_TXT = "vocab.txt"
TOKENIZER_JSON = "tokenizer.json"  # a Hugging Face `tokenizers` serialization (ModernBERT's)
TOKENIZER_CONFIG = "tokenizer_config.json"
SPECIAL_TOKENS_MAP = "special_tokens_map.json"
# A directory's tokenizer, in the order looked for: a SentencePiece directory also holds its
# pieces as vocab.txt, and a Hugging Face BERT directory often holds tokenizer.json beside
# vocab.txt (the same WordPiece), so tokenizer.json is read only when it stands alone.
TOKENIZER_FILES = (SENTENCEPIECE_MODEL, VOCAB_TXT, TOKENIZER_JSON)


def tokenizer_file(directory: str) -> str | None:
    """The path of the tokenizer file in `directory` (the first of TOKENIZER_FILES present),
    or None when it has none."""
    for name in TOKENIZER_FILES:
        path = files.join(directory, name)
        if files.exists(path):
            return path
    return None


def no_tokenizer_error(directory: str, what: str = "") -> UserError:
    """The error for a directory that should hold a tokenizer and holds none."""
    return UserError(f"{what or directory}: no tokenizer; looked for "
                     f"{', '.join(TOKENIZER_FILES[:-1])} or {TOKENIZER_FILES[-1]} in {directory}")


def resolve_tokenizer_path(path: str) -> str:
    """The tokenizer file `path` names: itself, or the one in the directory `path`."""
    if not files.isdir(path):
        return path
    found = tokenizer_file(path)
    if found is None:
        raise no_tokenizer_error(path)
    return found


def tokenizer_kind(path: str) -> str:
    """'sentencepiece', 'tokenizer.json' or 'wordpiece' (vocab.txt) for a tokenizer file."""
    if path.endswith(".model"):
        return "sentencepiece"
    return "tokenizer.json" if path.endswith(".json") else "wordpiece"


def read_json_settings(path: str) -> dict:
    """A JSON object file beside a vocabulary (tokenizer_config.json, special_tokens_map.json),
    or {} when there is none."""
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


def copy_tokenizer_files(path: str, directory: str) -> None:
    """Copies the tokenizer at `path` (a file, or a directory holding one) into `directory`
    under the name a directory's tokenizer is found by, with the tokenizer_config.json and
    special_tokens_map.json beside it (casing, special tokens' names), as load_tokenizer
    reads them."""
    source = resolve_tokenizer_path(path)
    name = {"sentencepiece": SENTENCEPIECE_MODEL, "tokenizer.json": TOKENIZER_JSON,
            "wordpiece": VOCAB_TXT}[tokenizer_kind(source)]
    files.copy_file(source, files.join(directory, name))
    for name in (TOKENIZER_CONFIG, SPECIAL_TOKENS_MAP):
        beside = files.join(files.dirname(source), name)
        if files.exists(beside):
            files.copy_file(beside, files.join(directory, name))


def write_vocabulary(directory: str, tokens: Sequence[str], lowercase: bool,
                     split_special_tokens: bool = False, settings: dict | None = None) -> str:
    """vocab.txt (one token a line, id = line) and tokenizer_config.json (the casing, special
    tokens read as plain text if so, and `settings`), each published only when complete, so
    they travel with the vocabulary; returns vocab.txt's path."""
    values = {"do_lower_case": lowercase}
    if split_special_tokens:
        values["split_special_tokens"] = True
    with files.atomic_write(files.join(directory, TOKENIZER_CONFIG)) as file:
        json.dump({**values, **(settings or {})}, file, indent=2)
    path = files.join(directory, VOCAB_TXT)
    files.write_text(path, "".join(token + "\n" for token in tokens))
    return path


def read_vocabulary(path: str) -> list[str]:
    """The tokens of a BERT `vocab.txt`, one a line, id = line number."""
    try:
        with files.open_file(path) as file:
            tokens = [line.rstrip("\n") for line in file]
    except FileNotFoundError:
        raise UserError(f"{path}: vocabulary file not found") from None
    except UnicodeDecodeError as error:
        raise UserError(f"{path}: vocabulary is not UTF-8 text ({error.reason} at byte "
                        f"{error.start})" + files.wide_encoding_hint(path)) from None
    while tokens and not tokens[-1]:
        tokens.pop()  # a trailing newline is not a token
    if not tokens:
        raise UserError(f"{path}: vocabulary file is empty")
    duplicates = len(tokens) - len(set(tokens))
    if duplicates:
        raise UserError(f"{path}: vocabulary has {duplicates} duplicate token(s); "
                        "expected one distinct token per line")
    missing = [token for token in SPECIAL_TOKENS if token not in tokens]
    if missing:
        raise UserError(f"{path}: vocabulary lacks the special token(s) {missing}")
    return tokens


def vocabulary_hash(tokens: Sequence[str]) -> str:
    """A short fingerprint of a vocabulary, so shards made with another one can be refused."""
    return hashlib.sha256("\n".join(tokens).encode("utf-8")).hexdigest()[:16]


def concatenate_ids(encoded: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    """Each text's ids, concatenated: (tokens int32, lengths int64), as `encode_corpus` gives."""
    lengths = np.fromiter(map(len, encoded), np.int64, len(encoded))
    tokens = np.fromiter(itertools.chain.from_iterable(encoded), np.int32, int(lengths.sum()))
    return tokens, lengths
