"""Feature-based heads: a classifier over chosen layers of a frozen encoder (BERT paper, 5.4).

The encoder is not trained; its hidden states of some layers (0 = embedding output) are
combined into one feature per position and only the combination and the classifier learn.
The BERT paper's Table 7 compares such combinations on CoNLL-2003 NER:

- `concat`: the layers side by side, (B, T, L*H);
- `sum`: their plain sum, (B, T, H);
- `scalar-mix`: ELMo's (Peters et al., 2018, eq. 1) `scale * sum_l softmax(w)_l h_l`, the
  weights w and the scale learned, starting from the mean of the layers.
"""

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp

from bert_jax.models.config import BertConfig, Precision
from bert_jax.models.bert import BertModel, Embeddings, EncoderLayer
from bert_jax.models.layers.dense import FLOAT32, Dense
from bert_jax.models.layers.dropout import Dropout
from bert_jax.tasks.arguments import COMBINE_MODES  # defined with ner's --combine flag

Array = jax.Array


class LayerCombination(nn.Module):
    """(L, B, T, H) hidden states of L layers -> (B, T, H) or, for concat, (B, T, L*H)."""
    mode: str

    @nn.compact
    def __call__(self, hidden_states: Array) -> Array:
        num_layers, batch_size, seq_len, hidden_dim = hidden_states.shape
        if self.mode == "concat":
            stacked = jnp.moveaxis(hidden_states, 0, 2)  # (B, T, L, H)
            return stacked.reshape(batch_size, seq_len, num_layers * hidden_dim)
        if self.mode == "sum":
            return hidden_states.sum(axis=0)
        if self.mode == "scalar-mix":
            # Zero logits: the softmax starts as the plain mean of the layers.
            logits = self.param("layer_weights", nn.with_logical_partitioning(
                nn.initializers.zeros_init(), ("layers",)), (num_layers,), jnp.float32)
            scale = self.param("scale", nn.initializers.ones_init(), (), jnp.float32)
            weights = jax.nn.softmax(logits).astype(hidden_states.dtype)  # (L,)
            return scale.astype(hidden_states.dtype) * jnp.einsum(
                "l,lbth->bth", weights, hidden_states)
        raise ValueError(f"unknown combine mode {self.mode!r}; expected one of {COMBINE_MODES}")


class FeatureTokenClassifier(nn.Module):
    """Combined frozen-layer features -> dropout -> a label score per position (B, T, C)."""
    config: BertConfig
    num_labels: int
    combine: str
    precision: Precision = FLOAT32

    @nn.compact
    def __call__(self, hidden_states: Array, train: bool = False) -> Array:
        features = LayerCombination(self.combine, name="combination")(
            jax.lax.stop_gradient(hidden_states))  # the encoder stays frozen
        features = Dropout(self.config.dropout_rate)(features, deterministic=not train)
        return Dense(self.config, (self.num_labels,), ("embed",), ("classes",), self.precision,
                     name="classifier")(features)


def _capture_hidden_states(states: list):
    """A flax method interceptor that appends each embedding and encoder-layer output.

    The encoder's own `sow` of its hidden states needs `apply(..., mutable=...)`, which
    the task seam's shared `apply` does not ask for; intercepting the calls gets the same
    tensors (0 = embedding output, then each layer) without changing the encoder.
    """
    def capture(call, args, kwargs, context):
        outputs = call(*args, **kwargs)
        if context.method_name == "__call__" and isinstance(context.module,
                                                             (Embeddings, EncoderLayer)):
            states.append(outputs)
        return outputs
    return capture


class FrozenEncoderTokenClassifier(nn.Module):
    """BERT's frozen layers `layers` (0 = embeddings) combined, then a label score per position.

    The encoder's parameters sit under `bert` as in every other head, so any BERT model
    loads into it; the task keeps them out of the optimizer (`Task.trainable`) and the
    hidden states pass through `stop_gradient`, so nothing flows back into the encoder.
    Remat is off for the encoder: with no backward pass through it there is nothing to save.
    """
    config: BertConfig
    num_labels: int
    layers: tuple[int, ...]  # absolute layer numbers, 0..num_layers
    combine: str
    precision: Precision = FLOAT32
    # Its encoder reads each layer's parameters by name even with scanning on, so a run keeps
    # them per layer (bert_jax/training/layer_storage.py).
    runs_layers_unrolled = True

    @nn.compact
    def __call__(self, input_ids: Array, segment_ids: Array, input_mask: Array,
                 train: bool = False) -> Array:
        states = []
        with nn.intercept_methods(_capture_hidden_states(states)):
            # Dropout in a frozen encoder would only add noise to fixed features: eval mode.
            # Unrolled: the interceptor sees each layer's call, which a scanned stack hides.
            BertModel(self.config, dataclasses.replace(self.precision, remat=False,
                                                       scan_layers=False),
                      with_pooler=False, name="bert")(input_ids, segment_ids, input_mask, False)
        hidden = jnp.stack([states[layer] for layer in self.layers])  # (L, B, T, H)
        logits = FeatureTokenClassifier(self.config, self.num_labels, self.combine,
                                        self.precision, name="head")(hidden, train)
        return logits.astype(jnp.float32)  # (B, T, num_labels)
