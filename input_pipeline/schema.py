"""The pre-training TFRecord schema: google-research/bert's feature names, kinds and shapes.

Shards written by `create_data` and by the original `create_pretraining_data.py` share it,
so either tool's shards read in the other. Packed shards (`create-data --pack`, see
`packing.py`) have a schema of their own, `PACKED_FEATURES`: a reader that does not know
it fails on the first record (an extra feature, or predictions and NSP labels of another
length) instead of reading wrong rows. Masked-LM-only rows (`create-data --objective mlm`)
have a third, `MLM_FEATURES`: tokens only, their masks drawn when rows are read. Importing
this module does not import TensorFlow.
"""

OBJECTIVES = ("mlm_nsp", "mlm")  # BERT's masked LM + next sentence; masked LM only

# name -> (kind, length key): kind is the tf.train.Feature list that holds the values;
# the length is the sequence length, the prediction count, or 1. In the order the original
# writer adds them (its OrderedDict), which is also the order our serialiser writes them.
FEATURES = {
    "input_ids": ("int64", "seq_len"),
    "input_mask": ("int64", "seq_len"),
    "segment_ids": ("int64", "seq_len"),
    "masked_lm_positions": ("int64", "max_predictions"),
    "masked_lm_ids": ("int64", "max_predictions"),
    "masked_lm_weights": ("float", "max_predictions"),
    "next_sentence_labels": ("int64", "one"),
}

# Packed rows (up to N instances each): per token, which instance (1..N, 0 = padding) and
# the position within it; per instance slot (N), its [CLS] position, NSP label and weight
# (1 = the slot holds an instance); the instances' predictions in turn, in P + N slots.
PACKED_FEATURES = {
    "input_ids": ("int64", "seq_len"),
    "input_mask": ("int64", "seq_len"),
    "segment_ids": ("int64", "seq_len"),
    "instance_ids": ("int64", "seq_len"),
    "position_ids": ("int64", "seq_len"),
    "masked_lm_positions": ("int64", "max_predictions"),
    "masked_lm_ids": ("int64", "max_predictions"),
    "masked_lm_weights": ("float", "max_predictions"),
    "instance_starts": ("int64", "sequences"),
    "next_sentence_labels": ("int64", "sequences"),
    "next_sentence_weights": ("float", "sequences"),
}

# Masked-LM-only rows (objective mlm): `[CLS] text [SEP]` sequences packed into a row, per
# token its sequence (1..N, 0 = padding) and position within it. One segment, so no
# segment ids (the reader gives zeros); no masks (drawn when read, `dynamic_masking.py`).
MLM_FEATURES = {
    "input_ids": ("int64", "seq_len"),
    "input_mask": ("int64", "seq_len"),
    "instance_ids": ("int64", "seq_len"),
    "position_ids": ("int64", "seq_len"),
}

# The dtypes a batch has once it crosses into JAX (TFRecord only stores int64 and float32).
BATCH_DTYPES = {name: ("float32" if kind == "float" else "int32")
                for name, (kind, _) in PACKED_FEATURES.items()}


def features(max_sequences_per_row: int = 1, objective: str = "mlm_nsp") -> dict:
    """The schema of rows of this many instances (1: the original, unpacked) for an
    objective (mlm: one schema however many sequences a row holds)."""
    if objective == "mlm":
        return MLM_FEATURES
    return FEATURES if max_sequences_per_row == 1 else PACKED_FEATURES


def objective_of_features(names) -> str:
    """Which objective's rows a record holding these feature names is."""
    return "mlm_nsp" if "masked_lm_ids" in names else "mlm"


def feature_lengths(seq_len: int, max_predictions: int, max_sequences_per_row: int = 1,
                    objective: str = "mlm_nsp") -> dict[str, int]:
    """The fixed length of each feature for these settings (`max_predictions` per instance:
    a packed row of N instances holds max_predictions + N, see `packing.row_predictions`)."""
    row_predictions = max_predictions + (max_sequences_per_row if max_sequences_per_row > 1
                                         else 0)
    sizes = {"seq_len": seq_len, "max_predictions": row_predictions, "one": 1,
             "sequences": max_sequences_per_row}
    return {name: sizes[length]
            for name, (_, length) in features(max_sequences_per_row, objective).items()}


def parsing_spec(seq_len: int, max_predictions: int, max_sequences_per_row: int = 1,
                 objective: str = "mlm_nsp") -> dict:
    """The `tf.io.parse_example` spec, as the original `run_pretraining.py` builds it."""
    import tensorflow as tf
    lengths = feature_lengths(seq_len, max_predictions, max_sequences_per_row, objective)
    return {name: tf.io.FixedLenFeature([lengths[name]],
                                        tf.float32 if kind == "float" else tf.int64)
            for name, (kind, _) in features(max_sequences_per_row, objective).items()}
