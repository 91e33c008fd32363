"""BERT (Devlin et al., 2019): the post-LayerNorm Transformer encoder and its pre-training heads.

Modules only: no flags, no mesh, no file I/O. Every parameter carries logical axis names
(`vocab`, `embed`, `heads`, `kv`, `mlp`, ...) that `bert_jax.sharding` maps onto a mesh.

Feature extraction and attention analysis need every layer's output and attention
probabilities. Instead of threading `output_hidden_states` flags through each layer, the
modules `sow` them into the `intermediates` collection; call `apply(...,
mutable=["intermediates"])` to collect them (see `bert_jax.inference`). Without that the
sows are no-ops and cost nothing.
"""

import functools
import zlib

import flax.linen as nn
import jax
import jax.numpy as jnp

from bert_jax.models.config import BertConfig, Precision
from bert_jax.models.layers.attention import attend, attention, attention_probabilities
from bert_jax.models.layers.dense import (FLOAT32, Dense, batch_split, gelu,
                                          initializer, joined_projections, joins_projections,
                                          layer_norm, zeros)
from bert_jax.models.layers.dropout import Dropout
from bert_jax.models.layers.layer_scan import (block_params, dropout_key, remat_layer,
                                               scan_blocks, scanned)
from bert_jax.models.layers.slots_in_use import decoder_logits

Array = jax.Array


class Embeddings(nn.Module):
    """Word + position + segment embeddings, then LayerNorm and dropout."""
    config: BertConfig
    precision: Precision = FLOAT32

    def setup(self):
        config = self.config
        # Rows are looked up in the parameters' float32 (LayerNorm then returns the compute
        # dtype): the gradient's scatter-add over the batch's tokens stays float32.
        embed = functools.partial(
            nn.Embed, features=config.hidden_dim, param_dtype=self.precision.param_dtype,
            dtype=self.precision.param_dtype)
        std = config.initializer_std
        self.word_embeddings = embed(
            num_embeddings=config.vocab_size, embedding_init=initializer(std, "vocab", "embed"))
        self.position_embeddings = embed(
            num_embeddings=config.max_positions,
            embedding_init=initializer(std, "positions", "embed"))
        self.segment_embeddings = embed(
            num_embeddings=config.num_segments,
            embedding_init=initializer(std, "segments", "embed"))
        self.layer_norm = layer_norm(config, self.precision)
        self.dropout = Dropout(config.dropout_rate)

    def __call__(self, input_ids: Array, segment_ids: Array, train: bool,
                 position_ids: Array | None = None) -> Array:
        if position_ids is None:  # one instance per row: positions 0..T-1, shared by all rows
            positions = self.position_embeddings(jnp.arange(input_ids.shape[1]))[None]
        else:  # packed rows: positions restart at each instance
            positions = self.position_embeddings(position_ids)
        x = (self.word_embeddings(input_ids) + positions
             + self.segment_embeddings(segment_ids))
        x = self.layer_norm(x)
        return self.dropout(x, deterministic=not train)


class SelfAttention(nn.Module):
    """Multi-head scaled dot-product self-attention within each instance of a row (see
    `bert_jax.models.layers.attention` for the mask the instance ids make)."""
    config: BertConfig
    precision: Precision = FLOAT32

    @nn.compact
    def __call__(self, x: Array, instance_ids: Array, train: bool,
                 max_instances: int | None = None) -> Array:
        config = self.config
        heads = (config.num_heads, config.head_dim)
        project = functools.partial(Dense, config, heads, ("embed",), ("heads", "kv"),
                                    self.precision)
        # The queries come out scaled by 1 / sqrt(head_dim), the scores' scale, folded into
        # their projection (Dense.output_scale).
        projections = [project(name="query", output_scale=config.head_dim ** -0.5),
                       project(name="key"), project(name="value")]
        if joins_projections(self.precision):
            query, key, value = joined_projections(x, projections)
        else:
            query, key, value = (projection(x) for projection in projections)  # (B, T, nh, hd)
        rate = config.attention_dropout_rate if train else 0.0
        dropout_key = self.make_rng("dropout") if rate else None
        if self.is_mutable_collection("intermediates"):  # attention maps asked for: keep them
            probabilities = attention_probabilities(query, key, instance_ids)
            self.sow("intermediates", "attention_probabilities", probabilities)
            context = attend(probabilities, value, rate, dropout_key, self.precision.dtype)
        else:
            # A fused kernel's own dropout needs a seed per layer: one from its name.
            context = attention(query, key, value, instance_ids, rate, dropout_key,
                                self.precision, max_instances,
                                zlib.crc32("/".join(self.path).encode()))
        return Dense(config, (config.hidden_dim,), ("heads", "kv"), ("embed",), self.precision,
                     name="output")(context)


