"""Hugging Face `transformers` BERT directories (config.json + safetensors) <-> bert-jax params.

The one place Hugging Face's names appear. `read_directory` accepts the `BertModel` layout
(no prefix), and the `BertForPreTraining` / `BertForMaskedLM` layouts (`bert.` prefix,
`cls.*` heads). Only safetensors are read: a `pytorch_model.bin` is a pickle, and
unpickling a downloaded file can run arbitrary code.
"""

import json
import os

import numpy as np

from bert_jax.models.config import BertConfig
from bert_jax.errors import UserError
from bert_jax.interop import hf_heads, tensor_map
from bert_jax.interop.tensor_map import COPY, Entry, dense_entries, norm_entries

# Which parts each exported architecture holds, and whether its encoder names carry `bert.`.
ARCHITECTURES = {
    "BertForPreTraining": (("encoder", "pooler", "mlm_head", "nsp_head"), "bert."),
    "BertForMaskedLM": (("encoder", "mlm_head"), "bert."),
    "BertModel": (("encoder", "pooler"), ""),
    **hf_heads.ARCHITECTURES,
}
SAFETENSORS = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"
# Non-persistent buffers some older exports still wrote; they are not parameters.
_BUFFERS = ("embeddings.position_ids", "embeddings.token_type_ids")
# The MLM decoder is tied to the word embeddings and the output bias; old files store copies.
_TIED = {"cls.predictions.decoder.weight": "embeddings.word_embeddings.weight",
         "cls.predictions.decoder.bias": "cls.predictions.bias"}
# LayerNorm names of the 2018 pytorch-pretrained-bert files, still on the hub in some models.
_LEGACY_SUFFIXES = {".gamma": ".weight", ".beta": ".bias"}
# HF config.json key -> BertConfig field.
_CONFIG_KEYS = {
    "vocab_size": "vocab_size", "hidden_size": "hidden_dim", "num_hidden_layers": "num_layers",
    "num_attention_heads": "num_heads", "intermediate_size": "mlp_dim",
    "max_position_embeddings": "max_positions", "type_vocab_size": "num_segments",
    "layer_norm_eps": "layer_norm_eps", "hidden_dropout_prob": "dropout_rate",
    "attention_probs_dropout_prob": "attention_dropout_rate",
    "initializer_range": "initializer_std",
}


def _layer_entries(index: int, prefix: str) -> list[Entry]:
    ours, theirs = ("bert", f"layer_{index}"), f"{prefix}encoder.layer.{index}."
    entries = []
    for projection in ("query", "key", "value"):
        entries += dense_entries((*ours, "attention", projection),
                                 f"{theirs}attention.self.{projection}.weight",
                                 f"{theirs}attention.self.{projection}.bias", "encoder",
                                 transposed=True)
    return entries + [
        *dense_entries((*ours, "attention", "output"), f"{theirs}attention.output.dense.weight",
                       f"{theirs}attention.output.dense.bias", "encoder", input_rank=2,
                       transposed=True),
        *norm_entries((*ours, "attention_layer_norm"), f"{theirs}attention.output.LayerNorm.weight",
                      f"{theirs}attention.output.LayerNorm.bias", "encoder"),
        *dense_entries((*ours, "mlp", "intermediate"), f"{theirs}intermediate.dense.weight",
                       f"{theirs}intermediate.dense.bias", "encoder", transposed=True),
        *dense_entries((*ours, "mlp", "output"), f"{theirs}output.dense.weight",
                       f"{theirs}output.dense.bias", "encoder", transposed=True),
        *norm_entries((*ours, "output_layer_norm"), f"{theirs}output.LayerNorm.weight",
                      f"{theirs}output.LayerNorm.bias", "encoder"),
    ]


