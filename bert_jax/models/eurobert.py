"""EuroBERT (Boizard et al., 2025): a Llama layer stack used bidirectionally, as transformers'
`EuroBertModel` computes it.

Modules only, as `bert.py` and `modernbert.py`: the attention core, rotary positions and dense
layers come from `layers/`, and what differs is here. Against ModernBERT:
  - token embeddings alone (no norm, no dropout); positions enter as rotary angles on the
    queries and keys, one theta for every layer;
  - pre-RMSNorm in every layer (layer 0 included): x + Attention(RMS(x)), x + MLP(RMS(x)),
    a final RMSNorm after the last layer;
  - grouped-query attention: `num_kv_heads` key/value heads, each read by num_heads /
    num_kv_heads query heads, never copied per query head (layers/attention.py groups the
    queries; XLA's and cuDNN's kernels take the groups as they are);
  - SwiGLU MLP: silu(gate(x)) x up(x), then down; every layer global, no biases by default.
UltraBERT (`config.variant` "ultrabert") is these modules with the layers `config.layer_types`
names sliding: keys within `sliding_window` tokens on either side (the ModernBERT family's
window, layers/visibility.py) and their own rotary theta.
Packed rows work as for the other families: instance ids keep instances apart, and position
ids restart at each instance.

Hidden states are sown as transformers returns them: 0 the embedding output, 1..N-1 the
layers' outputs, N the last layer's output after the final norm (the sequence output).
"""

import functools
import math
import zlib

import flax.linen as nn
import jax
import jax.numpy as jnp

from bert_jax.models.config import EuroBertConfig, Precision
from bert_jax.models.layers.attention import attend, attention, attention_probabilities
from bert_jax.models.layers.dense import (FLOAT32, Dense, initializer, joined_projections,
                                          joins_projections, ones)
from bert_jax.models.layers.layer_scan import (block_params, dropout_key, remat_layer,
                                               scan_blocks, scanned)
from bert_jax.models.layers.rotary import rotary_angles, rotate

Array = jax.Array


def rms_norm(config: EuroBertConfig, precision: Precision, name: str | None = None):
    """RMSNorm (transformers' LlamaRMSNorm): statistics in float32, output in the compute
    dtype, a scale and no bias."""
    return nn.RMSNorm(epsilon=config.layer_norm_eps, dtype=precision.dtype,
                      param_dtype=precision.param_dtype, scale_init=ones("embed"), name=name)


class EuroBertAttention(nn.Module):
    """Query, key and value projections (keys and values with `num_kv_heads` heads), rotary
    queries and keys, attention within each instance (and the window in a sliding layer),
    the output projection."""
    config: EuroBertConfig
    layer_index: int = 0
    precision: Precision = FLOAT32

    @nn.compact
    def __call__(self, x: Array, instance_ids: Array, positions: Array, train: bool,
                 max_instances: int | None = None) -> Array:
        config, precision = self.config, self.precision
        dense = functools.partial(Dense, config, precision=precision,
                                  use_bias=config.attention_bias)
        # 1 / sqrt(head_dim) on the queries' kernel: rotation is linear, so scaling before it
        # is scaling after it, without a pass over the (B, T, nh, hd) queries.
        query = dense((config.num_heads, config.head_dim), ("embed",), ("heads", "kv"),
                      output_scale=1.0 / math.sqrt(config.head_dim), name="query")
        kv_shape = (config.num_kv_heads, config.head_dim)
        key = dense(kv_shape, ("embed",), ("heads", "kv"), name="key")
        value = dense(kv_shape, ("embed",), ("heads", "kv"), name="value")
        if not joins_projections(precision):
            query, key, value = query(x), key(x), value(x)  # (B, T, nh or nkv, hd)
        elif config.num_kv_heads == config.num_heads:
            query, key, value = joined_projections(x, [query, key, value])
        else:  # grouped queries: the keys and values alike, the queries wider
            query, (key, value) = query(x), joined_projections(x, [key, value])
        cos, sin = rotary_angles(positions, config.head_dim,
                                 config.layer_rope_theta(self.layer_index))
        window = config.layer_window(self.layer_index)
        query, key = rotate(query, cos, sin), rotate(key, cos, sin)
        rate = config.attention_dropout_rate if train else 0.0
        dropout_key = self.make_rng("dropout") if rate else None
        if self.is_mutable_collection("intermediates"):  # attention maps asked for: keep them
            probabilities = attention_probabilities(query, key, instance_ids, window)
            self.sow("intermediates", "attention_probabilities", probabilities)
            context = attend(probabilities, value, rate, dropout_key, precision.dtype)
        else:
            context = attention(query, key, value, instance_ids, rate, dropout_key, precision,
                                max_instances, zlib.crc32("/".join(self.path).encode()), window)
        return dense((config.hidden_dim,), ("heads", "kv"), ("embed",), name="output")(context)