class FeedForward(nn.Module):
    config: BertConfig
    precision: Precision = FLOAT32

    @nn.compact
    def __call__(self, x: Array) -> Array:
        config = self.config
        x = Dense(config, (config.mlp_dim,), ("embed",), ("mlp",), self.precision,
                  activation=gelu, name="intermediate")(x)
        return Dense(config, (config.hidden_dim,), ("mlp",), ("embed",), self.precision,
                     name="output")(x)


class EncoderLayer(nn.Module):
    """Post-LN: x = LN(x + Attention(x)); x = LN(x + FeedForward(x)), dropout on each branch."""
    config: BertConfig
    precision: Precision = FLOAT32

    @nn.compact
    def __call__(self, x: Array, instance_ids: Array, train: bool,
                 max_instances: int | None = None) -> Array:
        config = self.config
        dropout = Dropout(config.dropout_rate)
        precision = self.precision
        attended = SelfAttention(config, precision, name="attention")(x, instance_ids, train,
                                                                      max_instances)
        x = layer_norm(config, precision, name="attention_layer_norm")(
            x + dropout(attended, deterministic=not train))
        transformed = FeedForward(config, precision, name="mlp")(x)
        x = layer_norm(config, precision, name="output_layer_norm")(
            x + dropout(transformed, deterministic=not train))
        return nn.with_logical_constraint(x, ("batch", "seq", "embed"))


class BertModel(nn.Module):
    """The encoder and pooler: returns (sequence_output (B, T, H), pooled_output (B, H)).

    Without the pooler (`with_pooler=False`, as HF's token-level heads) pooled is None.
    """
    config: BertConfig
    precision: Precision = FLOAT32
    with_pooler: bool = True

    def setup(self):
        config, precision = self.config, self.precision
        self.embeddings = Embeddings(config, precision)
        layer = remat_layer(EncoderLayer, precision, static_argnums=(3, 4))
        self.layers = [layer(config, precision, name=f"layer_{index}")
                       for index in range(config.num_layers)]
        if self.with_pooler:
            self.pooler = Dense(config, (config.hidden_dim,), ("embed",), ("embed_out",),
                                precision)

    def __call__(self, input_ids: Array, segment_ids: Array, input_mask: Array,
                 train: bool = False, instance_ids: Array | None = None,
                 position_ids: Array | None = None, max_instances: int | None = None
                 ) -> tuple[Array, Array]:
        """`instance_ids` (B, T) int32 say which instance of a packed row each token belongs
        to (0 = padding; default `input_mask`: one instance per row, real tokens first);
        `max_instances` how many a row can hold (static; packed pre-training rows:
        data.max_sequences_per_row; None with `instance_ids`: not known); `position_ids`
        (B, T) restart at each instance (default 0..T-1). The pooled output reads position 0
        only: packed rows pool each instance's [CLS] with `pool`."""
        if instance_ids is None:
            instance_ids, max_instances = input_mask, 1
        instance_ids = instance_ids.astype(jnp.int32)
        x = self.embeddings(input_ids, segment_ids, train, position_ids)
        x = nn.with_logical_constraint(x, ("batch", "seq", "embed"))
        self.sow("intermediates", "hidden_states", x)
        if scanned(self, self.precision):  # one layer the block: every layer's weights alike
            layer = EncoderLayer(self.config, self.precision, parent=None)
            x = scan_blocks([layer], block_params(self, self.config.scan_plan), x,
                            (instance_ids, train, max_instances), dropout_key(self, train),
                            self.precision)
        else:
            for layer in self.layers:
                x = layer(x, instance_ids, train, max_instances)
                self.sow("intermediates", "hidden_states", x)
        pooled = self.pool(x[:, 0]) if self.with_pooler else None
        return x, pooled

    def pool(self, cls_states: Array) -> Array:
        """The pooler, tanh(dense), over [CLS] states (..., H)."""
        return batch_split(jnp.tanh(self.pooler(batch_split(cls_states))))

    def word_table(self) -> Array:
        """The word embeddings (vocab, H), which the MLM decoder shares: it scores in the
        compute dtype (the table is looked up in float32, see Embeddings)."""
        return self.embeddings.word_embeddings.embedding


