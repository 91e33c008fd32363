"""The Python API for notebooks: `bert_jax.load(path_or_name)` and what the model can do.

    import bert_jax
    model = bert_jax.load("runs/demo")  # any model directory the CLI takes, or a Hub name
    vectors = model.features(["a sentence", "another"], pool="mean")  # (2, H) numpy
    sentences = model.embed(["a sentence", "another"])  # as `bert-jax embed` pools them
    model.fill_mask("the [MASK] of the module")  # [[(token, probability), ...]]
    model.save("exported/demo-hf", format="hf")

Inputs are strings or lists of strings (a (text_a, text_b) tuple for a pair); outputs are
numpy arrays and plain Python values. The commands `features`, `embed`, `predict`,
`fill-mask` and `attention` run the same library functions (`inference`,
`embeddings.encoder`, `training.prediction` with each task's `prediction_values`,
`analysis.attention_maps`, `interop.model_source`, `interop.model_writers`), so the API and
the CLI cannot drift apart. The path is resolved once (`model_source.resolve`) and the model
keeps its `ModelSource`, so later calls read no file twice.
`model.predict(texts)` is for fine-tuned task models (finetune's WORKDIR/best).
"""

import dataclasses
from collections.abc import Sequence

import numpy as np

from bert_jax.errors import UserError
from bert_jax.interop.model_source import LoadedModel, ModelSource
from bert_jax.models.config import BertConfig

FORMATS = ("bert-jax", "hf", "tf-checkpoint", "saved-model")
POOLING = ("none", "mean", "cls", "max")  # as `features --pool`


def _as_list(texts) -> tuple[list, bool]:
    """(list of inputs, whether one input was given rather than a list)."""
    if isinstance(texts, (str, tuple, dict)):
        return [texts], True
    return list(texts), False


