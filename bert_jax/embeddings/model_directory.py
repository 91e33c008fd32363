"""How a model turns token vectors into a sentence embedding, read from and written to the
files of a sentence-transformers directory.

A sentence-transformers directory is a Hugging Face model plus:
  modules.json                       the pipeline: Transformer, Pooling, (Normalize)
  1_Pooling/config.json              which pooling (legacy `pooling_mode_*_token(s)` flags, or
                                     the newer `pooling_mode`: a name or a list of names)
  sentence_bert_config.json          max_seq_length (and an extra do_lower_case)
  config_sentence_transformers.json  versions, prompts, similarity function
Normalize needs no files of its own (all-MiniLM-L6-v2 lists `2_Normalize` in modules.json
but ships no such folder). bert-jax writes the same modules.json and 1_Pooling/config.json
into its own model directories, so both kinds read alike; a model fine-tuned by `bert-jax
finetune sentence-embedding` (its task.json) pools as it was trained, unnormalised (cosine
similarity does not depend on the norm), up to its training length. Any other directory
pools by the mean over real tokens, unnormalised, as `SentenceTransformer` does for a plain
Hugging Face model.
"""

import dataclasses
import json
import os

from bert_jax.embeddings.pooling import POOLING_MODES
from bert_jax.errors import UserError

MODULES = "modules.json"
POOLING_CONFIG = os.path.join("1_Pooling", "config.json")
SENTENCE_BERT_CONFIG = "sentence_bert_config.json"
SENTENCE_TRANSFORMERS_CONFIG = "config_sentence_transformers.json"
TASK_INFO = "task.json"  # written with every fine-tuned model directory
_LEGACY_POOLING_KEYS = {"pooling_mode_cls_token": "cls", "pooling_mode_max_tokens": "max",
                        "pooling_mode_mean_tokens": "mean",
                        "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens"}
_UNSUPPORTED_POOLING_KEYS = ("pooling_mode_weightedmean_tokens", "pooling_mode_lasttoken")


@dataclasses.dataclass(frozen=True)
class EmbeddingSettings:
    pooling: tuple[str, ...] = ("mean",)  # concatenated, in this order
    normalize: bool = False  # unit L2 norm after pooling (a Normalize module)
    max_seq_len: int | None = None  # tokens incl. [CLS]/[SEP]; None: the model's positions

    def describe(self) -> str:
        return (f"pooling {'+'.join(self.pooling)}, "
                f"{'normalised' if self.normalize else 'not normalised'}, "
                f"max {self.max_seq_len} tokens")


def _read_json(path: str):
    try:
        with open(path, encoding="utf-8") as file:
            return json.load(file)
    except json.JSONDecodeError as error:
        raise UserError(f"{path}: not valid JSON ({error})") from None


def _pooling_modes(path: str) -> tuple[str, ...]:
    """The pooling modes of a 1_Pooling/config.json; mean (all-MiniLM-L6-v2's) when absent."""
    if not os.path.exists(path):
        return ("mean",)
    values = _read_json(path)
    if "pooling_mode" in values:
        mode = values["pooling_mode"]
        modes = (mode,) if isinstance(mode, str) else tuple(mode)
    else:
        if any(values.get(key) for key in _UNSUPPORTED_POOLING_KEYS):
            modes = ("weightedmean or lasttoken",)
        else:
            modes = tuple(mode for key, mode in _LEGACY_POOLING_KEYS.items() if values.get(key))
    unknown = [mode for mode in modes if mode not in POOLING_MODES]
    if unknown or not modes:
        raise UserError(f"{path}: pooling {list(modes) or 'none'} is not supported; bert-jax "
                        f"pools by {', '.join(POOLING_MODES)}")
    return modes


def _fine_tuned_settings(directory: str) -> EmbeddingSettings:
    """The pooling a sentence-embedding fine-tuning run trained with; else the defaults."""
    path = os.path.join(directory, TASK_INFO)
    info = _read_json(path) if os.path.exists(path) else {}
    if info.get("task") != "sentence-embedding":
        return EmbeddingSettings()
    pooling = tuple(info.get("settings", {}).get("pooling", ("mean",)))
    if not pooling or any(mode not in POOLING_MODES for mode in pooling):
        raise UserError(f"{path}: pooling {list(pooling)} is not supported")
    return EmbeddingSettings(pooling=pooling, max_seq_len=info.get("max_seq_len"))


