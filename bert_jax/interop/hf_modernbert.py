"""ModernBERT's names in Hugging Face `transformers` directories: `ModernBertModel` (no prefix)
and the `ModernBertFor*` layouts (`model.` prefix, the prediction `head.*`, the tied
`decoder`, a task's `classifier.*`).

The one place transformers' ModernBERT names appear; `huggingface.py` reads and writes the
files. A config.json field bert-jax does not compute is refused by name, never ignored.
"""

import numpy as np

from bert_jax.errors import UserError
from bert_jax.interop import hf_heads
from bert_jax.interop.tensor_map import COPY, KERNEL, VECTOR, Entry, dense_entries
from bert_jax.models.config import ModernBertConfig

MODEL_TYPE = "modernbert"
ENCODER = "modernbert"  # our params key of the encoder (models/families.py)
# architecture -> (the parts its file holds, the encoder's name prefix).
ARCHITECTURES = {
    "ModernBertForMaskedLM": (("encoder", "head", "mlm_head"), "model."),
    "ModernBertModel": (("encoder",), ""),
    "ModernBertForSequenceClassification": (("encoder", "head", "classifier"), "model."),
    "ModernBertForTokenClassification": (("encoder", "head", "classifier"), "model."),
    "ModernBertForQuestionAnswering": (("encoder", "head", "qa_outputs"), "model."),
}
ENCODER_ARCHITECTURE = "ModernBertModel"
# Top-level params keys of the heads ModernBERT's classes hold (`head`: the prediction head).
HEAD_KEYS = ("head", "mlm_head", "classifier", "qa_outputs")
# The task head kinds (hf_heads, named by BERT's class) -> ModernBERT's classes.
HEAD_ARCHITECTURES = {
    "BertForSequenceClassification": "ModernBertForSequenceClassification",
    "BertForTokenClassification": "ModernBertForTokenClassification",
    "BertForQuestionAnswering": "ModernBertForQuestionAnswering",
}
_TIED_DECODER = "decoder.weight"  # tied to the token embeddings (tie_word_embeddings)

# config.json key -> ModernBertConfig field.
_CONFIG_KEYS = {
    "vocab_size": "vocab_size", "hidden_size": "hidden_dim", "intermediate_size": "mlp_dim",
    "num_hidden_layers": "num_layers", "num_attention_heads": "num_heads",
    "max_position_embeddings": "max_positions", "norm_eps": "layer_norm_eps",
    "norm_bias": "norm_bias", "attention_bias": "attention_bias", "mlp_bias": "mlp_bias",
    "decoder_bias": "decoder_bias", "classifier_bias": "classifier_bias",
    "local_attention": "local_attention", "embedding_dropout": "embedding_dropout_rate",
    "attention_dropout": "attention_dropout_rate", "mlp_dropout": "mlp_dropout_rate",
    "classifier_dropout": "classifier_dropout_rate", "classifier_pooling": "classifier_pooling",
    "initializer_range": "initializer_std", "initializer_cutoff_factor": "initializer_cutoff",
}
# Fields that hold only what bert-jax computes the same way whatever their value: token ids
# (the tokenizer's), how transformers runs a model (kernels, checkpointing, outputs), labels
# (hf_heads), file bookkeeping.
_NOT_MODEL = {
    "architectures", "model_type", "transformers_version", "dtype", "torch_dtype",
    "pad_token_id", "bos_token_id", "eos_token_id", "cls_token_id", "sep_token_id",
    "deterministic_flash_attn", "sparse_prediction", "sparse_pred_ignore_index",
    "reference_compile", "repad_logits_with_grad", "gradient_checkpointing",
    "output_hidden_states", "output_attentions", "return_dict", "chunk_size_feed_forward",
    "is_encoder_decoder", "_name_or_path", "use_cache", "id2label", "label2id", "num_labels",
    "problem_type", hf_heads.COLUMNS_FIELD,
    # Older config.json files: rotary settings as separate keys (read below), and keys that
    # ModernBERT's first release wrote but never read.
    "global_rope_theta", "local_rope_theta", "global_attn_every_n_layers", "layer_norm_eps",
    "position_embedding_type",
}
# Fields bert-jax computes only at one value.
_REQUIRED = {"hidden_activation": "gelu", "classifier_activation": "gelu",
             "tie_word_embeddings": True}
