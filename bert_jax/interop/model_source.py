"""A model path or Hub name, resolved once: where its config, vocabulary, weights and task file are.

`resolve(path)` looks a Hugging Face Hub name up once (interop/hub.py) and tells the source's
kind once (interop/source_kinds.py); the `ModelSource` it returns is what the commands, the
Python API and the trainer receive instead of the path. It reads each of the model's files
at most once: `config()` its model config (an HF config.json is parsed once and shared with
the task head it describes), `tokenizer()` its tokenizer (vocab.txt, sentencepiece.model or
a ModernBERT's tokenizer.json: input_pipeline/vocabulary_files.py's TOKENIZER_FILES),
`task_info()` what a fine-tuned model was trained for, and `load()` its weights, as a
`LoadedModel` that stays the one copy while anything holds it. Every source may be local or
`gs://` (through `bert_jax/storage/files.py`).

    source = model_source.resolve("sentence-transformers/all-MiniLM-L6-v2")
    source.config().hidden_dim         # 384, without reading the weights
    model = source.load()              # model.config, model.params, model.tokenizer
"""

import dataclasses
import json
import weakref

from bert_jax.storage import files
from bert_jax.errors import UserError
from bert_jax.interop import source_kinds
from bert_jax.interop.source_kinds import MODEL_CONFIG, TASK_INFO
from bert_jax.models.config import BertConfig
from bert_jax.models.families import config_from_dict

# The file each kind keeps its model config in (a training step: its run's).
_CONFIG_FILES = {"huggingface": "config.json", "tf-checkpoint": "bert_config.json"}
# An HF head's architecture (and problem type) -> the task that trains it.
_TASK_OF_HEAD = {("BertForSequenceClassification", "regression"): "regress",
                 ("BertForSequenceClassification", None): "classify",
                 ("BertForTokenClassification", None): "ner",
                 ("BertForQuestionAnswering", None): "qa"}


@dataclasses.dataclass(frozen=True, eq=False)
class LoadedModel:
    """A source's weights, read once: what `ModelSource.load` returns (and the trainer's
    `init_weights` gives it)."""
    name: str  # the source's name, for messages ("initialised from NAME")
    config: BertConfig
    params: dict  # nested numpy dicts: bert, and mlm_head / nsp_head / a task head if present
    source: "ModelSource"

    @property
    def tokenizer(self):
        """The tokenizer of the source's vocabulary (built once, by the source)."""
        return self.source.tokenizer()


