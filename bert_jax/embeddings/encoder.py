"""Texts -> sentence embeddings with a loaded model: tokenise, bucket by length, encode, pool.

Texts are tokenised a chunk at a time (so a million lines never sit padded in memory at
once); within a chunk they are sorted by length into bucketed batches by
`inference.padded_batches`, and each batch's pooled vectors are written back at their rows,
so the output is in input order whatever the batching.
"""

import dataclasses
import functools
import hashlib
import json

import jax
import numpy as np

from bert_jax.storage import files
from bert_jax import inference
from bert_jax.models.config import BertConfig
from bert_jax.embeddings import pooling as pooling_functions
from bert_jax.embeddings.model_directory import EmbeddingSettings, read_settings
from bert_jax.errors import UserError
from bert_jax.interop import model_source

# Lines tokenised at once; bounds the padded id arrays to this many rows.
CHUNK_LINES = 16384


@dataclasses.dataclass(frozen=True)
class EmbeddingModel:
    config: BertConfig
    params: dict  # the encoder's tree (inference.encoder_params)
    tokenizer: object
    settings: EmbeddingSettings  # max_seq_len always set

    @property
    def dimension(self) -> int:
        return self.config.hidden_dim * len(self.settings.pooling)

    def fingerprint(self) -> str:
        """SHA-256 of the weights, the vocabulary and the pooling: equal iff embeddings are."""
        digest = hashlib.sha256()
        settings = dataclasses.asdict(self.settings)
        vocabulary = list(getattr(self.tokenizer, "tokens", []))
        lowercase = getattr(self.tokenizer, "lowercase", None)
        digest.update(json.dumps([settings, self.config.to_dict(), vocabulary, lowercase],
                                 sort_keys=True).encode())
        for path, value in sorted(jax.tree_util.tree_flatten_with_path(self.params)[0],
                                  key=lambda item: jax.tree_util.keystr(item[0])):
            digest.update(jax.tree_util.keystr(path).encode())
            digest.update(np.ascontiguousarray(value).tobytes())
        return digest.hexdigest()


def load_embedding_model(model, pooling: tuple[str, ...] | None = None,
                         normalize: bool | None = None, max_seq_len: int | None = None
                         ) -> EmbeddingModel:
    """The model at `model` (a path, a Hub name or a `ModelSource`) with its own pooling
    settings, each overridden where not None."""
    source, settings = embedding_source(model)
    loaded = model_source.load_text_model(source)
    return embedding_model(loaded.config, loaded.params, loaded.tokenizer, settings, pooling,
                           normalize, max_seq_len)


def embedding_source(model) -> tuple[model_source.ModelSource, EmbeddingSettings]:
    """(the source of the encoder's weights, how it pools) of a path, Hub name or
    `ModelSource`: a sentence-transformers directory may keep its encoder in a subdirectory
    (modules.json), so the settings are read before the encoder's source is told apart."""
    from bert_jax.interop import hub

    given = model if isinstance(model, model_source.ModelSource) else None
    # A Hub name's snapshot (looked up once, here), so its pooling files are read too.
    directory = given.directory if given else hub.resolve(model)
    encoder_directory, settings = read_settings(directory)
    if given and encoder_directory.rstrip("/") == directory.rstrip("/"):
        return given, settings
    return model_source.in_directory(encoder_directory, given.name if given else model), settings


def embedding_model(config: BertConfig, params: dict, tokenizer, settings: EmbeddingSettings,
                    pooling: tuple[str, ...] | None = None, normalize: bool | None = None,
                    max_seq_len: int | None = None) -> EmbeddingModel:
    """A loaded model pooling as its directory's `settings` say, each overridden where not
    None; shared by `bert-jax embed` and the Python API's `Model.embed`."""
    max_seq_len = max_seq_len or settings.max_seq_len or config.max_positions
    if max_seq_len < 3:  # [CLS], one piece, [SEP]
        raise UserError(f"--max-seq-len must be at least 3, got {max_seq_len}")
    config.check_seq_len(max_seq_len)
    unknown = [mode for mode in pooling or () if mode not in pooling_functions.POOLING_MODES]
    if unknown:
        raise UserError(f"pooling {unknown} is not supported; expected "
                        f"{', '.join(pooling_functions.POOLING_MODES)}")
    settings = EmbeddingSettings(
        pooling=tuple(pooling or settings.pooling),
        normalize=settings.normalize if normalize is None else bool(normalize),
        max_seq_len=max_seq_len)
    return EmbeddingModel(config, inference.encoder_params(config, params), tokenizer, settings)


@functools.partial(jax.jit, static_argnames=("config", "pooling", "normalize"))
def embed_batch(encoder: dict, input_ids, segment_ids, input_mask, *, config: BertConfig,
                pooling: tuple[str, ...], normalize: bool):
    """(B, T) ids -> (B, H * len(pooling)) sentence embeddings."""
    hidden = inference.encode(encoder, input_ids, segment_ids, input_mask, config=config,
                              layers=(config.num_layers,))["hidden_states"][0]  # (B, T, H)
    vectors = pooling_functions.pool(hidden, input_mask, pooling)
    return pooling_functions.normalize(vectors) if normalize else vectors


def embed_texts(model: EmbeddingModel, texts: list[str], batch_size: int = 32,
                progress: bool = True) -> np.ndarray:
    """(len(texts), dimension) float32 embeddings in input order.

    An empty text is embedded as `[CLS] [SEP]`, as sentence-transformers does.
    """
    from tqdm import tqdm

    if batch_size < 1:
        raise UserError(f"batch size must be at least 1, got {batch_size}")
    settings = model.settings
    embeddings = np.zeros((len(texts), model.dimension), np.float32)
    with tqdm(total=len(texts), unit="line", desc="embed", disable=not progress) as bar:
        for start in range(0, len(texts), CHUNK_LINES):
            chunk = texts[start:start + CHUNK_LINES]
            encoded = model.tokenizer.encode_for_model(chunk, settings.max_seq_len)
            for rows, batch, _ in inference.padded_batches(
                    encoded, min(batch_size, len(chunk)), settings.max_seq_len):
                vectors = embed_batch(
                    model.params, batch["input_ids"], batch["segment_ids"], batch["input_mask"],
                    config=model.config, pooling=settings.pooling, normalize=settings.normalize)
                embeddings[start + rows] = np.asarray(vectors)[:len(rows)]
                bar.update(len(rows))
    return embeddings


def read_lines(path: str, what: str = "input") -> list[str]:
    """The lines of a UTF-8 file, empty ones kept (one row each), without line endings."""
    text = files.read_user_text(path, what)
    lines = text.split("\n")  # universal newlines: \r\n and \r arrive as \n
    if lines[-1] == "":
        lines.pop()  # the final newline ends the last line; it does not start another
    if not lines:
        raise UserError(f"{path}: the {what} file has no lines")
    return lines