_GLOBAL, _SLIDING = "full_attention", "sliding_attention"


def _global_every(values: dict, num_layers: int, source: str) -> int:
    """How often a layer is global: from `layer_types` (transformers 5), else from
    `global_attn_every_n_layers` (older files; 3 by default); a pattern other than every
    n-th layer from layer 0 is refused."""
    layer_types = values.get("layer_types")
    if layer_types is None:
        return int(values.get("global_attn_every_n_layers", 3))
    if len(layer_types) != num_layers:
        raise UserError(f"{source}: layer_types has {len(layer_types)} entries for "
                        f"{num_layers} layers")
    for every in range(1, num_layers + 1):
        if list(layer_types) == [_GLOBAL if index % every == 0 else _SLIDING
                                 for index in range(num_layers)]:
            return every
    raise UserError(f"{source}: layer_types {list(layer_types)} is not global attention every "
                    "n-th layer from layer 0, the only pattern bert-jax implements "
                    "(model.global_attention_every)")


def _rope_thetas(values: dict, source: str) -> dict:
    """The global and sliding layers' rotary bases, from `rope_parameters` (transformers 5)
    or the older `global_rope_theta` / `local_rope_theta`; scaled rotary kinds refused."""
    thetas = {"global_rope_theta": float(values.get("global_rope_theta", 160000.0)),
              "local_rope_theta": float(values.get("local_rope_theta", 10000.0))}
    for layer_type, field in ((_GLOBAL, "global_rope_theta"), (_SLIDING, "local_rope_theta")):
        parameters = (values.get("rope_parameters") or {}).get(layer_type)
        if parameters is None:
            continue
        unknown = sorted(set(parameters) - {"rope_type", "rope_theta"})
        kind = parameters.get("rope_type", "default")
        if kind != "default" or unknown:
            raise UserError(f"{source}: rope_parameters.{layer_type} is {parameters}; bert-jax "
                            "implements only rope_type 'default' (plain rotary positions)")
        thetas[field] = float(parameters.get("rope_theta", thetas[field]))
    return thetas


def config_from_hf(values: dict, source: str) -> ModernBertConfig:
    """A ModernBertConfig from an HF ModernBERT config.json, refusing every field that bert-jax
    would otherwise ignore."""
    unknown = sorted(set(values) - set(_CONFIG_KEYS) - _NOT_MODEL - set(_REQUIRED)
                     - {"layer_types", "rope_parameters"})
    if unknown:
        raise UserError(f"{source}: config field(s) {unknown} are not implemented by bert-jax's "
                        "ModernBERT (it would compute another model)")
    for key, expected in _REQUIRED.items():
        if values.get(key, expected) != expected:
            raise UserError(f"{source}: {key} is {values[key]!r}; bert-jax implements only "
                            f"{key}={expected!r}")
    if not values.get("decoder_bias", True):
        raise UserError(f"{source}: decoder_bias is false; bert-jax's ModernBERT masked-LM "
                        "head always has its decoder bias")
    fields = {field: values[key] for key, field in _CONFIG_KEYS.items() if key in values}
    num_layers = int(values.get("num_hidden_layers", ModernBertConfig.num_layers))
    fields["global_attention_every"] = _global_every(values, num_layers, source)
    fields.update(_rope_thetas(values, source))
    return ModernBertConfig.from_dict(fields, source=source)


def config_to_hf(config: ModernBertConfig, tokenizer) -> dict:
    """config.json's model fields (the architecture and head fields are the caller's), with
    the special token ids of `tokenizer` (transformers' defaults are ModernBERT's own ids)."""
    values = {key: getattr(config, field) for key, field in _CONFIG_KEYS.items()}
    layer_types = [_GLOBAL if config.is_global(index) else _SLIDING
                   for index in range(config.num_layers)]
    rope = {_GLOBAL: {"rope_type": "default", "rope_theta": config.global_rope_theta},
            _SLIDING: {"rope_type": "default", "rope_theta": config.local_rope_theta}}
    return dict(model_type=MODEL_TYPE, hidden_activation="gelu", classifier_activation="gelu",
                tie_word_embeddings=True, layer_types=layer_types, rope_parameters=rope,
                pad_token_id=tokenizer.pad_id, cls_token_id=tokenizer.cls_id,
                sep_token_id=tokenizer.sep_id, bos_token_id=tokenizer.cls_id,
                eos_token_id=tokenizer.sep_id, **values)