class SwiGluMlp(nn.Module):
    """down(silu(gate(x)) x up(x)): Llama's MLP, `mlp_dim` wide."""
    config: EuroBertConfig
    precision: Precision = FLOAT32

    @nn.compact
    def __call__(self, x: Array) -> Array:
        config, precision = self.config, self.precision
        dense = functools.partial(Dense, config, precision=precision, use_bias=config.mlp_bias)
        up = dense((config.mlp_dim,), ("embed",), ("mlp",), name="up")
        if joins_projections(precision):
            gate, up = joined_projections(
                x, [dense((config.mlp_dim,), ("embed",), ("mlp",), name="gate"), up])
            gate = jax.nn.silu(gate)
        else:
            gate = dense((config.mlp_dim,), ("embed",), ("mlp",), activation=jax.nn.silu,
                         name="gate")(x)
            up = up(x)
        return dense((config.hidden_dim,), ("mlp",), ("embed",), name="down")(gate * up)


class EuroBertLayer(nn.Module):
    """Pre-RMSNorm: x + Attention(RMS(x)), then x + SwiGluMlp(RMS(x))."""
    config: EuroBertConfig
    layer_index: int = 0
    precision: Precision = FLOAT32

    @nn.compact
    def __call__(self, x: Array, instance_ids: Array, positions: Array, train: bool,
                 max_instances: int | None = None) -> Array:
        config, precision = self.config, self.precision
        x = x + EuroBertAttention(config, self.layer_index, precision, name="attention")(
            rms_norm(config, precision, "attention_norm")(x), instance_ids, positions, train,
            max_instances)
        x = x + SwiGluMlp(config, precision, name="mlp")(
            rms_norm(config, precision, "mlp_norm")(x))
        return nn.with_logical_constraint(x, ("batch", "seq", "embed"))


class EuroBertModel(nn.Module):
    """The encoder: returns (sequence_output (B, T, H) after the final norm, None).

    EuroBERT has no pooler (its classifier pools in its head), so the second output of
    `bert.BertModel`'s interface is always None; `with_pooler` is accepted for that
    interface and must be False or left at its default.
    """
    config: EuroBertConfig
    precision: Precision = FLOAT32
    with_pooler: bool = False

    def setup(self):
        config, precision = self.config, self.precision
        # Looked up in the parameters' float32, as BERT's (its scatter-add gradient stays fp32).
        self.token_embeddings = nn.Embed(
            config.vocab_size, config.hidden_dim, dtype=precision.param_dtype,
            param_dtype=precision.param_dtype,
            embedding_init=initializer(config.initializer_std, "vocab", "embed"))
        layer = remat_layer(EuroBertLayer, precision, static_argnums=(4, 5))
        self.layers = [layer(config, index, precision, name=f"layer_{index}")
                       for index in range(config.num_layers)]
        self.final_norm = rms_norm(config, precision)

    def __call__(self, input_ids: Array, segment_ids: Array, input_mask: Array,
                 train: bool = False, instance_ids: Array | None = None,
                 position_ids: Array | None = None, max_instances: int | None = None
                 ) -> tuple[Array, None]:
        """As `BertModel`: `segment_ids` are ignored (EuroBERT has none); `instance_ids`,
        `position_ids` (B, T) and `max_instances` describe packed rows."""
        del segment_ids
        if instance_ids is None:
            instance_ids, max_instances = input_mask, 1
        instance_ids = instance_ids.astype(jnp.int32)
        positions = (jnp.arange(input_ids.shape[1])[None] if position_ids is None
                     else position_ids)  # (B or 1, T)
        x = self.token_embeddings(input_ids).astype(self.precision.dtype)
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
        """The layers as `config.scan_plan` says: blocks of one period of the layer types
        (EuroBERT: one layer; UltraBERT: two sliding layers and a global one) scanned, the
        remainder after the last whole block unrolled."""
        plan = self.config.scan_plan
        block = [EuroBertLayer(self.config, plan.first + position, self.precision, parent=None)
                 for position in range(plan.period)]
        x = scan_blocks(block, block_params(self, plan), x, arguments,
                        dropout_key(self, train), self.precision)
        for layer in self.layers[plan.first + plan.blocks * plan.period:]:
            x = layer(x, *arguments)
        return x

    def word_table(self) -> Array:
        """The token embeddings (vocab, H): the decoder when `tie_word_embeddings`."""
        return self.token_embeddings.embedding
