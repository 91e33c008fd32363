"""The CPU's chunked attention core: the same function as the whole-batch core, row for row.

`bert_jax.models.layers.attention` runs long windows through the core a few rows at a time with the
backward pass recomputing each chunk. These tests pin that it computes what the plain core
computes (values and gradients, with padding), that dropout gives every chunk its own masks
and the backward pass the same masks as the forward, and that under a batch-sharded mesh
each device loops over its own rows.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tolerances import ENCODER_STEPS, assert_close
from aot_helpers import tpu_abstract_mesh

from bert_jax import sharding
from bert_jax.models.layers.attention import (_core, attention, attention_probabilities, chunk_count,
                                      traced_platform, visible_keys)
from bert_jax.models.config import Precision
from bert_jax.models.presets import preset
from bert_jax.errors import UserError
from bert_jax.models.bert import BertModel

WHOLE = Precision(attention_chunk_rows=0)


# Chunked and whole attention do the same float32 arithmetic per row, batched otherwise: a
# context value is a softmax-weighted sum over 24 keys of scores that sum 8 products, and
# XLA may block either sum per shape (the backward pass sums the same terms again): 2 x
# (24 + 8) roundings of the largest term on each side.
CHUNK_STEPS = 4 * (24 + 8)


def _inputs(batch=8, seq_len=24, heads=2, head_dim=8, seed=0):
    rng = np.random.default_rng(seed)
    query, key, value = (jnp.asarray(rng.standard_normal((batch, seq_len, heads, head_dim)),
                                     jnp.float32) for _ in range(3))
    lengths = rng.integers(seq_len // 2, seq_len + 1, batch)  # some rows padded
    instance_ids = jnp.asarray(np.arange(seq_len)[None] < lengths[:, None], jnp.int32)
    return query, key, value, instance_ids


@pytest.mark.parametrize("batch, seq_len, rows, backend, expected", [
    (32, 256, -1, "cpu", 16),  # automatic: 2 rows per chunk
    (32, 160, -1, "cpu", 16),
    (32, 128, -1, "cpu", 1),  # short windows: whole
    (32, 256, -1, "gpu", 1),  # other backends: whole
    (32, 256, 0, "cpu", 1),  # off
    (32, 256, 8, "gpu", 4),  # asked for: on any backend
    (30, 256, 4, "cpu", 6),  # 7 chunks of 4 would not divide 30 rows: 6 of 5
    (1, 256, -1, "cpu", 1),
])
def test_chunk_count(batch, seq_len, rows, backend, expected):
    assert chunk_count(batch, seq_len, rows, backend) == expected


def test_the_platform_is_the_meshs_so_a_tpu_aot_check_on_a_cpu_host_traces_the_tpu_form():
    cpu_mesh = sharding.make_mesh(devices=jax.devices()[:1]).abstract_mesh
    assert traced_platform() == jax.default_backend() == "cpu"  # no mesh
    with jax.sharding.use_abstract_mesh(tpu_abstract_mesh()):
        assert traced_platform() == "tpu"
        assert chunk_count(32, 512, -1, traced_platform()) == 1
    with jax.sharding.use_abstract_mesh(cpu_mesh):
        assert traced_platform() == "cpu"


def test_precision_rejects_a_negative_row_count():
    with pytest.raises(UserError, match="attention_chunk_rows"):
        Precision(attention_chunk_rows=-2)


def test_instance_ids_hide_other_instances_and_a_padding_query_sees_every_real_key():
    visible = np.asarray(visible_keys(jnp.array([[1, 1, 2, 2, 3, 0]], jnp.int32)))[0, 0]
    expected = np.array([[1, 1, 0, 0, 0, 0],
                         [1, 1, 0, 0, 0, 0],
                         [0, 0, 1, 1, 0, 0],
                         [0, 0, 1, 1, 0, 0],
                         [0, 0, 0, 0, 1, 0],
                         [1, 1, 1, 1, 1, 0]], bool)  # the padding query: every real key
    np.testing.assert_array_equal(visible, expected)


def test_an_unpacked_rows_ids_give_the_key_padding_bias_bit_for_bit():
    query, key, _, input_mask = _inputs()
    bias = jnp.where(input_mask[:, None, None, :] > 0, 0.0, jnp.finfo(jnp.float32).min)
    scores = jnp.einsum("bqhd,bkhd->bhqk", query, key)
    np.testing.assert_array_equal(attention_probabilities(query, key, input_mask),
                                  jax.nn.softmax(scores + bias, axis=-1))


@pytest.mark.parametrize("rows", [1, 2, 3])
def test_chunks_equal_the_whole_batch_values_and_gradients(rows):
    inputs = _inputs(batch=6)
    chunked = Precision(attention_chunk_rows=rows)

    def loss(precision, query, key, value):
        context = attention(query, key, value, inputs[3], 0.0, None, precision)
        return jnp.sum(jnp.sin(context))  # any non-linear read-out

    assert_close(attention(*inputs, 0.0, None, chunked), attention(*inputs, 0.0, None, WHOLE),
                 CHUNK_STEPS)
    whole_grads = jax.grad(lambda *x: loss(WHOLE, *x), argnums=(0, 1, 2))(*inputs[:3])
    chunk_grads = jax.grad(lambda *x: loss(chunked, *x), argnums=(0, 1, 2))(*inputs[:3])
    for whole, chunk in zip(whole_grads, chunk_grads):
        assert_close(chunk, whole, CHUNK_STEPS)


def test_chunks_carry_packed_rows_instance_ids():
    query, key, value, input_mask = _inputs(batch=6, seq_len=24)
    # Two instances per row (the second from token 9 on), padding kept.
    instance_ids = input_mask * (1 + (jnp.arange(24)[None] >= 9)).astype(jnp.int32)
    chunked = attention(query, key, value, instance_ids, 0.0, None,
                        Precision(attention_chunk_rows=2))
    whole = attention(query, key, value, instance_ids, 0.0, None, WHOLE)
    assert_close(chunked, whole, CHUNK_STEPS)
    # The first instance's context does not depend on the second's keys and values.
    moved = attention(query, key.at[:, 9:].add(1.0), value.at[:, 9:].add(1.0), instance_ids,
                      0.0, None, WHOLE)
    np.testing.assert_array_equal(moved[:, :9], whole[:, :9])


def test_dropout_masks_are_per_chunk_and_replayed_in_the_backward_pass():
    query, key, value, instance_ids = _inputs(batch=6)
    dropout_key = jax.random.PRNGKey(7)
    chunked = Precision(attention_chunk_rows=2)  # 3 chunks: rows (0, 3), (1, 4), (2, 5)

    def reference(query, key, value):
        """Each chunk's rows through the plain core with the chunk's own key."""
        context = jnp.zeros_like(query)
        for index in range(3):
            rows = np.arange(index, 6, 3)
            chunk_key = jax.random.fold_in(dropout_key, index)
            context = context.at[rows].set(
                _core(query[rows], key[rows], value[rows], instance_ids[rows], 0.5, chunk_key,
                      "float32"))
        return context

    chunked_attention = lambda q, k, v: attention(q, k, v, instance_ids, 0.5, dropout_key, chunked)  # noqa: E731
    assert_close(chunked_attention(query, key, value), reference(query, key, value),
                 CHUNK_STEPS)
    grads = jax.grad(lambda *x: jnp.sum(jnp.sin(chunked_attention(*x))), argnums=(0, 1, 2))
    expected = jax.grad(lambda *x: jnp.sum(jnp.sin(reference(*x))), argnums=(0, 1, 2))
    for got, want in zip(grads(query, key, value), expected(query, key, value)):
        assert_close(got, want, CHUNK_STEPS)

    # Identical rows in different chunks are dropped differently.
    same = tuple(jnp.broadcast_to(x[:1], x.shape) for x in (query, key, value))
    context = np.asarray(attention(*same, instance_ids[:1].repeat(6, 0), 0.5, dropout_key,
                                   chunked))
    assert not np.allclose(context[0], context[1])  # dropout zeroes values: apart by O(1)


def test_each_device_loops_over_its_own_rows_under_a_batch_sharded_mesh():
    mesh = sharding.make_mesh(devices=jax.devices()[:8])
    inputs = _inputs(batch=16)  # 2 rows per device
    batch_sharded = tuple(sharding.batch_sharding(mesh, x.ndim) for x in inputs)
    chunked = Precision(attention_chunk_rows=1)

    def run(precision):
        @jax.jit
        def apply(*tensors):
            with sharding.activation_sharding(mesh):
                assert chunk_count(16, 24, 1, "cpu") == 2  # the mesh's 8 shards are seen
                return attention(*tensors, 0.0, None, precision)
        return apply(*jax.device_put(inputs, batch_sharded))

    context = run(chunked)
    assert_close(context, run(WHOLE), CHUNK_STEPS)
    assert context.sharding.is_equivalent_to(batch_sharded[0], context.ndim)


def test_the_model_is_unchanged_by_automatic_chunking():
    config = dataclasses.replace(preset("tiny", vocab_size=100), max_positions=192)
    rng = np.random.default_rng(1)
    input_ids = rng.integers(5, 100, (4, 192)).astype(np.int32)
    input_mask = (np.arange(192)[None] < np.array([[192], [170], [100], [161]])).astype(np.int32)
    segment_ids = np.zeros_like(input_ids)
    automatic = BertModel(config)  # 192 tokens on a CPU: chunks of 2 rows
    params = automatic.init(jax.random.PRNGKey(0), input_ids, segment_ids, input_mask)
    whole = BertModel(config, WHOLE)
    sequence, _ = automatic.apply(params, input_ids, segment_ids, input_mask)
    expected, _ = whole.apply(params, input_ids, segment_ids, input_mask)
    assert_close(sequence, expected, ENCODER_STEPS)  # the whole model, chunked or not
    # Asking for the attention maps takes the plain path and sows them; outputs agree.
    (with_maps, _), state = automatic.apply(params, input_ids, segment_ids, input_mask,
                                            mutable=["intermediates"])
    assert_close(with_maps, expected, ENCODER_STEPS)
    maps = state["intermediates"]["layer_0"]["attention"]["attention_probabilities"][0]
    assert maps.shape == (4, config.num_heads, 192, 192)
