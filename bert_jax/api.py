"""The Python API for notebooks: `bert_jax.load(path_or_name)` and what the model can do.

    import bert_jax
    model = bert_jax.load("runs/demo")  # any model directory the CLI takes, or a Hub name
    vectors = model.features(["a sentence", "another"], pool="mean")  # (2, H) numpy
    model.fill_mask("the [MASK] of the module")  # [[(token, probability), ...]]
    model.save("exported/demo-hf", format="hf")

Inputs are strings or lists of strings (a (text_a, text_b) tuple for a pair); outputs are
numpy arrays and plain Python values. The commands `features`, `fill-mask` and `attention`
run the same library functions (`inference`, `analysis.attention_maps`, `model_io`), so the
API and the CLI cannot drift apart.
"""

import dataclasses
from collections.abc import Sequence

import numpy as np

from bert_jax.config import BertConfig
from bert_jax.errors import UserError

FORMATS = ("bert-jax", "hf", "tf-checkpoint", "saved-model")
POOLING = ("none", "cls", "mean")


def _as_list(texts) -> tuple[list, bool]:
    """(list of inputs, whether one input was given rather than a list)."""
    if isinstance(texts, (str, tuple)):
        return [texts], True
    return list(texts), False


@dataclasses.dataclass
class Model:
    """A loaded model with its tokenizer: what `bert_jax.load` returns."""
    config: BertConfig
    params: dict  # nested numpy dicts: bert, and mlm_head / nsp_head when the source has them
    tokenizer: object  # input_pipeline.tokenization's tokenizer of the model's vocabulary
    source: str  # the path or name it was loaded from

    def features(self, texts, layers: Sequence[int] = (-1,), pool: str = "none",
                 max_seq_len: int | None = None, batch_size: int = 32):
        """Hidden states of `layers` (0 = embeddings, -1 = last) for each text.

        One layer: (N, T, H) with T the longest input in tokens, zero at padding (pool
        'none'), or (N, H) pooled by 'cls' or 'mean'; several layers: {layer: array}. A
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

    def fill_mask(self, text: str, top_k: int = 5) -> list[list[tuple[str, float]]]:
        """For each [MASK] in `text`, the `top_k` (token, probability) pairs, most likely first.
        Needs a model with its masked-LM head (pre-trained here, or BertForPreTraining/MaskedLM)."""
        from bert_jax import inference

        return inference.fill_mask(self.config, self.params, self.tokenizer, text, top_k)

    def attention(self, text: str, text_b: str | None = None,
                  max_seq_len: int | None = None) -> dict:
        """{'tokens': [CLS] pieces... [SEP], 'attention': (layers, heads, T, T) float32}."""
        from bert_jax.analysis.attention_maps import text_attention

        result = text_attention(self.config, self.params, self.tokenizer, text, text_b,
                                max_seq_len)
        return dict(tokens=list(result.tokens), attention=np.asarray(result.attention))

    def save(self, directory: str, format: str = "bert-jax", overwrite: bool = False) -> str:
        """Writes the model (and its vocabulary) as `format`; returns `directory`.

        bert-jax: model_config.json + params/; hf: a transformers directory; tf-checkpoint:
        an original google-research/bert checkpoint; saved-model: a TensorFlow SavedModel.
        """
        from bert_jax import model_io

        writers = {"bert-jax": model_io.save_model, "hf": model_io.export_huggingface,
                   "tf-checkpoint": model_io.export_tf_checkpoint,
                   "saved-model": model_io.export_saved_model}
        if format not in writers:
            raise UserError(f"format must be one of {', '.join(FORMATS)}, got {format!r}")
        writers[format](self.config, self.params, self.tokenizer, directory,
                        overwrite=overwrite)
        return directory


def load(path_or_name: str) -> Model:
    """The model at `path_or_name`: a Hugging Face, sentence-transformers or bert-jax model
    directory, a training run or one of its checkpoints/<step>, an original BERT checkpoint,
    or a Hugging Face Hub name (from the cache, downloaded when online)."""
    from bert_jax.commands.features import load_text_model

    config, params, tokenizer = load_text_model(path_or_name, None)
    return Model(config, params, tokenizer, path_or_name)
