"""What every tokenizer's vocabulary shares: BERT's special tokens, reading a `vocab.txt`,
the SentencePiece model's file name, and the fingerprint that ties shards to a vocabulary.

Both tokenizers (`tokenization.py`'s WordPiece, `sentencepiece_tokenizer.py`) and the
vocabulary trainer (`vocabulary.py`) import it, so none of them imports another for these.
"""

import hashlib
from collections.abc import Sequence

from bert_jax.storage import files
from bert_jax.errors import UserError

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
SENTENCEPIECE_MODEL = "sentencepiece.model"  # its name in a vocabulary or model directory


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
