"""Raw domain text for masked-LM fine-tuning: packed into blocks on the fly, masks per epoch.

A text file is read as documents: with blank lines in it, each blank-line-separated block of
lines is one document (the BERT pre-training format, and hard-wrapped prose); without, each
line is one. Documents are tokenised (no shard step), joined with [SEP] between them and cut
into `[CLS] ... [SEP]` blocks of `max_seq_len` tokens (the last one padded), as RoBERTa's
FULL-SENTENCES packing does. Masks are drawn by `masking.py` (BERT's rule: 15% of the real
non-special tokens, 80% [MASK] / 10% kept / 10% random) from a generator seeded by
(seed, epoch), so each epoch sees fresh masks (dynamic masking) and a run repeats exactly;
held-out blocks always get the masks of one fixed seed, so evaluations before and after
training score the same masked positions.

A directory of pre-training shards (`create-data`, packed with --pack or not, or made with
--objective mlm) reads as blocks too: each row's tokens with its stored masks undone, its
segment ids, and for packed rows its instance and position ids (attention stays within
each instance); masks are then drawn per epoch over the row's real tokens as for text.
"""

import io
import math

import numpy as np

from bert_jax.errors import UserError
from input_pipeline import masking
from bert_jax.storage.files import read_user_text

HELDOUT_STREAM = 1 << 30  # the generator stream of held-out masks, apart from every epoch's


def read_documents(path: str) -> list[str]:
    """The documents of a text file (see the module docstring), whitespace-joined."""
    # Split as iterating the file splits (at newlines only, not at every splitlines() break).
    lines = [line.strip() for line in io.StringIO(read_user_text(path, "text"))]
    if "" not in lines:
        documents = [line for line in lines if line]
    else:
        documents, current = [], []
        for line in lines + [""]:
            if line:
                current.append(line)
            elif current:
                documents.append(" ".join(current))
                current = []
    if not documents:
        raise UserError(f"{path}: no text in this file")
    return documents


def pack_blocks(tokenizer, documents: list[str], max_seq_len: int) -> np.ndarray:
    """input_ids (N, max_seq_len) int32: `[CLS] tokens [SEP]` blocks, the last one padded."""
    if max_seq_len < 3:
        raise UserError(f"--max-seq-len {max_seq_len} is too short for [CLS] x [SEP] blocks")
    tokens, lengths = tokenizer.encode_corpus(documents)
    # [SEP] after every document except the last: (sum(lengths) + D - 1,)
    ends = np.cumsum(lengths)
    stream = np.insert(tokens, ends[:-1], tokenizer.sep_id).astype(np.int32)
    body = max_seq_len - 2
    count = max(1, math.ceil(len(stream) / body))
    padded = np.full(count * body, tokenizer.pad_id, np.int32)
    padded[:len(stream)] = stream
    blocks = np.full((count, max_seq_len), tokenizer.pad_id, np.int32)
    blocks[:, 0] = tokenizer.cls_id
    blocks[:, 1:-1] = padded.reshape(count, body)  # (N, T - 2)
    real_length = np.minimum(body, len(stream) - body * np.arange(count))  # (N,)
    blocks[np.arange(count), real_length + 1] = tokenizer.sep_id
    return blocks


def real_tokens(blocks: np.ndarray, tokenizer) -> np.ndarray:
    """input_mask (N, T) int32 of blocks whose real tokens come first, then padding. A
    tokenizer whose [PAD] is its [SEP] (EuroBERT's, as Llama 3 pads with EOS) cannot tell a
    block's closing [SEP] from padding by id: the block is real up to the token after its
    last non-padding id, which is that [SEP]."""
    not_padding = blocks != tokenizer.pad_id
    if tokenizer.pad_id != tokenizer.sep_id:
        return not_padding.astype(np.int32)
    last = blocks.shape[1] - 1 - np.argmax(not_padding[:, ::-1], axis=1)  # (N,)
    return (np.arange(blocks.shape[1])[None] <= last[:, None] + 1).astype(np.int32)


