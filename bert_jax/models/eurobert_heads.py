"""Task heads on the EuroBERT encoder, laid out as transformers' `EuroBert*` classes so they
convert one to one.

  masked LM       `mlm_head`: a dense layer to the vocabulary (a bias with `mlp_bias`), or the
                  token embeddings when `tie_word_embeddings` (then `mlm_head/bias` alone);
  classification  `head` (transformers' `dense`, with a bias), exact GELU, `classifier`, pooled
                  as `classifier_pooling` says: "bos" the first token's state, "mean" the
                  mean of the real tokens' states (both before `head`), "late" every token
                  through head and classifier, then the mean of the real tokens' logits;
  tokens          `classifier` on every position's state.
EuroBERT's heads have no dropout and no norm; there is no span head (transformers has no
EuroBertForQuestionAnswering: `config.has_span_head`). UltraBERT's (`config.variant`
"ultrabert"), as its `Ultrabert*` classes:
  masked LM       `mlm_head`: `linear1` (hidden -> prediction_head_size), tanh GELU,
                  `linear2` (back to hidden), tanh GELU, then `decoder` to the vocabulary (or
                  the token embeddings when `tie_word_embeddings`); no biases;
  classification  ModernBERT's classes with an identity head: `classifier` on the first
                  token's state ("cls") or the mean of the real tokens' ("mean");
  tokens          as EuroBERT's;
  spans           `qa_outputs`, two outputs at every position (GenericForQuestionAnswering).
Logits come back in float32 whatever the compute dtype.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp

from bert_jax.models.config import EuroBertConfig, Precision
from bert_jax.models.eurobert import EuroBertModel
from bert_jax.models.layers.dense import FLOAT32, Dense, batch_split, gelu
from bert_jax.models.layers.slots_in_use import decoder_logits
from bert_jax.models.modernbert_heads import TiedDecoder

Array = jax.Array


def _dense(config: EuroBertConfig, outputs: int, precision: Precision, name: str,
           output_axis: str = "classes", use_bias: bool = True):
    return Dense(config, (outputs,), ("embed",), (output_axis,), precision, use_bias=use_bias,
                 name=name)


def _masked_mean(x: Array, input_mask: Array) -> Array:
    """The mean over real tokens of (B, T, D) `x`: (B, D). A row of padding alone (a last
    batch's filler) gets zeros, not transformers' 0 / 0: a NaN would poison the batch's sums
    even at weight 0."""
    weights = input_mask[..., None].astype(x.dtype)  # (B, T, 1)
    return (x * weights).sum(axis=1) / jnp.maximum(weights.sum(axis=1), 1)


def gelu_tanh(x: Array) -> Array:
    """GELU's tanh approximation (transformers' `gelu_pytorch_tanh`)."""
    return jax.nn.gelu(x, approximate=True)


class UltraBertPredictionHead(nn.Module):
    """UltraBERT's masked-LM head (transformers' `UltrabertPredictionHead`): two bias-free
    dense layers, each followed by tanh GELU, then the bias-free `decoder` to the
    vocabulary; with `tie_word_embeddings` the decoder is the token embeddings' `table`
    (on a CPU, scoring only the slots of nonzero `weights` when given: `slots_in_use`)."""
    config: EuroBertConfig
    precision: Precision = FLOAT32

    @nn.compact
    def __call__(self, x: Array, table: Array, weights: Array | None = None) -> Array:
        config, precision = self.config, self.precision
        x = Dense(config, (config.prediction_head_size,), ("embed",), ("mlp",), precision,
                  use_bias=False, activation=gelu_tanh, name="linear1")(x)
        x = Dense(config, (config.hidden_dim,), ("mlp",), ("embed",), precision,
                  use_bias=False, activation=gelu_tanh, name="linear2")(x)
        if not config.tie_word_embeddings:
            return _dense(config, config.vocab_size, precision, "decoder", "vocab",
                          use_bias=False)(x)
        return decoder_logits(x.astype(precision.dtype), table, None, weights)  # (..., vocab)


class EuroBertForMaskedLM(nn.Module):
    """Masked-LM logits (B, P, vocab) at the P gathered positions of the final states. With
    `masked_lm_weights` (B, P), a CPU scores only the slots that count (`slots_in_use`)
    where the decoder is the token embeddings (EuroBERT's and UltraBERT's); an untied
    decoder scores every slot."""
    config: EuroBertConfig
    precision: Precision = FLOAT32

    @nn.compact
    def __call__(self, input_ids: Array, segment_ids: Array, input_mask: Array,
                 masked_lm_positions: Array, train: bool = False, *,
                 instance_ids: Array | None = None, position_ids: Array | None = None,
                 max_instances: int | None = None,
                 masked_lm_weights: Array | None = None) -> Array:
        config, precision = self.config, self.precision
        encoder = EuroBertModel(config, precision, name="eurobert")
        sequence_output, _ = encoder(input_ids, segment_ids, input_mask, train, instance_ids,
                                     position_ids, max_instances)  # (B, T, H)
        gathered = batch_split(jnp.take_along_axis(
            sequence_output, masked_lm_positions[..., None], axis=1))  # (B, P, H)
        if config.variant == "ultrabert":
            return UltraBertPredictionHead(config, precision, name="mlm_head")(
                gathered, encoder.word_table(), masked_lm_weights).astype(jnp.float32)
        if not config.tie_word_embeddings:
            logits = _dense(config, config.vocab_size, precision, "mlm_head", "vocab",
                            use_bias=config.mlp_bias)(gathered)
        elif config.mlp_bias:
            logits = TiedDecoder(config.vocab_size, precision, name="mlm_head")(
                gathered, encoder.word_table(), masked_lm_weights)  # (B, P, vocab)
        else:
            logits = decoder_logits(gathered.astype(precision.dtype), encoder.word_table(),
                                    None, masked_lm_weights)  # (B, P, vocab)
        return logits.astype(jnp.float32)


class EuroBertForSequenceClassification(nn.Module):
    """Logits (B, num_labels), pooled as `classifier_pooling` says (module docstring)."""
    config: EuroBertConfig
    num_labels: int
    precision: Precision = FLOAT32

    @nn.compact
    def __call__(self, input_ids: Array, segment_ids: Array, input_mask: Array,
                 train: bool = False) -> Array:
        config, precision = self.config, self.precision
        sequence_output, _ = EuroBertModel(config, precision, name="eurobert")(
            input_ids, segment_ids, input_mask, train)  # (B, T, H)
        classifier = _dense(config, self.num_labels, precision, "classifier")
        if config.variant == "ultrabert":  # no head before the classifier
            pooled = (sequence_output[:, 0] if config.classifier_pooling == "cls"
                      else _masked_mean(sequence_output, input_mask))  # (B, H)
            return classifier(batch_split(pooled)).astype(jnp.float32)
        head = _dense(config, config.hidden_dim, precision, "head", "embed_out")
        if config.classifier_pooling == "late":
            logits = classifier(gelu(head(sequence_output))).astype(jnp.float32)  # (B, T, C)
            return _masked_mean(logits, input_mask)
        pooled = (sequence_output[:, 0] if config.classifier_pooling == "bos"
                  else _masked_mean(sequence_output, input_mask))  # (B, H)
        return classifier(gelu(head(batch_split(pooled)))).astype(jnp.float32)


class EuroBertForTokenClassification(nn.Module):
    """Logits (B, T, num_labels): the classifier on every position's final state."""
    config: EuroBertConfig
    num_labels: int
    precision: Precision = FLOAT32

    @nn.compact
    def __call__(self, input_ids: Array, segment_ids: Array, input_mask: Array,
                 train: bool = False) -> Array:
        config, precision = self.config, self.precision
        sequence_output, _ = EuroBertModel(config, precision, name="eurobert")(
            input_ids, segment_ids, input_mask, train)  # (B, T, H)
        logits = _dense(config, self.num_labels, precision, "classifier")(sequence_output)
        return nn.with_logical_constraint(logits.astype(jnp.float32), ("batch", "seq", "classes"))


class EuroBertForQuestionAnswering(nn.Module):
    """Span start and end logits, each (B, T): a two-output dense layer (`qa_outputs`) on
    every position's final state (UltraBERT's; families.py refuses a EuroBERT)."""
    config: EuroBertConfig
    precision: Precision = FLOAT32

    @nn.compact
    def __call__(self, input_ids: Array, segment_ids: Array, input_mask: Array,
                 train: bool = False) -> tuple[Array, Array]:
        config, precision = self.config, self.precision
        sequence_output, _ = EuroBertModel(config, precision, name="eurobert")(
            input_ids, segment_ids, input_mask, train)  # (B, T, H)
        logits = _dense(config, 2, precision, "qa_outputs")(sequence_output)  # (B, T, 2)
        logits = nn.with_logical_constraint(logits.astype(jnp.float32),
                                            ("batch", "seq", "classes"))
        return logits[..., 0], logits[..., 1]
