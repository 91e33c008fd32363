"""Original google-research/bert TensorFlow checkpoints (`bert_model.ckpt.*` + `bert_config.json`).

The one place the original variable names appear (`modeling.py`, `run_pretraining.py` and
`run_classifier.py` of google-research/bert). One name table serves reading and writing,
so the two cannot drift. TensorFlow is imported only when a checkpoint is read or written.
"""

import glob
import json
import os

from bert_jax.storage import files
from bert_jax.models.config import BertConfig
from bert_jax.errors import UserError
from bert_jax.interop import hf_bert, tensor_map
from bert_jax.interop.tensor_map import COPY, Entry, dense_entries, norm_entries

CONFIG_NAME = "bert_config.json"
CHECKPOINT_NAME = "bert_model.ckpt"  # the prefix of the released checkpoints' two files
# The keys of the released bert_config.json files (modeling.BertConfig's constructor).
ORIGINAL_CONFIG_KEYS = ("attention_probs_dropout_prob", "hidden_act", "hidden_dropout_prob",
                        "hidden_size", "initializer_range", "intermediate_size",
                        "max_position_embeddings", "num_attention_heads", "num_hidden_layers",
                        "type_vocab_size", "vocab_size")
# The original code hard-codes this LayerNorm epsilon; any other value has to travel as an
# extra key (which modeling.BertConfig.from_dict stores and ignores).
_ORIGINAL_LAYER_NORM_EPS = 1e-12
# What the original graphs hold besides the encoder: run_pretraining.py's `cls/` heads and
# run_classifier.py's sequence classifier.
HEAD_PARTS = ("mlm_head", "nsp_head", "classifier")
# Variables of a run_pretraining.py output that are not model weights: the step counter and
# the AdamWeightDecayOptimizer's moments.
_TRAINING_STATE_SUFFIXES = ("/adam_m", "/adam_v")
_TRAINING_STATE_NAMES = ("global_step",)


def _layer_entries(index: int) -> list[Entry]:
    ours, theirs = ("bert", f"layer_{index}"), f"bert/encoder/layer_{index}/"
    entries = []
    for projection in ("query", "key", "value"):
        entries += dense_entries((*ours, "attention", projection),
                                 f"{theirs}attention/self/{projection}/kernel",
                                 f"{theirs}attention/self/{projection}/bias", "encoder")
    return entries + [
        *dense_entries((*ours, "attention", "output"), f"{theirs}attention/output/dense/kernel",
                       f"{theirs}attention/output/dense/bias", "encoder", input_rank=2),
        *norm_entries((*ours, "attention_layer_norm"), f"{theirs}attention/output/LayerNorm/gamma",
                      f"{theirs}attention/output/LayerNorm/beta", "encoder"),
        *dense_entries((*ours, "mlp", "intermediate"), f"{theirs}intermediate/dense/kernel",
                       f"{theirs}intermediate/dense/bias", "encoder"),
        *dense_entries((*ours, "mlp", "output"), f"{theirs}output/dense/kernel",
                       f"{theirs}output/dense/bias", "encoder"),
        *norm_entries((*ours, "output_layer_norm"), f"{theirs}output/LayerNorm/gamma",
                      f"{theirs}output/LayerNorm/beta", "encoder"),
    ]


def name_table(config: BertConfig) -> list[Entry]:
    """Every variable of the original pre-training and classifier graphs."""
    embeddings = ("bert", "embeddings")
    entries = [
        Entry((*embeddings, "word_embeddings", "embedding"), "bert/embeddings/word_embeddings",
              "encoder", COPY),
        Entry((*embeddings, "position_embeddings", "embedding"),
              "bert/embeddings/position_embeddings", "encoder", COPY),
        Entry((*embeddings, "segment_embeddings", "embedding"),
              "bert/embeddings/token_type_embeddings", "encoder", COPY),
        *norm_entries((*embeddings, "layer_norm"), "bert/embeddings/LayerNorm/gamma",
                      "bert/embeddings/LayerNorm/beta", "encoder"),
    ]
    for index in range(config.num_layers):
        entries += _layer_entries(index)
    return entries + [
        *dense_entries(("bert", "pooler"), "bert/pooler/dense/kernel", "bert/pooler/dense/bias",
                       "pooler"),
        *dense_entries(("mlm_head", "transform"), "cls/predictions/transform/dense/kernel",
                       "cls/predictions/transform/dense/bias", "mlm_head"),
        *norm_entries(("mlm_head", "layer_norm"), "cls/predictions/transform/LayerNorm/gamma",
                      "cls/predictions/transform/LayerNorm/beta", "mlm_head"),
        Entry(("mlm_head", "output_bias"), "cls/predictions/output_bias", "mlm_head", COPY),
        # The NSP weights are created as [2, hidden] and used with transpose_b=True.
        *dense_entries(("nsp_head",), "cls/seq_relationship/output_weights",
                       "cls/seq_relationship/output_bias", "nsp_head", transposed=True),
        # run_classifier.py's create_model: [num_labels, hidden] at the top level, no scope.
        *dense_entries(("classifier",), "output_weights", "output_bias", "classifier",
                       transposed=True),
    ]