def name_table(config: BertConfig, prefix: str) -> list[Entry]:
    """Every tensor of a BertForPreTraining, its encoder names starting with `prefix`."""
    embeddings = ("bert", "embeddings")
    entries = [
        Entry((*embeddings, "word_embeddings", "embedding"),
              f"{prefix}embeddings.word_embeddings.weight", "encoder", COPY),
        Entry((*embeddings, "position_embeddings", "embedding"),
              f"{prefix}embeddings.position_embeddings.weight", "encoder", COPY),
        Entry((*embeddings, "segment_embeddings", "embedding"),
              f"{prefix}embeddings.token_type_embeddings.weight", "encoder", COPY),
        *norm_entries((*embeddings, "layer_norm"), f"{prefix}embeddings.LayerNorm.weight",
                      f"{prefix}embeddings.LayerNorm.bias", "encoder"),
    ]
    for index in range(config.num_layers):
        entries += _layer_entries(index, prefix)
    return entries + [
        *dense_entries(("bert", "pooler"), f"{prefix}pooler.dense.weight",
                       f"{prefix}pooler.dense.bias", "pooler", transposed=True),
        *dense_entries(("mlm_head", "transform"), "cls.predictions.transform.dense.weight",
                       "cls.predictions.transform.dense.bias", "mlm_head", transposed=True),
        *norm_entries(("mlm_head", "layer_norm"), "cls.predictions.transform.LayerNorm.weight",
                      "cls.predictions.transform.LayerNorm.bias", "mlm_head"),
        Entry(("mlm_head", "output_bias"), "cls.predictions.bias", "mlm_head", COPY),
        *dense_entries(("nsp_head",), "cls.seq_relationship.weight", "cls.seq_relationship.bias",
                       "nsp_head", transposed=True),
    ]


def config_from_hf(values: dict, source: str) -> BertConfig:
    """A BertConfig from an HF BERT config.json, refusing what our model cannot compute."""
    if values.get("model_type") != "bert":
        raise UserError(f"{source}: model_type is {values.get('model_type')!r}, expected 'bert'")
    checks = {"hidden_act": "gelu", "position_embedding_type": "absolute", "is_decoder": False,
              "add_cross_attention": False}
    for key, expected in checks.items():
        if values.get(key, expected) != expected:
            raise UserError(f"{source}: {key} is {values[key]!r}; bert-jax implements only "
                            f"{key}={expected!r} (the original BERT)")
    absent = sorted(key for key in _CONFIG_KEYS if key not in values and key != "layer_norm_eps")
    if absent:
        raise UserError(f"{source}: missing key(s) {absent}")
    return BertConfig.from_dict(
        {field: values[key] for key, field in _CONFIG_KEYS.items() if key in values},
        source=source)


def config_to_hf(config: BertConfig, architecture: str, pad_id: int,
                 head: dict | None = None) -> dict:
    values = {key: getattr(config, field) for key, field in _CONFIG_KEYS.items()}
    if head is not None:
        values.update(hf_heads.config_fields(head))
    return dict(architectures=[architecture], model_type="bert", hidden_act="gelu",
                position_embedding_type="absolute", pad_token_id=pad_id,
                tie_word_embeddings=True, dtype="float32", **values)


def weight_files(directory: str) -> list[str]:
    """The safetensors files of a directory: one file, or the shards its index lists."""
    index_path = os.path.join(directory, SAFETENSORS_INDEX)
    if os.path.exists(index_path):
        with open(index_path, encoding="utf-8") as file:
            shards = sorted(set(json.load(file)["weight_map"].values()))
        return [os.path.join(directory, shard) for shard in shards]
    if os.path.exists(os.path.join(directory, SAFETENSORS)):
        return [os.path.join(directory, SAFETENSORS)]
    pickles = [name for name in ("pytorch_model.bin", "tf_model.h5", "flax_model.msgpack")
               if os.path.exists(os.path.join(directory, name))]
    hint = (f" (it has {', '.join(pickles)}: bert-jax reads only safetensors, since unpickling "
            "a file can run arbitrary code; re-save it with transformers' save_pretrained)"
            if pickles else "")
    raise UserError(f"{directory}: no {SAFETENSORS} in this Hugging Face directory{hint}")


def _read_tensors(directory: str) -> dict[str, np.ndarray]:
    from safetensors import SafetensorError, safe_open

    tensors = {}
    for path in weight_files(directory):
        try:
            with safe_open(path, framework="numpy") as file:
                for name in file.keys():
                    tensors[name] = file.get_tensor(name)
        except (SafetensorError, OSError) as error:
            raise UserError(f"{path}: cannot read safetensors file ({error})") from None
    return tensors