class MaskedBlocks:
    """Blocks of one file and the masks drawn for them (numpy batches for the MLM task)."""

    def __init__(self, blocks: np.ndarray, tokenizer, seed: int, masked_lm_prob: float = 0.15,
                 max_predictions: int | None = None, rows: dict | None = None):
        """`rows`: segment_ids, instance_ids, position_ids (N, T) of shard rows; text blocks
        have one segment and one instance each."""
        self.blocks = blocks
        self.tokenizer = tokenizer
        self.seed = seed
        self.masked_lm_prob = masked_lm_prob
        seq_len = blocks.shape[1]
        # round(T * p) can exceed floor; one more slot never changes which tokens are drawn.
        self.max_predictions = max_predictions or min(seq_len, math.ceil(seq_len * masked_lm_prob))
        self.input_mask = real_tokens(blocks, tokenizer)
        self.rows = rows or dict(
            segment_ids=np.zeros_like(blocks), instance_ids=self.input_mask,
            position_ids=np.broadcast_to(np.arange(seq_len, dtype=np.int32), blocks.shape))

    def __len__(self) -> int:
        return len(self.blocks)

    def masked(self, stream: int) -> dict[str, np.ndarray]:
        """Every block masked with the generator of `stream`: input_ids, input_mask,
        segment_ids (N, T) int32, masked_lm_positions, masked_lm_ids (N, P) int32,
        masked_lm_weights (N, P) float32."""
        tokenizer = self.tokenizer
        rng = np.random.default_rng([self.seed, stream])
        real = self.input_mask > 0
        candidates = real & ~np.isin(self.blocks, tokenizer.special_ids)
        positions = masking.choose_positions(candidates, real.sum(axis=1), self.max_predictions,
                                             self.masked_lm_prob, rng)
        input_ids = self.blocks.copy()
        features = masking.apply_masks(input_ids, positions, tokenizer.mask_id,
                                       tokenizer.vocab_size, rng)
        return dict(input_ids=input_ids, input_mask=self.input_mask, **self.rows, **features)

    def epoch(self, epoch: int) -> dict[str, np.ndarray]:
        """Fresh masks for training epoch `epoch` (0-based)."""
        if not 0 <= epoch < HELDOUT_STREAM:
            raise ValueError(f"epoch {epoch} out of range")
        return self.masked(epoch)

    def heldout(self) -> dict[str, np.ndarray]:
        """The fixed masks of held-out evaluation: the same on every call."""
        return self.masked(HELDOUT_STREAM)


def load_masked_blocks(path: str, tokenizer, max_seq_len: int, seed: int,
                       masked_lm_prob: float = 0.15) -> MaskedBlocks:
    """A text file read, tokenised and packed, or a shard directory read; see `MaskedBlocks`."""
    if not 0 < masked_lm_prob < 1:
        raise UserError(f"masked-LM probability {masked_lm_prob} should be between 0 and 1")
    from bert_jax.storage import files
    from input_pipeline import manifest as manifest_lib

    if files.isdir(path) and files.exists(files.join(path, manifest_lib.MANIFEST_NAME)):
        return shard_blocks(path, tokenizer, max_seq_len, seed, masked_lm_prob)
    return MaskedBlocks(pack_blocks(tokenizer, read_documents(path), max_seq_len), tokenizer,
                        seed, masked_lm_prob)


def shard_blocks(directory: str, tokenizer, max_seq_len: int, seed: int,
                 masked_lm_prob: float) -> MaskedBlocks:
    """Every row of a shard directory as blocks (see the module docstring)."""
    import tensorflow as tf

    from input_pipeline import manifest as manifest_lib, schema
    from input_pipeline.reader import check_schema

    manifest = manifest_lib.read_manifest(directory)
    manifest_lib.check_vocabulary(manifest, tokenizer.hash, directory)
    settings, per_row = manifest["settings"], manifest_lib.sequences_per_row(manifest)
    if settings["max_seq_len"] != max_seq_len:
        raise UserError(f"{directory}: shards of {settings['max_seq_len']} tokens, but "
                        f"--max-seq-len is {max_seq_len}; give --max-seq-len "
                        f"{settings['max_seq_len']}")
    paths = manifest_lib.expand_patterns([directory])
    objective = manifest_lib.objective_of(manifest)
    predictions = settings.get("max_predictions", 0)  # objective mlm's rows store none
    for path in paths:
        check_schema(path, max_seq_len, predictions, per_row, objective)
    spec = schema.parsing_spec(max_seq_len, predictions, per_row, objective)
    parts = [tf.io.parse_example(records, spec)
             for records in tf.data.TFRecordDataset(paths).batch(4096)]
    rows = {name: np.concatenate([part[name].numpy() for part in parts]).astype(
        np.float32 if name == "masked_lm_weights" else np.int32) for name in spec}
    blocks = rows["input_ids"].copy()
    if "masked_lm_weights" in rows:
        which, slot = np.nonzero(rows["masked_lm_weights"] > 0)  # the stored masks, undone
        blocks[which, rows["masked_lm_positions"][which, slot]] = \
            rows["masked_lm_ids"][which, slot]
    blocks[rows["input_mask"] == 0] = tokenizer.pad_id
    return MaskedBlocks(blocks, tokenizer, seed, masked_lm_prob, rows=dict(
        segment_ids=rows.get("segment_ids", np.zeros_like(blocks)),
        instance_ids=rows.get("instance_ids", rows["input_mask"]),
        position_ids=rows.get("position_ids", np.broadcast_to(
            np.arange(max_seq_len, dtype=np.int32), blocks.shape))))
