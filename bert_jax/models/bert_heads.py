"""Task heads on the BERT encoder, laid out as Hugging Face's so they convert one to one.

`BertForSequenceClassification`: dropout and a dense layer on the pooled [CLS] output
(classification, or regression with one output). `BertForTokenClassification`: dropout and
a dense layer on every position, over an encoder without the pooler (HF builds it with
`add_pooling_layer=False`). Logits come back in float32 whatever the compute dtype, since
the loss and the host-side predictions read them.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp

from bert_jax.models.config import BertConfig, Precision
from bert_jax.models.bert import BertModel, MaskedLanguageModelHead
from bert_jax.models.layers.dense import FLOAT32, Dense
from bert_jax.models.layers.dropout import Dropout

Array = jax.Array


class BertForSequenceClassification(nn.Module):
    """Logits (B, num_labels) from the pooled [CLS] output."""
    config: BertConfig
    num_labels: int
    precision: Precision = FLOAT32

    @nn.compact
    def __call__(self, input_ids: Array, segment_ids: Array, input_mask: Array,
                 train: bool = False) -> Array:
        config = self.config
        _, pooled = BertModel(config, self.precision, name="bert")(
            input_ids, segment_ids, input_mask, train)  # (B, H)
        pooled = Dropout(config.dropout_rate)(pooled, deterministic=not train)
        logits = Dense(config, (self.num_labels,), ("embed",), ("classes",), self.precision,
                       name="classifier")(pooled)  # (B, num_labels)
        return logits.astype(jnp.float32)


class BertForTokenClassification(nn.Module):
    """Logits (B, T, num_labels) at every position."""
    config: BertConfig
    num_labels: int
    precision: Precision = FLOAT32

    @nn.compact
    def __call__(self, input_ids: Array, segment_ids: Array, input_mask: Array,
                 train: bool = False) -> Array:
        config = self.config
        sequence_output, _ = BertModel(config, self.precision, with_pooler=False, name="bert")(
            input_ids, segment_ids, input_mask, train)  # (B, T, H)
        sequence_output = Dropout(config.dropout_rate)(sequence_output, deterministic=not train)
        logits = Dense(config, (self.num_labels,), ("embed",), ("classes",), self.precision,
                       name="classifier")(sequence_output)  # (B, T, num_labels)
        return nn.with_logical_constraint(logits.astype(jnp.float32), ("batch", "seq", "classes"))


class BertForQuestionAnswering(nn.Module):
    """Span start and end logits, each (B, T), at every position: HF's `qa_outputs`.

    As in transformers, a dense layer to two outputs straight on the sequence output (no
    dropout, no pooler). Padding positions are not masked here (the export must equal HF's
    logits); the loss and the post-processing leave them out.
    """
    config: BertConfig
    precision: Precision = FLOAT32

    @nn.compact
    def __call__(self, input_ids: Array, segment_ids: Array, input_mask: Array,
                 train: bool = False) -> tuple[Array, Array]:
        config = self.config
        sequence_output, _ = BertModel(config, self.precision, with_pooler=False, name="bert")(
            input_ids, segment_ids, input_mask, train)  # (B, T, H)
        logits = Dense(config, (2,), ("embed",), ("classes",), self.precision,
                       name="qa_outputs")(sequence_output)  # (B, T, 2)
        logits = nn.with_logical_constraint(logits.astype(jnp.float32),
                                            ("batch", "seq", "classes"))
        return logits[..., 0], logits[..., 1]


class BertForMaskedLM(nn.Module):
    """Masked-LM logits (B, P, vocab) at the P gathered positions: HF's BertForMaskedLM.

    The head is the pre-training one (`model.MaskedLanguageModelHead`, decoder tied to the
    word embeddings), so its parameters carry the same names and a pre-trained head (or a
    missing one, freshly initialised) moves between the two models unchanged.
    """
    config: BertConfig
    precision: Precision = FLOAT32

    @nn.compact
    def __call__(self, input_ids: Array, segment_ids: Array, input_mask: Array,
                 masked_lm_positions: Array, train: bool = False, *,
                 instance_ids: Array | None = None, position_ids: Array | None = None,
                 max_instances: int | None = None,
                 masked_lm_weights: Array | None = None) -> Array:
        """Packed rows (pre-training shards made with --pack) give their `instance_ids` and
        `position_ids` (B, T) and the most instances a row holds (`max_instances`), as
        `BertModel` takes them; `masked_lm_weights` (B, P), the slots that count
        (`slots_in_use`)."""
        bert = BertModel(self.config, self.precision, with_pooler=False, name="bert")
        sequence_output, _ = bert(input_ids, segment_ids, input_mask, train, instance_ids,
                                  position_ids, max_instances)  # (B, T, H)
        gathered = jnp.take_along_axis(
            sequence_output, masked_lm_positions[..., None], axis=1)  # (B, P, H)
        logits = MaskedLanguageModelHead(self.config, self.precision, name="mlm_head")(
            gathered, bert.word_table(), masked_lm_weights)
        return logits.astype(jnp.float32)