@dataclasses.dataclass
class Model:
    """A loaded model with its tokenizer: what `bert_jax.load` returns."""
    config: BertConfig
    params: dict  # nested numpy dicts: bert, and mlm_head / nsp_head when the source has them
    tokenizer: object  # input_pipeline.tokenization's tokenizer of the model's vocabulary
    source: ModelSource  # where it was loaded from (source.name: the path or name given)
    _loaded: LoadedModel | None = dataclasses.field(default=None, repr=False)  # the one copy
    # Loaded on first use: the directory's pooling settings, the fine-tuned task by batch size.
    _embedding_settings: object = dataclasses.field(default=None, repr=False)
    _finetuned: dict = dataclasses.field(default_factory=dict, repr=False)

    def features(self, texts, layers: Sequence[int] = (-1,), pool: str = "none",
                 max_seq_len: int | None = None, batch_size: int = 32):
        """Hidden states of `layers` (0 = embeddings, -1 = last) for each text.

        One layer: (N, T, H) with T the longest input in tokens, zero at padding (pool
        'none'), or (N, H) pooled by 'mean', 'cls' or 'max'; several layers: {layer: array}. A
        single text (not a list) gives its own array without the N axis.
        """
        from bert_jax import inference

        if pool not in POOLING:
            raise UserError(f"pool must be one of {', '.join(POOLING)}, got {pool!r}")
        items, single = _as_list(texts)
        max_seq_len = max_seq_len or self.config.max_positions
        resolved = inference.resolve_layers(list(layers), self.config.num_layers)
        encoded = self.tokenizer.encode_for_model(items, max_seq_len)
        hidden = inference.extract_features(self.config, self.params, encoded, resolved,
                                            max_seq_len, pool, batch_size,
                                            progress=len(items) > batch_size)["hidden"]
        arrays = {name: hidden[layer][0] if single else hidden[layer]
                  for name, layer in zip(layers, resolved)}
        return arrays[layers[0]] if len(arrays) == 1 else arrays

    def embed(self, texts, pool: str | Sequence[str] | None = None,
              normalize: bool | None = None, max_seq_len: int | None = None,
              batch_size: int = 32) -> np.ndarray:
        """(N, D) float32 sentence embeddings, as `bert-jax embed` writes them.

        The model directory's own pooling, normalisation and length (a sentence-transformers
        directory's, or a sentence-embedding fine-tuning's) apply unless given: `pool` is
        'mean', 'cls' or 'max' (or several, concatenated), `normalize` scales to unit length.
        A single text (not a list) gives its (D,) vector.
        """
        from bert_jax.embeddings.encoder import embed_texts, embedding_model
        from bert_jax.embeddings.model_directory import read_settings

        items, single = _as_list(texts)
        if self._embedding_settings is None:
            self._embedding_settings = read_settings(self.source.directory)[1]
        pooling = (pool,) if isinstance(pool, str) else pool
        model = embedding_model(self.config, self.params, self.tokenizer,
                                self._embedding_settings, pooling, normalize, max_seq_len)
        embeddings = embed_texts(model, items, batch_size, progress=len(items) > batch_size)
        return embeddings[0] if single else embeddings

    def predict(self, inputs, batch_size: int = 64, max_seq_len: int | None = None):
        """What `bert-jax predict` gives for each input, as Python values, in input order.

        classify: {"label", "probabilities": {label: p}} for a text or a (text_a, text_b)
        tuple; regress: the number; ner: {"words", "tags"} for a sentence (a string, or a
        list of words); qa: the answer text for a {"question", "context"} dict. One input
        (not a list) gives its own value. Needs a fine-tuned task model.
        """
        from bert_jax.tasks import task_from_info
        from bert_jax.training import prediction
        from bert_jax.training.finetune import load_finetuned

        items, single = _as_list(inputs)
        if self.source.task_info() is None:
            raise UserError(
                f"{self.source.name}: not a fine-tuned task model (no task.json and no Hugging Face "
                "classification/token/QA head), so it has nothing to predict; fine-tune it "
                "first (bert-jax finetune classify|regress|ner|qa --model ...) and load the "
                "run's best/ directory, or use features() / embed() / fill_mask() on this one")
        if not items:
            return []
        key = (batch_size, max_seq_len)  # the length is checked against the model there
        if key not in self._finetuned:
            self._finetuned[key] = load_finetuned(self.source, batch_size, task_from_info,
                                                  max_seq_len=max_seq_len)
        task, examples, predictions = prediction.predict_inputs(
            self._finetuned[key],
            lambda task, tokenizer, length: task.examples_from_inputs(items, tokenizer, length),
            batch_size, max_seq_len, progress=len(items) > batch_size)
        values = task.prediction_values(examples, predictions)
        return values[0] if single else values

    def fill_mask(self, texts, top_k: int = 5) -> list:
        """For each [MASK] in a text, the `top_k` (token, probability) pairs, most likely first:
        [[(token, p), ...] per mask] for one text, a list of those for a list of texts. Every
        text is checked before any is answered. Needs a model with its masked-LM head
        (pre-trained here, or BertForPreTraining/MaskedLM)."""
        from bert_jax import inference

        items, single = _as_list(texts)
        for text in items:
            inference.masked_input(self.tokenizer, text, self.config.max_positions)
        results = [inference.fill_mask(self.config, self.params, self.tokenizer, text, top_k)
                   for text in items]
        return results[0] if single else results

    def attention(self, texts, text_b: str | None = None,
                  max_seq_len: int | None = None):
        """{'tokens': [CLS] pieces... [SEP], 'attention': (layers, heads, T, T) float32} for a
        text (with `text_b`, of the pair), or a list of those for a list of texts (each a
        string or a (text_a, text_b) tuple)."""
        from bert_jax.analysis.attention_maps import text_attention

        if text_b is not None and not isinstance(texts, str):
            raise UserError("text_b pairs with one text; for a list, give (text_a, text_b) "
                            "tuples")
        items, single = _as_list(texts if text_b is None else (texts, text_b))
        results = []
        for item in items:
            first, second = item if isinstance(item, tuple) else (item, None)
            result = text_attention(self.config, self.params, self.tokenizer, first, second,
                                    max_seq_len)
            results.append(dict(tokens=list(result.tokens),
                                attention=np.asarray(result.attention)))
        return results[0] if single else results

    def save(self, directory: str, format: str = "bert-jax", overwrite: bool = False) -> str:
        """Writes the model (and its vocabulary) as `format`; returns `directory`.

        bert-jax: model_config.json + params/; hf: a transformers directory; tf-checkpoint:
        an original google-research/bert checkpoint; saved-model: a TensorFlow SavedModel.
        """
        from bert_jax.interop import model_writers

        writers = {"bert-jax": model_writers.save_model,
                   "hf": model_writers.export_huggingface,
                   "tf-checkpoint": model_writers.export_tf_checkpoint,
                   "saved-model": model_writers.export_saved_model}
        if format not in writers:
            raise UserError(f"format must be one of {', '.join(FORMATS)}, got {format!r}")
        writers[format](self.config, self.params, self.tokenizer, directory,
                        overwrite=overwrite)
        return directory


def load(path_or_name: str) -> Model:
    """The model at `path_or_name`: a Hugging Face, sentence-transformers or bert-jax model
    directory, a training run or one of its checkpoints/<step>, an original BERT checkpoint,
    or a Hugging Face Hub name (from the cache, downloaded when online)."""
    from bert_jax.interop.model_source import load_text_model, resolve

    source = resolve(path_or_name)
    loaded = load_text_model(source)
    return Model(loaded.config, loaded.params, loaded.tokenizer, source, _loaded=loaded)
