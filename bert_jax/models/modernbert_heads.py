"""Task heads on the ModernBERT encoder, laid out as transformers' `ModernBert*` classes so they
convert one to one.

Every head starts with the prediction head transformers calls `head` (dense, GELU, LayerNorm):
the masked-LM model decodes its output against the tied token embeddings; the classifiers
apply dropout and a `classifier` to it. Because the classifiers' `head` has the masked-LM
model's names, fine-tuning from a pre-trained checkpoint starts from its pre-trained head, as
transformers' `from_pretrained` does. Logits come back in float32 whatever the compute dtype.

Parameters: `modernbert` (the encoder), `head`, and `mlm_head` (the decoder's output bias),
`classifier` (sequence and token classification) or `qa_outputs` (transformers' QA
`classifier`: the name the tasks and BERT use for the span head).
"""

import math

import flax.linen as nn
import jax
import jax.numpy as jnp

from bert_jax.models.config import ModernBertConfig, Precision
from bert_jax.models.layers.dense import FLOAT32, Dense, batch_split, gelu, zeros
from bert_jax.models.layers.dropout import Dropout
from bert_jax.models.layers.slots_in_use import decoder_logits
from bert_jax.models.modernbert import ModernBertModel, norm, output_std

Array = jax.Array


class PredictionHead(nn.Module):
    """transformers' ModernBertPredictionHead: LayerNorm(gelu(dense(x)))."""
    config: ModernBertConfig
    precision: Precision = FLOAT32

    @nn.compact
    def __call__(self, x: Array) -> Array:
        config, precision = self.config, self.precision
        x = Dense(config, (config.hidden_dim,), ("embed",), ("embed_out",), precision,
                  use_bias=config.classifier_bias, std=output_std(config), name="dense")(x)
        return norm(config, precision, name="norm")(gelu(x))


class TiedDecoder(nn.Module):
    """The masked-LM decoder tied to the token embeddings' `table`, and its own bias over the
    vocabulary (at `mlm_head/output_bias`, where BERT's masked-LM head keeps its own); on a
    CPU, only the slots of nonzero `weights` when given (`slots_in_use`)."""
    vocab_size: int
    precision: Precision = FLOAT32

    @nn.compact
    def __call__(self, x: Array, table: Array, weights: Array | None = None) -> Array:
        bias = self.param("output_bias", zeros("vocab"), (self.vocab_size,),
                          self.precision.param_dtype)
        return decoder_logits(x.astype(self.precision.dtype), table, bias, weights)


def classifier(config: ModernBertConfig, outputs: int, precision: Precision, name: str):
    """The final dense layer of a task head (with a bias, as transformers' nn.Linear), its
    initial std transformers' `final_out`: hidden_dim^-0.5."""
    return Dense(config, (outputs,), ("embed",), ("classes",), precision,
                 std=1.0 / math.sqrt(config.hidden_dim), name=name)


class ModernBertForMaskedLM(nn.Module):
    """Masked-LM logits (B, P, vocab) at the P gathered positions: the prediction head, then
    the decoder tied to the token embeddings, plus its bias (`decoder_bias`). With
    `masked_lm_weights` (B, P), a CPU scores only the slots that count (`slots_in_use`)."""
    config: ModernBertConfig
    precision: Precision = FLOAT32

    @nn.compact
    def __call__(self, input_ids: Array, segment_ids: Array, input_mask: Array,
                 masked_lm_positions: Array, train: bool = False, *,
                 instance_ids: Array | None = None, position_ids: Array | None = None,
                 max_instances: int | None = None,
                 masked_lm_weights: Array | None = None) -> Array:
        config, precision = self.config, self.precision
        if not config.decoder_bias:  # refused when a config is read; guards a direct caller
            raise ValueError("decoder_bias=False is not implemented")
        encoder = ModernBertModel(config, precision, name="modernbert")
        sequence_output, _ = encoder(input_ids, segment_ids, input_mask, train, instance_ids,
                                     position_ids, max_instances)  # (B, T, H)
        gathered = jnp.take_along_axis(
            sequence_output, masked_lm_positions[..., None], axis=1)  # (B, P, H)
        x = PredictionHead(config, precision, name="head")(batch_split(gathered))
        logits = TiedDecoder(config.vocab_size, precision, name="mlm_head")(
            batch_split(x), encoder.word_table(), masked_lm_weights)  # (B, P, vocab)
        return logits.astype(jnp.float32)


class ModernBertForSequenceClassification(nn.Module):
    """Logits (B, num_labels): the [CLS] state or the mean over real tokens
    (`classifier_pooling`), the prediction head, dropout, the classifier."""
    config: ModernBertConfig
    num_labels: int
    precision: Precision = FLOAT32

    @nn.compact
    def __call__(self, input_ids: Array, segment_ids: Array, input_mask: Array,
                 train: bool = False) -> Array:
        config, precision = self.config, self.precision
        sequence_output, _ = ModernBertModel(config, precision, name="modernbert")(
            input_ids, segment_ids, input_mask, train)  # (B, T, H)
        if config.classifier_pooling == "cls":
            pooled = sequence_output[:, 0]  # (B, H)
        else:
            weights = input_mask[..., None].astype(sequence_output.dtype)  # (B, T, 1)
            pooled = (sequence_output * weights).sum(axis=1) / weights.sum(axis=1)  # (B, H)
        pooled = PredictionHead(config, precision, name="head")(batch_split(pooled))
        pooled = Dropout(config.classifier_dropout_rate)(pooled, deterministic=not train)
        logits = classifier(config, self.num_labels, precision, "classifier")(pooled)
        return logits.astype(jnp.float32)


class ModernBertForTokenClassification(nn.Module):
    """Logits (B, T, num_labels): the prediction head at every position, dropout, the
    classifier."""
    config: ModernBertConfig
    num_labels: int
    precision: Precision = FLOAT32

    @nn.compact
    def __call__(self, input_ids: Array, segment_ids: Array, input_mask: Array,
                 train: bool = False) -> Array:
        config, precision = self.config, self.precision
        sequence_output, _ = ModernBertModel(config, precision, name="modernbert")(
            input_ids, segment_ids, input_mask, train)  # (B, T, H)
        x = PredictionHead(config, precision, name="head")(sequence_output)
        x = Dropout(config.classifier_dropout_rate)(x, deterministic=not train)
        logits = classifier(config, self.num_labels, precision, "classifier")(x)
        return nn.with_logical_constraint(logits.astype(jnp.float32), ("batch", "seq", "classes"))


class ModernBertForQuestionAnswering(nn.Module):
    """Span start and end logits, each (B, T): the prediction head at every position,
    dropout, a two-output dense layer (transformers' `classifier`, here `qa_outputs`)."""
    config: ModernBertConfig
    precision: Precision = FLOAT32

    @nn.compact
    def __call__(self, input_ids: Array, segment_ids: Array, input_mask: Array,
                 train: bool = False) -> tuple[Array, Array]:
        config, precision = self.config, self.precision
        sequence_output, _ = ModernBertModel(config, precision, name="modernbert")(
            input_ids, segment_ids, input_mask, train)  # (B, T, H)
        x = PredictionHead(config, precision, name="head")(sequence_output)
        x = Dropout(config.classifier_dropout_rate)(x, deterministic=not train)
        logits = classifier(config, 2, precision, "qa_outputs")(x)  # (B, T, 2)
        logits = nn.with_logical_constraint(logits.astype(jnp.float32),
                                            ("batch", "seq", "classes"))
        return logits[..., 0], logits[..., 1]
