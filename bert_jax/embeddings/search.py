"""Exact cosine search over corpus embeddings, in chunks, and the saved corpus index.

Scores are computed one corpus chunk at a time against all queries and merged into a running
top-k, so memory beyond the embeddings themselves is (queries, chunk rows), never
(queries, corpus). The index is one .npz: a marker array first (`file_kinds.INDEX_MARKER`, so
an index is known by its first bytes and nothing else is taken for one), the embeddings and
the hashes of the corpus file and of the model (weights, vocabulary, pooling) they were
computed from; a mismatch of either means the index is stale and is rebuilt. An index that
cannot be read (cut short, emptied, bytes flipped) is moved aside, named, and rebuilt.
"""

import hashlib
import json
import os
import sys

import numpy as np

from bert_jax.embeddings.similarity import unit_rows
from bert_jax.errors import UserError
from bert_jax.storage import files, outputs
from bert_jax.storage.file_kinds import INDEX_MARKER, SEARCH_INDEX, FileKind

# Corpus rows scored at once: (queries, CHUNK_ROWS) float32 scores live at a time.
CHUNK_ROWS = 16384
INDEX_SUFFIX = ".bert-jax-index.npz"


def _best(scores: np.ndarray, indices: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the k highest scores (ties: lower index first) among (Q, C) candidates."""
    order = np.lexsort((indices, -scores), axis=1)[:, :k]  # last key sorts first
    return np.take_along_axis(scores, order, 1), np.take_along_axis(indices, order, 1)


def top_k(corpus: np.ndarray, queries: np.ndarray, k: int, chunk_rows: int = CHUNK_ROWS
          ) -> tuple[np.ndarray, np.ndarray]:
    """(N, D) corpus and (Q, D) queries -> (Q, min(k, N)) cosine scores and corpus rows, best
    first; equal scores keep corpus order."""
    queries = unit_rows(queries.astype(np.float32))
    k = min(k, len(corpus))
    best_scores = np.empty((len(queries), 0), np.float32)
    best_rows = np.empty((len(queries), 0), np.int64)
    for start in range(0, len(corpus), chunk_rows):
        scores = queries @ unit_rows(corpus[start:start + chunk_rows]).T  # (Q, C)
        keep = min(k, scores.shape[1])
        candidates = np.argpartition(-scores, keep - 1, axis=1)[:, :keep]  # (Q, keep)
        best_scores, best_rows = _best(
            np.concatenate([best_scores, np.take_along_axis(scores, candidates, 1)], axis=1),
            np.concatenate([best_rows, candidates + start], axis=1), k)
    return best_scores, best_rows


def similar_pairs(corpus: np.ndarray, threshold: float, chunk_rows: int = CHUNK_ROWS
                  ) -> list[tuple[int, int, float]]:
    """Every (i, j, cosine) with i < j and cosine >= threshold, sorted by i then j."""
    pairs = []
    for start in range(0, len(corpus), chunk_rows):
        left = unit_rows(corpus[start:start + chunk_rows])
        for other in range(start, len(corpus), chunk_rows):
            scores = left @ unit_rows(corpus[other:other + chunk_rows]).T  # (C, C')
            rows, columns = np.nonzero(scores >= threshold)
            for row, column in zip(rows + start, columns + other):
                if row < column:
                    pairs.append((int(row), int(column), float(scores[row - start,
                                                                      column - other])))
    return sorted(pairs)


def file_hash(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def default_index_path(corpus_path: str) -> str:
    return corpus_path + INDEX_SUFFIX


# An index: its marker, or (damaged past its first bytes) the name bert-jax gives one.
INDEX_KIND = FileKind(SEARCH_INDEX.what, lambda path: path.endswith(INDEX_SUFFIX)
                      or SEARCH_INDEX.recognise(path))


def _read_index(path: str) -> tuple[np.ndarray, dict] | None:
    """(embeddings, metadata), or None for a damaged index, moved aside (and said so)."""
    try:
        with np.load(path) as index:
            return index["embeddings"], json.loads(str(index["metadata"]))
    except Exception as error:  # noqa: BLE001  zip, pickle, EOF, JSON: any damage at all
        aside = _aside_name(path)
        reason = f"{type(error).__name__}: {error}".splitlines()[0][:120]
        try:
            os.replace(path, aside)
        except OSError as moving:
            raise UserError(f"index {path} is damaged ({reason}) and cannot be moved aside "
                            f"({moving.strerror}); remove it, or choose another --index"
                            ) from None
        print(f"index {path} is damaged ({reason}); moved it to {aside} and rebuilding it",
              file=sys.stderr)
        return None


def _aside_name(path: str) -> str:
    """PATH.damaged, or PATH.damaged-2, -3 ...: never over an earlier one."""
    name, count = f"{path}.damaged", 1
    while os.path.exists(name):
        count += 1
        name = f"{path}.damaged-{count}"
    return name


def _write_index(path: str, embeddings: np.ndarray, metadata: dict) -> None:
    """Published only when complete, with the user's umask, as every output is; a disk
    without room for it is said before writing."""
    outputs.check_space("--index", path, embeddings.nbytes + 4096)  # + the headers
    with files.atomic_write(path, "wb") as file:
        np.savez(file, **{INDEX_MARKER: np.array(1)}, embeddings=embeddings,
                 metadata=np.array(json.dumps(metadata)))


def corpus_embeddings(corpus_path: str, texts: list[str], model_fingerprint: str, compute,
                      index_path: str | None = None) -> np.ndarray:
    """The corpus embeddings from the index at `index_path` if it matches the corpus and the
    model, else `compute(texts)`, saved there (replacing a stale index)."""
    index_path = index_path or default_index_path(corpus_path)
    metadata = dict(corpus_sha256=file_hash(corpus_path), model_sha256=model_fingerprint,
                    lines=len(texts))
    if os.path.exists(index_path):
        stored = _read_index(index_path)
        if stored is not None:
            embeddings, found = stored
            changed = [name for name, key in (("corpus", "corpus_sha256"),
                                              ("model", "model_sha256"))
                       if found.get(key) != metadata[key]]
            if not changed and len(embeddings) == len(texts):
                return embeddings
            print(f"index {index_path} is stale ({' and '.join(changed) or 'size'} changed "
                  "since it was built); rebuilding it", file=sys.stderr)
    embeddings = compute(texts)
    _write_index(index_path, embeddings, metadata)
    return embeddings
