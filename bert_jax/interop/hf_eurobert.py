"""EuroBERT's names in Hugging Face `transformers` directories: `EuroBertModel` (no prefix) and
the `EuroBertFor*` layouts (`model.` prefix, the masked-LM `lm_head`, a classifier's `dense`
and `classifier`).

The one place transformers' EuroBERT names appear; `huggingface.py` reads and writes the
files. A config.json field bert-jax does not compute is refused by name, never ignored.
"""

import numpy as np

from bert_jax.errors import UserError
from bert_jax.interop import hf_heads
from bert_jax.interop.tensor_map import COPY, KERNEL, VECTOR, Entry, dense_entries
from bert_jax.models.config import EuroBertConfig

MODEL_TYPE = "eurobert"
ENCODER = "eurobert"  # our params key of the encoder (models/families.py)
# architecture -> (the parts its file holds, the encoder's name prefix).
ARCHITECTURES = {
    "EuroBertForMaskedLM": (("encoder", "mlm_head"), "model."),
    "EuroBertModel": (("encoder",), ""),
    "EuroBertForSequenceClassification": (("encoder", "classifier"), "model."),
    "EuroBertForTokenClassification": (("encoder", "classifier"), "model."),
}
ENCODER_ARCHITECTURE = "EuroBertModel"
# Top-level params keys of EuroBERT's heads (`head`: a sequence classifier's `dense`).
HEAD_KEYS = ("mlm_head", "head", "classifier")
# The task head kinds (hf_heads, named by BERT's class) -> EuroBERT's classes.
HEAD_ARCHITECTURES = {
    "BertForSequenceClassification": "EuroBertForSequenceClassification",
    "BertForTokenClassification": "EuroBertForTokenClassification",
}
_TIED_DECODER = "lm_head.weight"  # tied to the token embeddings when tie_word_embeddings

# config.json key -> EuroBertConfig field.
CONFIG_KEYS = {
    "vocab_size": "vocab_size", "hidden_size": "hidden_dim", "intermediate_size": "mlp_dim",
    "num_hidden_layers": "num_layers", "num_attention_heads": "num_heads",
    "num_key_value_heads": "num_kv_heads", "max_position_embeddings": "max_positions",
    "rms_norm_eps": "layer_norm_eps", "attention_bias": "attention_bias",
    "mlp_bias": "mlp_bias", "tie_word_embeddings": "tie_word_embeddings",
    "attention_dropout": "attention_dropout_rate", "classifier_pooling": "classifier_pooling",
    "initializer_range": "initializer_std",
}
# Fields that hold only what bert-jax computes the same way whatever their value: token ids
# (the tokenizer's), how transformers runs a model, labels (hf_heads), file bookkeeping.
_NOT_MODEL = {
    "architectures", "model_type", "transformers_version", "dtype", "torch_dtype",
    "pad_token_id", "bos_token_id", "eos_token_id", "mask_token_id", "use_cache",
    "output_hidden_states", "output_attentions", "return_dict", "chunk_size_feed_forward",
    "is_encoder_decoder", "_name_or_path", "id2label", "label2id", "num_labels",
    "problem_type", hf_heads.COLUMNS_FIELD,
}
# Fields bert-jax computes only at one value.
_REQUIRED = {"hidden_act": "silu", "pretraining_tp": 1}


def rope_theta_of(parameters: dict, source: str, default: float) -> float:
    """The rotary base of one `rope_parameters` dict; scaled rotary kinds refused."""
    unknown = sorted(set(parameters) - {"rope_type", "rope_theta"})
    if parameters.get("rope_type", "default") != "default" or unknown:
        raise UserError(f"{source}: rope_parameters is {parameters}; bert-jax implements only "
                        "rope_type 'default' (plain rotary positions)")
    return float(parameters.get("rope_theta", default))


def model_fields(values: dict, source: str, config_keys: dict, required: dict,
                 also_read: set, what: str) -> dict:
    """The EuroBertConfig fields of an HF config.json of the Llama-style family:
    `config_keys` renamed, the heads' sizes (key/value heads, head_dim) with transformers'
    defaults; a field not among `config_keys`, `required`, `also_read` (the caller reads
    them) or the non-model ones refused by name, never ignored."""
    unknown = sorted(set(values) - set(config_keys) - _NOT_MODEL - set(required) - also_read
                     - {"head_dim"})
    if unknown:
        raise UserError(f"{source}: config field(s) {unknown} are not implemented by bert-jax's "
                        f"{what} (it would compute another model)")
    for key, expected in required.items():
        if values.get(key, expected) != expected:
            raise UserError(f"{source}: {key} is {values[key]!r}; bert-jax implements only "
                            f"{key}={expected!r}")
    fields = {field: values[key] for key, field in config_keys.items()
              if values.get(key) is not None}
    hidden = fields.get("hidden_dim", EuroBertConfig.hidden_dim)
    heads = fields.get("num_heads", EuroBertConfig.num_heads)
    fields.setdefault("num_kv_heads", heads)  # transformers' default: one per query head
    head_dim = values.get("head_dim")
    if head_dim is not None and head_dim * heads != hidden:  # the default is hidden / heads
        fields["attention_head_dim"] = head_dim
    return fields


