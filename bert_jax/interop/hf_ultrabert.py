"""UltraBERT's names in Hugging Face `transformers` directories: `UltrabertModel` (no prefix)
and the `UltrabertFor*` layouts (`ultrabert.` prefix as transformers saves them, `model.` as
its modules name them in memory; the masked-LM head's `head.linear1`, `head.linear2` and
decoder `cls`, a classifier's `classifier`, the span head's `qa_outputs`).

UltraBERT is EuroBERT's encoder (its tensors are `hf_eurobert`'s) with a sliding window on
the layers `layer_types` names and a rotary theta per layer type; the model is bert-jax's
Llama-style family with `variant` "ultrabert". A config.json field bert-jax does not compute
is refused by name, never ignored.
"""

import numpy as np

from bert_jax.errors import UserError
from bert_jax.interop import hf_eurobert, hf_heads
from bert_jax.interop.hf_eurobert import encoder_entries
from bert_jax.interop.tensor_map import KERNEL, Entry, dense_entries
from bert_jax.models.config import FULL_ATTENTION, SLIDING_ATTENTION, EuroBertConfig

MODEL_TYPE = "ultrabert"
PREFIX = "ultrabert."  # the UltrabertFor* classes' encoder prefix in a saved file
# architecture -> (the parts its file holds, the encoder's name prefix).
ARCHITECTURES = {
    "UltrabertForMaskedLM": (("encoder", "mlm_head"), PREFIX),
    "UltrabertModel": (("encoder",), ""),
    "UltrabertForSequenceClassification": (("encoder", "classifier"), PREFIX),
    "UltrabertForTokenClassification": (("encoder", "classifier"), PREFIX),
    "UltrabertForQuestionAnswering": (("encoder", "qa_outputs"), PREFIX),
}
ENCODER_ARCHITECTURE = "UltrabertModel"
HEAD_KEYS = ("mlm_head", "classifier", "qa_outputs")
# The task head kinds (hf_heads, named by BERT's class) -> UltraBERT's classes.
HEAD_ARCHITECTURES = {
    "BertForSequenceClassification": "UltrabertForSequenceClassification",
    "BertForTokenClassification": "UltrabertForTokenClassification",
    "BertForQuestionAnswering": "UltrabertForQuestionAnswering",
}
_DECODER = "cls.weight"  # the masked-LM decoder (head.decoder in memory), absent when tied

# config.json key -> EuroBertConfig field, beyond EuroBERT's.
CONFIG_KEYS = {**hf_eurobert.CONFIG_KEYS, "sliding_window": "sliding_window",
               "prediction_head_size": "prediction_head_size"}
# Fields bert-jax computes only at one value (a classifier's dropout: its heads have none).
_REQUIRED = {"hidden_act": "silu", "classifier_dropout": 0.0}
# Older files' forms, which transformers' UltrabertConfig still reads.
_OLDER = {"attention_windows", "rope_theta"}


def _layer_types(values: dict) -> tuple[list[str], int | None]:
    """(layer_types, sliding_window) from `layer_types` or an older file's per-layer
    `attention_windows` (0: a full layer), as transformers' UltrabertConfig reads them."""
    windows = values.get("attention_windows")
    layer_types = values.get("layer_types")
    if windows is not None and layer_types is None:
        layer_types = [SLIDING_ATTENTION if window else FULL_ATTENTION for window in windows]
    window = next((window for window in windows or () if window),
                  values.get("sliding_window"))
    if layer_types is None:  # transformers' default: two sliding layers, then a full one
        layer_types = [SLIDING_ATTENTION if (index + 1) % 3 else FULL_ATTENTION
                       for index in range(values.get("num_hidden_layers", 32))]
    return list(layer_types), window


def _rope_thetas(values: dict, layer_types: list[str], source: str) -> dict:
    """rope_theta (full layers) and sliding_rope_theta from `rope_parameters` per layer
    type, or an older file's `rope_theta` list (one per layer type, in layer order)."""
    parameters = values.get("rope_parameters")
    older = values.get("rope_theta")
    if parameters is None and older is not None:
        if not isinstance(older, list):
            raise UserError(f"{source}: rope_theta is {older!r}; an UltraBERT config.json has "
                            "rope_parameters per layer type (or an older list of thetas)")
        parameters = {kind: {"rope_type": "default", "rope_theta": theta}
                      for kind, theta in zip(layer_types, older)}
    parameters = parameters or {}
    return dict(
        rope_theta=hf_eurobert.rope_theta_of(parameters.get(FULL_ATTENTION) or {}, source,
                                             2_560_000.0),
        sliding_rope_theta=hf_eurobert.rope_theta_of(
            parameters.get(SLIDING_ATTENTION) or {}, source, 10_000.0))