def _norm(path: tuple[str, ...], name: str, part: str, with_bias: bool) -> list[Entry]:
    entries = [Entry((*path, "scale"), f"{name}.weight", part)]
    return entries + ([Entry((*path, "bias"), f"{name}.bias", part)] if with_bias else [])


def _dense(path: tuple[str, ...], name: str, part: str, with_bias: bool, input_rank: int = 1
           ) -> list[Entry]:
    """A torch Linear `name` ((out, in) weight, optional bias) as our kernel over
    `input_rank` input dims (our output dims are split as the kernel's shape says)."""
    if with_bias:
        return dense_entries(path, f"{name}.weight", f"{name}.bias", part, input_rank,
                             transposed=True)
    return [Entry((*path, "kernel"), f"{name}.weight", part, KERNEL, input_rank, True)]


def _layer_entries(config: ModernBertConfig, index: int, prefix: str) -> list[Entry]:
    ours, theirs = (ENCODER, f"layer_{index}"), f"{prefix}layers.{index}."
    entries = [] if index == 0 else _norm((*ours, "attention_norm"), f"{theirs}attn_norm",
                                          "encoder", config.norm_bias)
    # Wqkv's rows are (3, heads, head_dim), the order of our (embed, 3, heads, kv) kernel's
    # output dims; Wi's are (2, mlp): the value half, then the gate.
    return entries + [
        *_dense((*ours, "attention", "qkv"), f"{theirs}attn.Wqkv", "encoder",
                config.attention_bias),
        *_dense((*ours, "attention", "output"), f"{theirs}attn.Wo", "encoder",
                config.attention_bias, input_rank=2),
        *_norm((*ours, "mlp_norm"), f"{theirs}mlp_norm", "encoder", config.norm_bias),
        *_dense((*ours, "mlp", "input"), f"{theirs}mlp.Wi", "encoder", config.mlp_bias),
        *_dense((*ours, "mlp", "output"), f"{theirs}mlp.Wo", "encoder", config.mlp_bias),
    ]


def name_table(config: ModernBertConfig, prefix: str) -> list[Entry]:
    """Every tensor of a ModernBertForMaskedLM, its encoder names starting with `prefix`."""
    entries = [
        Entry((ENCODER, "embeddings", "token_embeddings", "embedding"),
              f"{prefix}embeddings.tok_embeddings.weight", "encoder", COPY),
        *_norm((ENCODER, "embeddings", "norm"), f"{prefix}embeddings.norm", "encoder",
               config.norm_bias),
    ]
    for index in range(config.num_layers):
        entries += _layer_entries(config, index, prefix)
    return entries + [
        *_norm((ENCODER, "final_norm"), f"{prefix}final_norm", "encoder", config.norm_bias),
        *_dense(("head", "dense"), "head.dense", "head", config.classifier_bias),
        *_norm(("head", "norm"), "head.norm", "head", config.norm_bias),
        Entry(("mlm_head", "output_bias"), "decoder.bias", "mlm_head", VECTOR),
    ]


def head_entries(head: dict) -> list[Entry]:
    """The task head's tensors: transformers names every ModernBERT task's final layer
    `classifier`; ours is the span head's `qa_outputs` for question answering."""
    ours = "qa_outputs" if head["architecture"] == hf_heads.SPAN else "classifier"
    return dense_entries((ours,), "classifier.weight", "classifier.bias", ours, transposed=True)


def encoder_prefix(names) -> str:
    """'model.' for the ModernBertFor* layouts, '' for ModernBertModel's."""
    return "model." if any(name.startswith("model.") for name in names) else ""


def canonical_names(tensors: dict[str, np.ndarray], source: str) -> dict[str, np.ndarray]:
    """Drops the tied decoder weight, after checking it is the token embeddings."""
    tensors = dict(tensors)
    decoder = tensors.pop(_TIED_DECODER, None)
    embeddings = tensors.get(f"{encoder_prefix(tensors)}embeddings.tok_embeddings.weight")
    if decoder is not None and embeddings is not None and not np.array_equal(decoder, embeddings):
        raise UserError(f"{source}: {_TIED_DECODER} differs from the token embeddings; bert-jax "
                        "ties the masked-LM decoder to them and cannot represent an untied one")
    return tensors