def config_from_hf(values: dict, source: str) -> EuroBertConfig:
    """A EuroBertConfig from an HF EuroBERT config.json, refusing every field that bert-jax
    would otherwise ignore."""
    fields = model_fields(values, source, CONFIG_KEYS, _REQUIRED,
                          {"rope_parameters", "rope_theta"}, "EuroBERT")
    fields["rope_theta"] = rope_theta_of(
        values.get("rope_parameters") or {}, source,
        values.get("rope_theta", EuroBertConfig.rope_theta))  # an older file's rope_theta
    return EuroBertConfig.from_dict(fields, source=source)


def config_to_hf(config: EuroBertConfig, tokenizer) -> dict:
    """config.json's model fields (the architecture and head fields are the caller's), with
    the special token ids of `tokenizer` (EuroBERT's BOS and EOS are its [CLS] and [SEP])."""
    values = {key: getattr(config, field) for key, field in CONFIG_KEYS.items()}
    return dict(model_type=MODEL_TYPE, hidden_act="silu", head_dim=config.head_dim,
                rope_parameters={"rope_type": "default", "rope_theta": config.rope_theta},
                pad_token_id=tokenizer.pad_id, bos_token_id=tokenizer.cls_id,
                eos_token_id=tokenizer.sep_id, mask_token_id=tokenizer.mask_id, **values)


def _dense(path: tuple[str, ...], name: str, part: str, with_bias: bool, input_rank: int = 1
           ) -> list[Entry]:
    """A torch Linear `name` ((out, in) weight, optional bias) as our kernel over
    `input_rank` input dims."""
    if with_bias:
        return dense_entries(path, f"{name}.weight", f"{name}.bias", part, input_rank,
                             transposed=True)
    return [Entry((*path, "kernel"), f"{name}.weight", part, KERNEL, input_rank, True)]


def _layer_entries(config: EuroBertConfig, index: int, prefix: str) -> list[Entry]:
    ours, theirs = (ENCODER, f"layer_{index}"), f"{prefix}layers.{index}."
    attention, mlp = (*ours, "attention"), (*ours, "mlp")
    # q/k/v rows are (heads, head_dim), our kernels' output dims; o_proj's columns likewise.
    return [
        Entry((*ours, "attention_norm", "scale"), f"{theirs}input_layernorm.weight", "encoder"),
        *[entry for ours_name, theirs_name in (("query", "q_proj"), ("key", "k_proj"),
                                               ("value", "v_proj"))
          for entry in _dense((*attention, ours_name), f"{theirs}self_attn.{theirs_name}",
                              "encoder", config.attention_bias)],
        *_dense((*attention, "output"), f"{theirs}self_attn.o_proj", "encoder",
                config.attention_bias, input_rank=2),
        Entry((*ours, "mlp_norm", "scale"), f"{theirs}post_attention_layernorm.weight",
              "encoder"),
        *[entry for ours_name in ("gate", "up", "down")
          for entry in _dense((*mlp, ours_name), f"{theirs}mlp.{ours_name}_proj", "encoder",
                              config.mlp_bias)],
    ]


def encoder_entries(config: EuroBertConfig, prefix: str) -> list[Entry]:
    """Every tensor of the encoder (EuroBERT's and UltraBERT's alike), named from `prefix`."""
    entries = [Entry((ENCODER, "token_embeddings", "embedding"), f"{prefix}embed_tokens.weight",
                     "encoder", COPY)]
    for index in range(config.num_layers):
        entries += _layer_entries(config, index, prefix)
    return entries + [Entry((ENCODER, "final_norm", "scale"), f"{prefix}norm.weight",
                            "encoder")]


def name_table(config: EuroBertConfig, prefix: str) -> list[Entry]:
    """Every tensor of a EuroBertForMaskedLM, its encoder names starting with `prefix`."""
    entries = encoder_entries(config, prefix)
    if not config.tie_word_embeddings:
        return entries + _dense(("mlm_head",), "lm_head", "mlm_head", config.mlp_bias)
    if config.mlp_bias:  # the tied decoder's own bias
        entries.append(Entry(("mlm_head", "output_bias"), "lm_head.bias", "mlm_head", VECTOR))
    return entries


def head_entries(head: dict) -> list[Entry]:
    """The task head's tensors: a sequence classifier's `dense` (ours `head`) and
    `classifier`, a token classifier's `classifier`."""
    entries = dense_entries(("classifier",), "classifier.weight", "classifier.bias",
                            "classifier", transposed=True)
    if head["architecture"] == hf_heads.SEQUENCE:
        entries += dense_entries(("head",), "dense.weight", "dense.bias", "classifier",
                                 transposed=True)
    return entries


def encoder_prefix(names) -> str:
    """'model.' for the EuroBertFor* layouts, '' for EuroBertModel's."""
    return "model." if any(name.startswith("model.") for name in names) else ""


def canonical_names(tensors: dict[str, np.ndarray], source: str,
                    tied_decoder: str = _TIED_DECODER, prefix: str | None = None
                    ) -> dict[str, np.ndarray]:
    """Drops a tied decoder weight (transformers writes none; an older file may), after
    checking it is the token embeddings (named from `prefix`, by default EuroBERT's)."""
    tensors = dict(tensors)
    prefix = encoder_prefix(tensors) if prefix is None else prefix
    embeddings = tensors.get(f"{prefix}embed_tokens.weight")
    decoder = tensors.get(tied_decoder)
    if decoder is not None and embeddings is not None and np.array_equal(decoder, embeddings):
        tensors.pop(tied_decoder)
    return tensors