def config_from_hf(values: dict, source: str) -> EuroBertConfig:
    """An ultrabert-variant EuroBertConfig from an HF UltraBERT config.json (transformers'
    defaults where a field is absent), refusing every field bert-jax would otherwise ignore."""
    fields = _fields(values, source)
    layer_types, window = _layer_types(values)
    if window is not None:
        fields["sliding_window"] = window
    fields.update(_rope_thetas(values, layer_types, source), layer_types=layer_types,
                  variant=MODEL_TYPE)
    return EuroBertConfig.from_dict(fields, source=source)


def _fields(values: dict, source: str) -> dict:
    """The fields EuroBERT's config.json shares, with UltrabertConfig's defaults where they
    differ from EuroBertConfig's."""
    defaults = dict(vocab_size=32000, hidden_size=4096, intermediate_size=11008,
                    num_hidden_layers=32, num_attention_heads=32, rms_norm_eps=1e-6,
                    max_position_embeddings=32768, classifier_pooling="cls",
                    sliding_window=128, prediction_head_size=768)
    return hf_eurobert.model_fields(
        {**defaults, **values}, source, CONFIG_KEYS, _REQUIRED,
        {"rope_parameters", "layer_types", *_OLDER}, "UltraBERT")


def config_to_hf(config: EuroBertConfig, tokenizer) -> dict:
    """config.json's model fields (the architecture and head fields are the caller's), with
    the special token ids of `tokenizer` (UltraBERT has no mask_token_id field)."""
    values = {key: getattr(config, field) for key, field in CONFIG_KEYS.items()}
    thetas = {FULL_ATTENTION: config.rope_theta, SLIDING_ATTENTION: config.sliding_rope_theta}
    return dict(model_type=MODEL_TYPE, hidden_act="silu", head_dim=config.head_dim,
                layer_types=list(config.layer_types), classifier_dropout=0.0,
                rope_parameters={kind: {"rope_type": "default", "rope_theta": theta}
                                 for kind, theta in thetas.items()},
                pad_token_id=tokenizer.pad_id, bos_token_id=tokenizer.cls_id,
                eos_token_id=tokenizer.sep_id, **values)


def name_table(config: EuroBertConfig, prefix: str) -> list[Entry]:
    """Every tensor of an UltrabertForMaskedLM, its encoder names starting with `prefix`."""
    entries = encoder_entries(config, prefix) + [
        Entry(("mlm_head", name, "kernel"), f"head.{name}.weight", "mlm_head", KERNEL, 1, True)
        for name in ("linear1", "linear2")]
    if not config.tie_word_embeddings:
        entries.append(Entry(("mlm_head", "decoder", "kernel"), _DECODER, "mlm_head", KERNEL,
                             1, True))
    return entries


def head_entries(head: dict) -> list[Entry]:
    """A classifier's `classifier` (UltraBERT's classes have no dense layer before it), or
    the span head's `qa_outputs`."""
    name = "qa_outputs" if head["architecture"] == hf_heads.SPAN else "classifier"
    return dense_entries((name,), f"{name}.weight", f"{name}.bias", name, transposed=True)


def encoder_prefix(names) -> str:
    """'ultrabert.' (or 'model.', the in-memory names) for the UltrabertFor* layouts, ''
    for UltrabertModel's."""
    for prefix in (PREFIX, "model."):
        if any(name.startswith(prefix) for name in names):
            return prefix
    return ""


def canonical_names(tensors: dict[str, np.ndarray], source: str) -> dict[str, np.ndarray]:
    """The in-memory names of a file saved with them (`model.`, `head.decoder.weight`) as
    transformers saves them, and a tied decoder dropped after checking it is the token
    embeddings."""
    tensors = {(_DECODER if name == "head.decoder.weight" else name): tensor
               for name, tensor in tensors.items()}
    return hf_eurobert.canonical_names(tensors, source, tied_decoder=_DECODER,
                                       prefix=encoder_prefix(tensors))
