"""What can be checked of a shard from its first records alone, with or without a manifest.

Shards made by `bert-jax create-data` carry a manifest (vocabulary hash, sequence length,
prediction count); shards made by the original `create_pretraining_data.py` carry none.
For both, the first records tell the schema (every feature, its kind and length) and
whether the token ids fit the model's vocabulary; only the manifest can tell that the
ids mean the same words (see `manifest.check_vocabulary`).
"""

import numpy as np

from bert_jax.errors import UserError
from input_pipeline import tfrecord

# Records read from the front of a shard: enough to catch another vocabulary's ids
# (a larger vocabulary's frequent words sit above a smaller one's size) in milliseconds.
RECORDS_CHECKED = 16
# Features holding token ids; each must be below the vocabulary size.
_ID_FEATURES = ("input_ids", "masked_lm_ids")


def check_first_records(path: str, seq_len: int, max_predictions: int,
                        vocab_size: int | None = None, limit: int = RECORDS_CHECKED,
                        max_sequences_per_row: int = 1, objective: str = "mlm_nsp") -> int:
    """Checks the schema of a shard's first `limit` records (rows of up to
    `max_sequences_per_row` instances, for `objective`) and, given `vocab_size`, that their
    token ids are in [0, vocab_size); returns how many records were checked (0 for an empty
    shard). Raises `UserError` naming the file, record and feature."""
    from input_pipeline.reader import check_schema  # TensorFlow: only when shards are read

    if not check_schema(path, seq_len, max_predictions, max_sequences_per_row, objective):
        return 0
    import tensorflow as tf

    records = tfrecord.first_records(path, limit)
    for index, data in enumerate(records):
        features = tf.train.Example.FromString(data).features.feature
        for name in (name for name in _ID_FEATURES if name in features):  # mlm: no labels
            ids = np.asarray(features[name].int64_list.value)
            if vocab_size is not None and ids.size and (ids.min() < 0 or ids.max() >= vocab_size):
                raise UserError(
                    f"{path}: record {index}: {name} holds token id {int(ids.max())} (lowest "
                    f"{int(ids.min())}), outside the vocabulary's {vocab_size} ids; the shards "
                    "were made with another (larger) vocabulary")
    return len(records)