@dataclasses.dataclass(frozen=True, eq=False)
class ModelSource:
    """Where one model's pieces are; reads each of them once, when first asked."""
    name: str  # what the user gave (a path or a Hub name), for messages and run configs
    directory: str  # the model's directory (a Hub name's snapshot)
    kind: str  # 'huggingface', 'bert-jax', 'tf-checkpoint', 'training-run', 'training-step'
    metadata_directory: str  # where its config, tokenizer and task.json are (a step: its run's)
    config_path: str  # config.json, bert_config.json or model_config.json
    # Its tokenizer file: vocab.txt, sentencepiece.model or tokenizer.json; None without one.
    vocab_path: str | None
    _cache: dict = dataclasses.field(default_factory=dict, init=False, repr=False)

    def config(self) -> BertConfig:
        """The model config, read once (no weights)."""
        if "config" not in self._cache:
            from bert_jax.interop import huggingface, tf_checkpoint

            values, path = self._config_values(), self.config_path
            if self.kind == "huggingface":
                config = huggingface.config_from_hf(values, path)
            elif self.kind == "tf-checkpoint":
                config = tf_checkpoint.config_from_original(values, path)
            else:
                config = config_from_dict(values, source=path)
            self._cache["config"] = config
        return self._cache["config"]

    def head(self) -> dict | None:
        """The task head a Hugging Face config.json describes (interop/hf_heads.py), or None."""
        from bert_jax.interop import hf_heads

        if self.kind != "huggingface":
            return None
        return hf_heads.head_from_config(self._config_values(), self.config_path)

    def task_info(self) -> dict | None:
        """What the model was fine-tuned for ({"task", "settings", "head", ...}), or None for
        a plain encoder.

        bert-jax directories and runs keep task.json; a Hugging Face directory of a
        BertForSequenceClassification / BertForTokenClassification describes its head in
        config.json, which becomes {"task", "settings": {"label_names"}, "head"} (a
        BertForQuestionAnswering's settings are qa's defaults).
        """
        if "task_info" not in self._cache:
            self._cache["task_info"] = self._read_task_info()
        return self._cache["task_info"]

    def tokenizer(self):
        """The tokenizer of its vocabulary file, built once and checked against the model's
        size; a directory without one is an error naming the files looked for."""
        from input_pipeline.vocabulary_files import no_tokenizer_error

        if "tokenizer" not in self._cache:
            if self.vocab_path is None:
                raise no_tokenizer_error(self.metadata_directory, self.name)
            self._cache["tokenizer"] = checked_tokenizer(self.vocab_path, self.config(),
                                                         self.name)
        return self._cache["tokenizer"]

    def load(self) -> LoadedModel:
        """The weights, read on the first call; later calls give the same `LoadedModel` for as
        long as something holds it (so a host copy is not kept past its last user)."""
        from bert_jax.interop.weight_readers import read_params

        held = self._cache.get("loaded")
        loaded = held() if held is not None else None
        if loaded is None:
            loaded = LoadedModel(self.name, self.config(), read_params(self), self)
            self._cache["loaded"] = weakref.ref(loaded)
        return loaded

    def _config_values(self) -> dict:
        """The config file's JSON, read once (an HF config.json: the config and the head)."""
        if "config_values" not in self._cache:
            path = self.config_path
            try:
                with files.open_file(path) as file:
                    self._cache["config_values"] = json.load(file)
            except FileNotFoundError:
                raise UserError(f"{path}: model config not found") from None
            except json.JSONDecodeError as error:
                raise UserError(f"{path}: not valid JSON ({error})") from None
        return self._cache["config_values"]

    def _read_task_info(self) -> dict | None:
        if self.kind == "tf-checkpoint":
            return None
        if self.kind == "huggingface":
            head = self.head()
            if head is None:
                return None
            problem = "regression" if head.get("problem_type") == "regression" else None
            settings = {name: head[name] for name in ("label_names", "columns") if name in head}
            return dict(task=_TASK_OF_HEAD[(head["architecture"], problem)], settings=settings,
                        head=head)
        path = files.join(self.metadata_directory, TASK_INFO)
        try:
            with files.open_file(path) as file:
                return json.load(file)
        except FileNotFoundError:
            return None
        except json.JSONDecodeError as error:
            raise UserError(f"{path}: not valid JSON ({error})") from None


def resolve(path: "str | ModelSource") -> ModelSource:
    """The source at `path` (any model directory, or a Hugging Face Hub name: its cached or
    downloaded snapshot); a `ModelSource` is returned as it is, so a library function may
    take either."""
    from bert_jax.interop import hub

    if isinstance(path, ModelSource):
        return path
    return in_directory(hub.resolve(path), name=path)


def in_directory(directory: str, name: str | None = None) -> ModelSource:
    """The source in `directory`, a path already resolved (no Hub lookup); `name` is what the
    user gave, for messages (default: the directory)."""
    from input_pipeline.vocabulary_files import tokenizer_file

    kind = source_kinds.source_kind(directory)
    metadata = source_kinds.metadata_directory(directory, kind)
    config_path = files.join(metadata, _CONFIG_FILES.get(kind, MODEL_CONFIG))
    return ModelSource(name or directory, directory, kind, metadata, config_path,
                       tokenizer_file(metadata))


def checked_tokenizer(vocab_path: str, config: BertConfig, name: str):
    """The tokenizer of `vocab_path` for the model `name` of `config`. A vocabulary with more
    tokens than the model's `vocab_size` is refused: its extra ids would index past the
    embedding table (JAX clamps them silently) and give garbage."""
    from input_pipeline.tokenization import load_tokenizer

    tokenizer = load_tokenizer(vocab_path)
    if tokenizer.vocab_size > config.vocab_size:
        raise UserError(f"{vocab_path}: {tokenizer.vocab_size} tokens, but the model at {name} "
                        f"has vocab_size {config.vocab_size}; token ids past it have no "
                        "embedding. Use the vocabulary the model was trained with")
    return tokenizer


def load_text_model(path: "str | ModelSource", max_seq_len: int | None = None) -> LoadedModel:
    """The model at `path` with its tokenizer, `max_seq_len` (if given) checked against its
    positions; shared by the commands that run a model on text and `bert_jax.load`."""
    source = resolve(path)
    loaded = source.load()  # weights first: what is wrong with them is the first thing to say
    source.tokenizer()
    if max_seq_len is not None:
        if max_seq_len < 3:  # [CLS], one piece, [SEP]
            raise UserError(f"--max-seq-len must be at least 3, got {max_seq_len}")
        loaded.config.check_seq_len(max_seq_len)
    return loaded
