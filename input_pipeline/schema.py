"""The pre-training TFRecord schema: google-research/bert's feature names, kinds and shapes.

Shards written by `create_data` and by the original `create_pretraining_data.py` share it,
so either tool's shards read in the other. Importing this module does not import TensorFlow.
"""

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

# The dtypes a batch has once it crosses into JAX (TFRecord only stores int64 and float32).
BATCH_DTYPES = {name: ("float32" if kind == "float" else "int32")
                for name, (kind, _) in FEATURES.items()}


def feature_lengths(seq_len: int, max_predictions: int) -> dict[str, int]:
    """The fixed length of each feature for these settings."""
    sizes = {"seq_len": seq_len, "max_predictions": max_predictions, "one": 1}
    return {name: sizes[length] for name, (_, length) in FEATURES.items()}


def parsing_spec(seq_len: int, max_predictions: int) -> dict:
    """The `tf.io.parse_example` spec, as the original `run_pretraining.py` builds it."""
    import tensorflow as tf
    lengths = feature_lengths(seq_len, max_predictions)
    return {name: tf.io.FixedLenFeature([lengths[name]],
                                        tf.float32 if kind == "float" else tf.int64)
            for name, (kind, _) in FEATURES.items()}