def _encoder_prefix(names) -> str:
    """'bert.' for the BertForPreTraining / BertForMaskedLM layouts, '' for BertModel's."""
    return "bert." if any(name.startswith("bert.") for name in names) else ""


def _canonical_names(tensors: dict[str, np.ndarray], source: str) -> dict[str, np.ndarray]:
    """Drops buffers and tied copies (checking the copies match), renames legacy names."""
    renamed = {}
    for name, tensor in tensors.items():
        for old, new in _LEGACY_SUFFIXES.items():
            if "LayerNorm" in name and name.endswith(old):
                name = name[:-len(old)] + new
        renamed[name] = tensor
    prefix = _encoder_prefix(renamed)
    for name in _BUFFERS:
        renamed.pop(prefix + name, None)
    for name, original in _TIED.items():
        copy = renamed.pop(name, None)
        original = (prefix + original) if original.startswith("embeddings") else original
        if copy is not None and original in renamed and not np.array_equal(copy, renamed[original]):
            raise UserError(f"{source}: {name} differs from {original}; bert-jax ties the "
                            "MLM decoder to them and cannot represent an untied one")
    return renamed


def read_directory(directory: str, config: BertConfig, head: dict | None = None) -> dict:
    """The params of an HF BERT directory (the parts its file holds), given its config and
    task head as its config.json describes them (`config_from_hf`, `hf_heads.head_from_config`:
    the caller reads config.json once)."""
    tensors = _canonical_names(_read_tensors(directory), directory)
    entries = name_table(config, _encoder_prefix(tensors))
    shapes = tensor_map.parameter_shapes(config)
    if head is not None:
        entries += hf_heads.head_entries(head)
        shapes.update(hf_heads.head_shapes(config, head))
    return tensor_map.tensors_to_params(tensors, entries, shapes, directory)


def default_architecture(params: dict) -> str:
    """The richest architecture the params can fill."""
    parts = tensor_map.present_parts(params)
    for architecture, (needed, _) in ARCHITECTURES.items():
        if set(needed) <= parts:
            return architecture
    raise UserError("the model has neither a pooler nor a masked-LM head to export")


def tokenizer_settings(config: BertConfig) -> dict:
    """What transformers' AutoTokenizer needs in tokenizer_config.json besides do_lower_case."""
    return dict(tokenizer_class="BertTokenizer", model_max_length=config.max_positions)


def write_directory(config: BertConfig, params: dict, directory: str, pad_id: int,
                    architecture: str | None = None, head: dict | None = None) -> str:
    """Writes config.json and model.safetensors; returns the architecture written.

    The tied decoder is not written: transformers ties `cls.predictions.decoder` to the
    word embeddings and `cls.predictions.bias` when it loads, as its own save_pretrained does.
    """
    from safetensors.numpy import save_file

    # A head this writer has no names for would otherwise be dropped silently.
    # A classifier exports only with its labels (a fine-tuned model directory's task.json).
    known = tensor_map.HEADS if head else ("mlm_head", "nsp_head")
    tensor_map.refuse_unknown_heads(
        params, known, "these transformers classes without the task's labels (export a "
        "fine-tuned model directory, which has task.json)", token_classifier=True)
    architecture = architecture or (head["architecture"] if head else
                                    default_architecture(params))
    if (architecture in hf_heads.ARCHITECTURES) != (head is not None):
        raise UserError(f"{architecture} needs a task head and its labels, and only it does; "
                        "a fine-tuned model directory (with task.json) has them")
    parts, prefix = ARCHITECTURES[architecture]
    entries = name_table(config, prefix) + (hf_heads.head_entries(head) if head else [])
    tensors = tensor_map.params_to_tensors(params, entries, parts)
    save_file(tensors, os.path.join(directory, SAFETENSORS), metadata={"format": "pt"})
    with open(os.path.join(directory, "config.json"), "w", encoding="utf-8") as file:
        json.dump(config_to_hf(config, architecture, pad_id, head), file, indent=2,
                  sort_keys=True)
    return architecture
