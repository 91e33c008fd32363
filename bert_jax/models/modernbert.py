"""ModernBERT (Warner et al., 2024): the pre-LayerNorm encoder with rotary positions, GeGLU and
alternating global and sliding-window attention, as transformers' `ModernBertModel` computes it.

Modules only, as `bert.py`: the layers both families share come from `layers/`, and what
differs is here. Against BERT:
  - no position or segment embeddings: token embeddings, LayerNorm, dropout; positions enter
    as rotary angles on the queries and keys (`layers/rotary.py`), one theta for global
    layers and one for sliding ones;
  - pre-norm: x + Attention(LN(x)), x + MLP(LN(x)), a final LayerNorm after the last layer
    (layer 0 has no attention norm: the embeddings end in one);
  - fused QKV and output projections, GeGLU MLP (`Wi` to twice the width: gelu(value) x gate),
    biases and norm biases off by default;
  - layer i attends to the whole row when i % global_attention_every == 0, else to keys
    within `local_attention / 2` tokens on each side (`layers/visibility.py`).
Packed rows work as for BERT: instance ids keep instances apart, and position ids restart at
each instance, so every instance is rotated as if it were alone.

Hidden states are sown as transformers returns them: 0 the embedding output, 1..N-1 the
layers' outputs, N the last layer's output after the final norm (the sequence output).
"""

import functools
import math
import zlib

import flax.linen as nn
import jax
import jax.numpy as jnp

from bert_jax.models.config import ModernBertConfig, Precision
from bert_jax.models.layers.attention import attend, attention, attention_probabilities
from bert_jax.models.layers.dense import FLOAT32, Dense, gelu, initializer, layer_norm
from bert_jax.models.layers.dropout import Dropout
from bert_jax.models.layers.layer_scan import (block_params, dropout_key, remat_layer,
                                               scan_blocks, scanned)
from bert_jax.models.layers.rotary import rotary_angles, rotate

Array = jax.Array


def output_std(config: ModernBertConfig) -> float:
    """transformers' initial std of the projections back into the residual stream (attention
    and MLP outputs, the prediction head): scaled down with depth."""
    return config.initializer_std / math.sqrt(2.0 * config.num_layers)


def norm(config: ModernBertConfig, precision: Precision, name: str | None = None):
    return layer_norm(config, precision, name=name, use_bias=config.norm_bias)


class ModernBertEmbeddings(nn.Module):
    """Token embeddings, LayerNorm, dropout: no positions, no segments."""
    config: ModernBertConfig
    precision: Precision = FLOAT32

    def setup(self):
        config, precision = self.config, self.precision
        # Looked up in the parameters' float32, as BERT's (its scatter-add gradient stays fp32).
        self.token_embeddings = nn.Embed(
            config.vocab_size, config.hidden_dim, dtype=precision.param_dtype,
            param_dtype=precision.param_dtype,
            embedding_init=initializer(config.initializer_std, "vocab", "embed",
                                       cutoff=config.initializer_cutoff))
        self.norm = norm(config, precision)
        self.dropout = Dropout(config.embedding_dropout_rate)

    def __call__(self, input_ids: Array, train: bool) -> Array:
        x = self.norm(self.token_embeddings(input_ids))
        return self.dropout(x, deterministic=not train)


class ModernBertAttention(nn.Module):
    """Fused QKV, rotary queries and keys, attention within each instance (and within the
    window in a sliding layer), the output projection and its dropout."""
    config: ModernBertConfig
    layer_index: int
    precision: Precision = FLOAT32

    @nn.compact
    def __call__(self, x: Array, instance_ids: Array, positions: Array, train: bool,
                 max_instances: int | None = None) -> Array:
        config, precision = self.config, self.precision
        heads = (config.num_heads, config.head_dim)
        dense = functools.partial(Dense, config, precision=precision,
                                  use_bias=config.attention_bias)
        qkv = dense((3, *heads), ("embed",), (None, "heads", "kv"), name="qkv")(x)  # (B, T, 3, nh, hd)
        query, key, value = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]  # each (B, T, nh, hd)
        cos, sin = rotary_angles(positions, config.head_dim, config.rope_theta(self.layer_index))
        query, key = rotate(query, cos, sin), rotate(key, cos, sin)
        query = query / jnp.sqrt(config.head_dim).astype(query.dtype)
        window = None if config.is_global(self.layer_index) else config.window
        rate = config.attention_dropout_rate if train else 0.0
        dropout_key = self.make_rng("dropout") if rate else None
        if self.is_mutable_collection("intermediates"):  # attention maps asked for: keep them
            probabilities = attention_probabilities(query, key, instance_ids, window)
            self.sow("intermediates", "attention_probabilities", probabilities)
            context = attend(probabilities, value, rate, dropout_key, precision.dtype)
        else:
            context = attention(query, key, value, instance_ids, rate, dropout_key, precision,
                                max_instances, zlib.crc32("/".join(self.path).encode()), window)
        output = dense((config.hidden_dim,), ("heads", "kv"), ("embed",),
                       std=output_std(config), name="output")(context)
        return Dropout(config.attention_dropout_rate)(output, deterministic=not train)