def _module_kind(entry: dict, path: str) -> str:
    kind = str(entry.get("type", "")).rsplit(".", 1)[-1]
    if kind not in ("Transformer", "Pooling", "Normalize"):
        raise UserError(f"{path}: module {entry.get('type')!r} is not supported; bert-jax "
                        "reads Transformer, Pooling and Normalize modules")
    return kind


def read_settings(directory: str) -> tuple[str, EmbeddingSettings]:
    """(the directory holding the encoder's weights, how it pools) for a model directory."""
    modules_path = os.path.join(directory, MODULES)
    if not os.path.exists(modules_path):
        return directory, _fine_tuned_settings(directory)
    modules = _read_json(modules_path)
    if not isinstance(modules, list):
        raise UserError(f"{modules_path}: expected a JSON list of modules")
    kinds = {_module_kind(entry, modules_path): entry for entry in modules}
    if "Transformer" not in kinds:
        raise UserError(f"{modules_path}: no Transformer module")
    encoder_directory = os.path.join(directory, kinds["Transformer"].get("path", ""))
    pooling_path = os.path.join(directory, kinds.get("Pooling", {}).get("path", "1_Pooling"),
                                "config.json")
    bert_config_path = os.path.join(encoder_directory, SENTENCE_BERT_CONFIG)
    bert_config = _read_json(bert_config_path) if os.path.exists(bert_config_path) else {}
    if bert_config.get("do_lower_case"):
        raise UserError(f"{bert_config_path}: do_lower_case=true (lower-casing before the "
                        "tokenizer) is not supported; put it in tokenizer_config.json instead")
    model_config_path = os.path.join(directory, SENTENCE_TRANSFORMERS_CONFIG)
    model_config = _read_json(model_config_path) if os.path.exists(model_config_path) else {}
    if model_config.get("default_prompt_name"):
        raise UserError(f"{model_config_path}: a default prompt is not supported")
    return encoder_directory, EmbeddingSettings(
        pooling=_pooling_modes(pooling_path), normalize="Normalize" in kinds,
        max_seq_len=bert_config.get("max_seq_length"))


def write_settings(directory: str, settings: EmbeddingSettings, hidden_dim: int) -> None:
    """modules.json, 1_Pooling/config.json, sentence_bert_config.json and
    config_sentence_transformers.json, in the layout all-MiniLM-L6-v2 ships (the encoder's own
    files at the top level), which every sentence-transformers version since 2.0 loads."""
    modules = [dict(idx=0, name="0", path="", type="sentence_transformers.models.Transformer"),
               dict(idx=1, name="1", path="1_Pooling", type="sentence_transformers.models.Pooling")]
    if settings.normalize:
        modules.append(dict(idx=2, name="2", path="2_Normalize",
                            type="sentence_transformers.models.Normalize"))
        os.makedirs(os.path.join(directory, "2_Normalize"), exist_ok=True)
    pooling = {"word_embedding_dimension": hidden_dim,
               **{key: mode in settings.pooling for key, mode in _LEGACY_POOLING_KEYS.items()}}
    if list(settings.pooling) != [mode for mode in POOLING_MODES if mode in settings.pooling]:
        raise ValueError(f"pooling {settings.pooling} is not in sentence-transformers' order")
    os.makedirs(os.path.join(directory, "1_Pooling"), exist_ok=True)
    files = {MODULES: modules, POOLING_CONFIG: pooling,
             SENTENCE_BERT_CONFIG: {"max_seq_length": settings.max_seq_len,
                                    "do_lower_case": False},
             SENTENCE_TRANSFORMERS_CONFIG: {"similarity_fn_name": "cosine"}}
    for name, values in files.items():
        with open(os.path.join(directory, name), "w", encoding="utf-8") as file:
            json.dump(values, file, indent=2)
