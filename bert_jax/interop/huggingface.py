"""Hugging Face `transformers` directories (config.json + safetensors) <-> bert-jax params.

The files are read and written here; each model family's names are its own module's
(`hf_bert.py`, `hf_modernbert.py`, `hf_eurobert.py`, `hf_ultrabert.py`), chosen by
config.json's `model_type` or the model config's family (and variant). Only safetensors are
read: a `pytorch_model.bin` is a pickle, and unpickling a downloaded file can run arbitrary
code.
"""

import json
import os

import numpy as np

from bert_jax.errors import UserError
from bert_jax.interop import (hf_bert, hf_eurobert, hf_heads, hf_modernbert, hf_ultrabert,
                              tensor_map)
from bert_jax.models.families import family_of

SAFETENSORS = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"
# model_type -> the module holding that family's names.
_FAMILIES = {module.MODEL_TYPE: module
             for module in (hf_bert, hf_modernbert, hf_eurobert, hf_ultrabert)}


def names_of(config):
    """The names module of a model config's family, or of its variant where the family has
    several transformers model types (the Llama-style family: eurobert, ultrabert)."""
    return _FAMILIES[getattr(config, "variant", None) or family_of(config).name]


def config_from_hf(values: dict, source: str):
    """A model config from an HF config.json, refusing what our models cannot compute."""
    model_type = values.get("model_type")
    if model_type not in _FAMILIES:
        raise UserError(f"{source}: model_type is {model_type!r}, expected one of "
                        f"{sorted(_FAMILIES)}")
    return _FAMILIES[model_type].config_from_hf(values, source)


def architectures(config) -> dict:
    """architecture -> (parts, encoder prefix) of the config's family, richest first."""
    return names_of(config).ARCHITECTURES


def encoder_architecture(config) -> str:
    """The transformers class of the encoder alone (BertModel, ModernBertModel)."""
    return names_of(config).ENCODER_ARCHITECTURE


def head_architecture(config, head: dict) -> str:
    """The transformers class of a task head (task.json names its kind by BERT's class)."""
    return getattr(names_of(config), "HEAD_ARCHITECTURES", {}).get(head["architecture"],
                                                                    head["architecture"])


def config_to_hf(config, architecture: str, tokenizer, head: dict | None = None) -> dict:
    names = names_of(config)
    values = (names.config_to_hf(config, tokenizer.pad_id) if names is hf_bert
              else names.config_to_hf(config, tokenizer))
    if head is not None:
        values.update(hf_heads.config_fields(head))
    return dict(architectures=[architecture], dtype="float32", **values)


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


def read_directory(directory: str, config, head: dict | None = None) -> dict:
    """The params of an HF directory (the parts its file holds), given its config and task
    head as its config.json describes them (`config_from_hf`, `hf_heads.head_from_config`:
    the caller reads config.json once)."""
    names = names_of(config)
    tensors = names.canonical_names(_read_tensors(directory), directory)
    entries = names.name_table(config, names.encoder_prefix(tensors))
    shapes = tensor_map.parameter_shapes(config)
    if head is not None:
        entries += names.head_entries(head)
        shapes.update(hf_heads.head_shapes(config, head))
    return tensor_map.tensors_to_params(tensors, entries, shapes, directory)


def default_architecture(config, params: dict) -> str:
    """The richest architecture without a task head that the params can fill."""
    parts = tensor_map.present_parts(params, family_of(config).encoder_key)
    for architecture, (needed, _) in architectures(config).items():
        if architecture not in _head_architectures(config) and set(needed) <= parts:
            return architecture
    raise UserError("the model has neither a pooler nor a masked-LM head to export")


def _head_architectures(config) -> set[str]:
    return {head_architecture(config, {"architecture": kind}) for kind in hf_heads.KINDS}


def tokenizer_settings(config) -> dict:
    """What transformers' AutoTokenizer needs in tokenizer_config.json (BERT's WordPiece
    files; a tokenizer.json carries its own)."""
    names = names_of(config)
    return names.tokenizer_settings(config) if hasattr(names, "tokenizer_settings") else {}


def write_directory(config, params: dict, directory: str, tokenizer,
                    architecture: str | None = None, head: dict | None = None) -> str:
    """Writes config.json and model.safetensors; returns the architecture written.

    The tied decoder is not written: transformers ties it to the word embeddings (and BERT's
    `cls.predictions.bias`) when it loads, as its own save_pretrained does.
    """
    from safetensors.numpy import save_file

    names, encoder = names_of(config), family_of(config).encoder_key
    # A head this writer has no names for would otherwise be dropped silently.
    # A classifier exports only with its labels (a fine-tuned model directory's task.json).
    known = names.HEAD_KEYS if head else set(names.HEAD_KEYS) - {"classifier", "qa_outputs"}
    tensor_map.refuse_unknown_heads(
        params, known, "these transformers classes without the task's labels (export a "
        "fine-tuned model directory, which has task.json)", token_classifier=True,
        encoder=encoder)
    architecture = architecture or (head_architecture(config, head) if head else
                                    default_architecture(config, params))
    if architecture not in names.ARCHITECTURES:
        raise UserError(f"{architecture} is not a {family_of(config).name} architecture; "
                        f"expected one of {sorted(names.ARCHITECTURES)}")
    if (architecture in _head_architectures(config)) != (head is not None):
        raise UserError(f"{architecture} needs a task head and its labels, and only it does; "
                        "a fine-tuned model directory (with task.json) has them")
    parts, prefix = names.ARCHITECTURES[architecture]
    entries = names.name_table(config, prefix) + (names.head_entries(head) if head else [])
    tensors = tensor_map.params_to_tensors(params, entries, parts, encoder)
    save_file(tensors, os.path.join(directory, SAFETENSORS), metadata={"format": "pt"})
    with open(os.path.join(directory, "config.json"), "w", encoding="utf-8") as file:
        json.dump(config_to_hf(config, architecture, tokenizer, head), file, indent=2,
                  sort_keys=True)
    return architecture
