"""BERT's names in Hugging Face `transformers` directories: `BertModel` (no prefix), and the
`BertForPreTraining` / `BertForMaskedLM` layouts (`bert.` prefix, `cls.*` heads), with the
task heads of `hf_heads.py`.

The one place transformers' BERT names appear; `huggingface.py` reads and writes the files.
"""

import numpy as np

from bert_jax.errors import UserError
from bert_jax.interop import hf_heads
from bert_jax.interop.tensor_map import COPY, Entry, dense_entries, norm_entries
from bert_jax.models.config import BertConfig

MODEL_TYPE = "bert"
# Which parts each exported architecture holds, and whether its encoder names carry `bert.`.
ARCHITECTURES = {
    "BertForPreTraining": (("encoder", "pooler", "mlm_head", "nsp_head"), "bert."),
    "BertForMaskedLM": (("encoder", "mlm_head"), "bert."),
    "BertModel": (("encoder", "pooler"), ""),
    "BertForSequenceClassification": (("encoder", "pooler", "classifier"), "bert."),
    # HF builds the token and span heads' encoder with add_pooling_layer=False: no pooler.
    "BertForTokenClassification": (("encoder", "classifier"), "bert."),
    "BertForQuestionAnswering": (("encoder", "qa_outputs"), "bert."),
}
ENCODER_ARCHITECTURE = "BertModel"
# Top-level params keys of the heads BERT's classes hold.
HEAD_KEYS = ("mlm_head", "nsp_head", "classifier", "qa_outputs")
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


def head_entries(head: dict) -> list[Entry]:
    """The task head's tensors: `classifier.*`, or the span head's `qa_outputs.*`."""
    name = "qa_outputs" if head["architecture"] == hf_heads.SPAN else "classifier"
    return dense_entries((name,), f"{name}.weight", f"{name}.bias", name, transposed=True)


def config_from_hf(values: dict, source: str) -> BertConfig:
    """A BertConfig from an HF BERT config.json, refusing what our model cannot compute."""
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


def config_to_hf(config: BertConfig, pad_id: int) -> dict:
    """config.json's model fields (the architecture and head fields are the caller's)."""
    values = {key: getattr(config, field) for key, field in _CONFIG_KEYS.items()}
    return dict(model_type=MODEL_TYPE, hidden_act="gelu", position_embedding_type="absolute",
                pad_token_id=pad_id, tie_word_embeddings=True, **values)


def encoder_prefix(names) -> str:
    """'bert.' for the BertForPreTraining / BertForMaskedLM layouts, '' for BertModel's."""
    return "bert." if any(name.startswith("bert.") for name in names) else ""


def canonical_names(tensors: dict[str, np.ndarray], source: str) -> dict[str, np.ndarray]:
    """Drops buffers and tied copies (checking the copies match), renames legacy names."""
    renamed = {}
    for name, tensor in tensors.items():
        for old, new in _LEGACY_SUFFIXES.items():
            if "LayerNorm" in name and name.endswith(old):
                name = name[:-len(old)] + new
        renamed[name] = tensor
    prefix = encoder_prefix(renamed)
    for name in _BUFFERS:
        renamed.pop(prefix + name, None)
    for name, original in _TIED.items():
        copy = renamed.pop(name, None)
        original = (prefix + original) if original.startswith("embeddings") else original
        if copy is not None and original in renamed and not np.array_equal(copy, renamed[original]):
            raise UserError(f"{source}: {name} differs from {original}; bert-jax ties the "
                            "MLM decoder to them and cannot represent an untied one")
    return renamed


def tokenizer_settings(config: BertConfig) -> dict:
    """What transformers' AutoTokenizer needs in tokenizer_config.json besides do_lower_case."""
    return dict(tokenizer_class="BertTokenizer", model_max_length=config.max_positions)
