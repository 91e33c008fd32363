"""Test data shared by the pipeline tests: a made-up corpus, its vocabulary, shard readers.

Not a test module (no `test_` prefix); imported by every test that makes or reads shards.
"""

import collections
import os

import numpy as np

SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS = [f"w{index}" for index in range(400)]
PIECES = ["long", "##er", "##est", "##ish"]  # words of several pieces, for whole-word masking
VOCABULARY = SPECIAL + WORDS + PIECES + [".", ","]
PAD, UNK, CLS, SEP, MASK = range(5)

# The original's feature spec, as its run_pretraining.py input_fn_builder writes it.
def original_feature_spec(seq_len: int, max_predictions: int) -> dict:
    import tensorflow as tf
    return {
        "input_ids": tf.io.FixedLenFeature([seq_len], tf.int64),
        "input_mask": tf.io.FixedLenFeature([seq_len], tf.int64),
        "segment_ids": tf.io.FixedLenFeature([seq_len], tf.int64),
        "masked_lm_positions": tf.io.FixedLenFeature([max_predictions], tf.int64),
        "masked_lm_ids": tf.io.FixedLenFeature([max_predictions], tf.int64),
        "masked_lm_weights": tf.io.FixedLenFeature([max_predictions], tf.float32),
        "next_sentence_labels": tf.io.FixedLenFeature([1], tf.int64),
    }


def write_vocabulary(directory: str) -> str:
    path = os.path.join(directory, "vocab.txt")
    with open(path, "w", encoding="utf-8") as file:
        file.write("\n".join(VOCABULARY) + "\n")
    return path


def make_corpus(path: str, num_documents: int, seed: int, zipf: bool = True,
                max_sentences: int = 24) -> list[list[str]]:
    """Writes BERT-format text (Zipf-distributed words) and returns its documents."""
    rng = np.random.default_rng(seed)
    documents = []
    for _ in range(num_documents):
        sentences = []
        for _ in range(int(rng.integers(1, max_sentences + 1))):
            length = int(rng.integers(2, 30))
            ids = (np.minimum(rng.zipf(1.4, length), len(WORDS)) - 1 if zipf
                   else rng.integers(0, len(WORDS), length))
            words = [WORDS[i] for i in ids]
            if rng.random() < 0.3:
                words.append("long" + rng.choice(["er", "est", "ish", "erish"]))
            sentences.append(" ".join(words) + " .")
        documents.append(sentences)
    with open(path, "w", encoding="utf-8") as file:
        file.write("\n\n".join("\n".join(sentences) for sentences in documents) + "\n")
    return documents


def vocabulary_and_corpus(directory, num_documents: int, seed: int) -> tuple[str, str]:
    """(vocab.txt path, corpus.txt path): the test vocabulary and a made-up corpus of
    `num_documents` documents, both written into `directory`."""
    vocab = write_vocabulary(str(directory))
    corpus = os.path.join(str(directory), "corpus.txt")
    make_corpus(corpus, num_documents=num_documents, seed=seed)
    return vocab, corpus


def mlm_shards(directory, name: str, corpus: str, vocab: str, seq_len: int,
               max_sequences_per_row: int = 3, **settings) -> str:
    """`create-data --objective mlm`'s two shards of `corpus` in directory/name (one worker
    unless `settings` say otherwise); returns their directory."""
    from input_pipeline.create_data import create_pretraining_data
    output = os.path.join(str(directory), name)
    create_pretraining_data([corpus], vocab, output, **{
        "num_shards": 2, "workers": 1, "show_progress": False, "max_seq_len": seq_len,
        "max_sequences_per_row": max_sequences_per_row, "objective": "mlm", **settings})
    return output


def read_shards(paths: list[str], seq_len: int, max_predictions: int) -> dict[str, np.ndarray]:
    """Every record of the shards, parsed with the original's feature spec."""
    return parse_shards(paths, original_feature_spec(seq_len, max_predictions))


def parse_shards(paths: list[str], spec: dict) -> dict[str, np.ndarray]:
    """Every record of the shards parsed with `spec`: one array per feature, rows in order."""
    import tensorflow as tf
    columns = collections.defaultdict(list)
    for records in tf.data.TFRecordDataset(paths).batch(4096):
        for name, value in tf.io.parse_example(records, spec).items():
            columns[name].append(value.numpy())
    return {name: np.concatenate(values) for name, values in columns.items()}


def unmasked_ids(features: dict, row: int) -> np.ndarray:
    """A row's input_ids with each masked position given back its label."""
    ids = features["input_ids"][row].copy()
    count = int(features["masked_lm_weights"][row].sum())
    ids[features["masked_lm_positions"][row, :count]] = features["masked_lm_ids"][row, :count]
    return ids


def write_original_style_shard(path: str, features: dict[str, np.ndarray]) -> None:
    """Writes rows exactly as the original `write_instance_to_example_files` does."""
    import tensorflow as tf

    def create_int_feature(values):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))

    def create_float_feature(values):
        return tf.train.Feature(float_list=tf.train.FloatList(value=list(values)))

    with tf.io.TFRecordWriter(path) as writer:
        for row in range(len(features["input_ids"])):
            ordered = collections.OrderedDict()
            for name in ("input_ids", "input_mask", "segment_ids", "masked_lm_positions",
                         "masked_lm_ids"):
                ordered[name] = create_int_feature(int(v) for v in features[name][row])
            ordered["masked_lm_weights"] = create_float_feature(
                float(v) for v in features["masked_lm_weights"][row])
            ordered["next_sentence_labels"] = create_int_feature(
                [int(features["next_sentence_labels"][row])])
            example = tf.train.Example(features=tf.train.Features(feature=ordered))
            writer.write(example.SerializeToString())