def is_checkpoint_directory(directory: str) -> bool:
    return (files.exists(files.join(directory, CONFIG_NAME))
            and bool(files.glob(files.join(directory, "*.index"))))


def checkpoint_prefix(directory: str) -> str:
    """The checkpoint to read: the one the `checkpoint` state file names, else the only one."""
    state_path = os.path.join(directory, "checkpoint")
    if os.path.exists(state_path):
        with open(state_path, encoding="utf-8") as file:
            for line in file:
                if line.startswith("model_checkpoint_path:"):
                    name = line.split(":", 1)[1].strip().strip('"')
                    return name if os.path.isabs(name) else os.path.join(directory, name)
    indexes = sorted(glob.glob(os.path.join(directory, "*.index")))
    if len(indexes) != 1:
        raise UserError(f"{directory}: expected one TensorFlow checkpoint (*.index), found "
                        f"{[os.path.basename(path) for path in indexes]} and no 'checkpoint' file")
    return indexes[0][:-len(".index")]


def read_directory(directory: str, config: BertConfig) -> dict:
    """The params of an original BERT checkpoint directory, given its config (bert_config.json,
    read by the caller: `config_from_original`)."""
    import tensorflow as tf

    prefix = checkpoint_prefix(directory)
    try:
        reader = tf.train.load_checkpoint(prefix)
    except (tf.errors.OpError, ValueError) as error:
        raise UserError(f"{prefix}: cannot read TensorFlow checkpoint ({error})") from None
    tensors = {name: _read_tensor(reader, name, prefix)
               for name in reader.get_variable_to_shape_map()
               if name not in _TRAINING_STATE_NAMES and not name.endswith(_TRAINING_STATE_SUFFIXES)}
    return tensor_map.tensors_to_params(
        tensors, name_table(config), tensor_map.parameter_shapes(config), prefix)


def _read_tensor(reader, name: str, prefix: str):
    """One variable; a data file cut short (TensorFlow's IndexError) or damaged is one line
    naming it."""
    import tensorflow as tf

    try:
        return reader.get_tensor(name)
    except (IndexError, ValueError, tf.errors.OpError) as error:
        data = ", ".join(os.path.basename(path) for path in sorted(glob.glob(prefix + ".data-*")))
        raise UserError(f"{prefix}: cannot read variable {name} from {data or 'its data file'} "
                        f"({error}): the file is cut short or damaged; copy the checkpoint "
                        "again") from None


def config_from_original(values: dict, source: str) -> BertConfig:
    """A BertConfig from bert_config.json: an HF config.json's keys, without model_type."""
    return hf_bert.config_from_hf(values, source)


def config_to_original(config: BertConfig) -> dict:
    """bert_config.json's values; `layer_norm_eps` only when it is not the original 1e-12."""
    values = hf_bert.config_to_hf(config, pad_id=0)
    original = {key: values[key] for key in ORIGINAL_CONFIG_KEYS}
    if config.layer_norm_eps != _ORIGINAL_LAYER_NORM_EPS:
        original["layer_norm_eps"] = config.layer_norm_eps
    return original


def write_directory(config: BertConfig, params: dict, directory: str) -> list[str]:
    """Writes bert_model.ckpt.{index,data-00000-of-00001} and bert_config.json.

    The variables are the parts `params` holds (always the encoder), under the names and in
    the shapes of the released checkpoints, written by TensorFlow's own SaveV2 op (what
    `tf.compat.v1.train.Saver` runs). Returns the parts written.
    """
    import tensorflow as tf

    tensor_map.refuse_unknown_heads(params, HEAD_PARTS, "an original BERT checkpoint")
    parts = sorted(tensor_map.present_parts(params))
    tensors = tensor_map.params_to_tensors(params, name_table(config), parts)
    names = sorted(tensors)
    tf.raw_ops.SaveV2(prefix=os.path.join(directory, CHECKPOINT_NAME), tensor_names=names,
                      shape_and_slices=[""] * len(names),
                      tensors=[tf.constant(tensors[name]) for name in names])
    with open(os.path.join(directory, CONFIG_NAME), "w", encoding="utf-8") as file:
        json.dump(config_to_original(config), file, indent=2, sort_keys=True)
        file.write("\n")
    return parts