class GatedMlp(nn.Module):
    """GeGLU: Wi projects to (value, gate), each mlp_dim wide; gelu(value) x gate; dropout; Wo.

    The kernel is (embed, 2, mlp) rather than (embed, 2 x mlp), so splitting `mlp` over a
    tensor-parallel axis keeps each device's values beside their gates."""
    config: ModernBertConfig
    precision: Precision = FLOAT32

    @nn.compact
    def __call__(self, x: Array, train: bool) -> Array:
        config, precision = self.config, self.precision
        dense = functools.partial(Dense, config, precision=precision, use_bias=config.mlp_bias)
        projected = dense((2, config.mlp_dim), ("embed",), (None, "mlp"), name="input")(x)
        x = gelu(projected[..., 0, :]) * projected[..., 1, :]  # (B, T, mlp)
        x = Dropout(config.mlp_dropout_rate)(x, deterministic=not train)
        return dense((config.hidden_dim,), ("mlp",), ("embed",), std=output_std(config),
                     name="output")(x)


class ModernBertLayer(nn.Module):
    """Pre-LN: x + Attention(LN(x)) (no LN in layer 0), then x + GatedMlp(LN(x))."""
    config: ModernBertConfig
    layer_index: int
    precision: Precision = FLOAT32

    @nn.compact
    def __call__(self, x: Array, instance_ids: Array, positions: Array, train: bool,
                 max_instances: int | None = None) -> Array:
        config, precision = self.config, self.precision
        normed = x if self.layer_index == 0 else norm(config, precision, "attention_norm")(x)
        x = x + ModernBertAttention(config, self.layer_index, precision, name="attention")(
            normed, instance_ids, positions, train, max_instances)
        x = x + GatedMlp(config, precision, name="mlp")(norm(config, precision, "mlp_norm")(x),
                                                       train)
        return nn.with_logical_constraint(x, ("batch", "seq", "embed"))


class ModernBertModel(nn.Module):
    """The encoder: returns (sequence_output (B, T, H) after the final norm, None).

    The second output is the pooled one of `bert.BertModel`'s interface: ModernBERT has no
    pooler (its classifier pools in its head), so it is always None; `with_pooler` is
    accepted for that interface and must be False or left at its default.
    """
    config: ModernBertConfig
    precision: Precision = FLOAT32
    with_pooler: bool = False

    def setup(self):
        config, precision = self.config, self.precision
        self.embeddings = ModernBertEmbeddings(config, precision)
        layer = remat_layer(ModernBertLayer, precision, static_argnums=(4, 5))
        self.layers = [layer(config, index, precision, name=f"layer_{index}")
                       for index in range(config.num_layers)]
        self.final_norm = norm(config, precision)

    def __call__(self, input_ids: Array, segment_ids: Array, input_mask: Array,
                 train: bool = False, instance_ids: Array | None = None,
                 position_ids: Array | None = None, max_instances: int | None = None
                 ) -> tuple[Array, None]:
        """As `BertModel`: `segment_ids` are ignored (ModernBERT has none); `instance_ids`,
        `position_ids` (B, T) and `max_instances` describe packed rows."""
        del segment_ids
        if instance_ids is None:
            instance_ids, max_instances = input_mask, 1
        instance_ids = instance_ids.astype(jnp.int32)
        positions = (jnp.arange(input_ids.shape[1])[None] if position_ids is None
                     else position_ids)  # (B or 1, T)
        x = self.embeddings(input_ids, train)
        x = nn.with_logical_constraint(x, ("batch", "seq", "embed"))
        arguments = (instance_ids, positions, train, max_instances)
        if scanned(self, self.precision):
            x = self._scanned_layers(x, arguments, train)
        else:
            for layer in self.layers:
                self.sow("intermediates", "hidden_states", x)
                x = layer(x, *arguments)
        x = self.final_norm(x)
        self.sow("intermediates", "hidden_states", x)
        return x, None

    def _scanned_layers(self, x: Array, arguments: tuple, train: bool) -> Array:
        """The layers as `config.scan_plan` says: layer 0 (no attention norm) alone, the blocks
        of one global layer's period scanned, the remainder alone."""
        plan = self.config.scan_plan
        x = self.layers[0](x, *arguments)
        if plan.blocks:
            block = [ModernBertLayer(self.config, plan.first + position, self.precision,
                                     parent=None) for position in range(plan.period)]
            x = scan_blocks(block, block_params(self, plan), x, arguments,
                            dropout_key(self, train), self.precision)
        for layer in self.layers[plan.first + plan.blocks * plan.period:]:
            x = layer(x, *arguments)
        return x

    def word_table(self) -> Array:
        """The token embeddings (vocab, H), which the masked-LM decoder shares (tied)."""
        return self.embeddings.token_embeddings.embedding