class MaskedLanguageModelHead(nn.Module):
    """Transform (dense + GELU + LayerNorm), then the tied decoder plus an output bias: the
    word embeddings' `table`; on a CPU, only the slots of nonzero `weights` when given
    (`slots_in_use`)."""
    config: BertConfig
    precision: Precision = FLOAT32

    @nn.compact
    def __call__(self, x: Array, table: Array, weights: Array | None = None) -> Array:
        config, precision = self.config, self.precision
        x = Dense(config, (config.hidden_dim,), ("embed",), ("embed_out",), precision,
                  name="transform")(batch_split(x))
        x = layer_norm(config, precision, name="layer_norm")(gelu(x)).astype(precision.dtype)
        # The decoder's input pinned too: its gradient comes back from the (vocab, embed)
        # table's matmul, and unpinned XLA splits it along `embed` under FSDP and moves it
        # back with all-to-alls (6 in a 2-layer model on v5e:2x2, fsdp=4; none pinned).
        x = batch_split(x)
        bias = self.param("output_bias", zeros("vocab"), (config.vocab_size,),
                          precision.param_dtype)
        return decoder_logits(x, table, bias, weights)


class BertForPreTraining(nn.Module):
    """BERT with the masked-LM head on the gathered masked positions and the NSP head."""
    config: BertConfig
    precision: Precision = FLOAT32

    def setup(self):
        config, precision = self.config, self.precision
        self.bert = BertModel(config, precision)
        self.mlm_head = MaskedLanguageModelHead(config, precision)
        self.nsp_head = Dense(config, (2,), ("embed",), ("classes",), precision)

    def __call__(self, input_ids: Array, segment_ids: Array, input_mask: Array,
                 masked_lm_positions: Array, train: bool = False, *,
                 instance_ids: Array | None = None, position_ids: Array | None = None,
                 instance_starts: Array | None = None, max_instances: int | None = None,
                 masked_lm_weights: Array | None = None) -> tuple[Array, Array]:
        """Returns MLM logits (B, P, vocab) at `masked_lm_positions` (B, P) and NSP logits (B, 2).

        Only the P gathered positions reach the vocabulary projection: at sequence 128 with
        20 predictions that is 6x less work than scoring every position. Packed rows
        (`instance_ids`, `position_ids` (B, T), see `BertModel`) give each instance's [CLS]
        position in `instance_starts` (B, N): NSP logits are then (B, N, 2), one per instance;
        `max_instances` (static) is N, the slots a fused kernel gives a row's instances.
        With `masked_lm_weights` (B, P), a CPU scores only the slots that count
        (`slots_in_use`: the others' logits are 0 beyond the size it scores).
        """
        sequence_output, pooled = self.bert(input_ids, segment_ids, input_mask, train,
                                            instance_ids, position_ids, max_instances)
        gathered = jnp.take_along_axis(
            sequence_output, masked_lm_positions[..., None], axis=1)  # (B, P, H)
        mlm_logits = self.mlm_head(gathered, self.bert.word_table(), masked_lm_weights)
        if instance_starts is not None:
            cls_states = jnp.take_along_axis(
                sequence_output, instance_starts[..., None], axis=1)  # (B, N, H)
            pooled = self.bert.pool(cls_states)
        nsp_logits = self.nsp_head(pooled)
        return mlm_logits, nsp_logits
