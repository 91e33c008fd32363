"""The fused attention paths (bert_jax/models/layers/attention_kernels.py) against the reference core.

On a CPU: JAX's public `dot_product_attention(implementation='xla')` and the splash kernel in
Pallas's interpret mode, on padded and packed rows. cuDNN needs a GPU: its test runs only
where one is at hand (tests/test_cudnn_arguments.py reads, on a CPU, what cuDNN is handed).
That splash compiles for real TPUs is tests/test_aot.py's.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tolerances import assert_close

from bert_jax.models.config import Precision
from bert_jax.errors import UserError
from bert_jax.models.layers import attention, attention_kernels

BATCH, SEQ_LEN, HEADS, HEAD_DIM = 2, 128, 2, 64
# Two implementations of one attention in float32: a context value sums SEQ_LEN weighted
# values, each weight from a score that sums HEAD_DIM products, in the order each kernel
# blocks them (the gradients sum the same terms back): SEQ_LEN + HEAD_DIM roundings of the
# largest term, on each side.
KERNEL_STEPS = 2 * (SEQ_LEN + HEAD_DIM)


def _inputs(dtype=jnp.float32):
    rng = np.random.default_rng(0)
    query, key, value = (jnp.asarray(rng.standard_normal((BATCH, SEQ_LEN, HEADS, HEAD_DIM)) / 4,
                                     dtype) for _ in range(3))
    ids = np.zeros((BATCH, SEQ_LEN), np.int32)
    ids[0, :100] = 1  # one instance, then padding
    ids[1, :40], ids[1, 40:90], ids[1, 90:120] = 1, 2, 3  # three packed instances, padding
    return query, key, value, jnp.asarray(ids)


def _context(implementation, query, key, value, ids):
    return attention.attention(query, key, value, ids, 0.0, None,
                               Precision(attention=implementation))


def test_xla_dot_product_attention_equals_the_reference_and_its_gradients():
    query, key, value, ids = _inputs()
    real = (ids > 0)[..., None, None]  # padding rows' outputs differ by design (module doc)

    def loss(implementation, query, key, value):
        context = _context(implementation, query, key, value, ids)
        return jnp.sum(jnp.where(real, context, 0.0) * jnp.cos(context))

    for argnum in (1, 2, 3):
        reference = jax.grad(loss, argnums=argnum)("reference", query, key, value)
        fused = jax.grad(loss, argnums=argnum)("xla", query, key, value)
        assert_close(fused, reference, KERNEL_STEPS)
    assert_close(_context("xla", query, key, value, ids),
                 _context("reference", query, key, value, ids), KERNEL_STEPS)


def test_splash_kernel_equals_the_reference_on_real_tokens():
    query, key, value, ids = _inputs()
    reference = np.asarray(_context("reference", query, key, value, ids))
    splash = np.asarray(attention_kernels._splash_rows(query, key, value, ids, interpret=True))
    real = np.asarray(ids) > 0
    assert_close(splash[real], reference[real], KERNEL_STEPS)
    # A packed instance sees only itself: change instance 2's values, instance 1 stays put.
    moved = value.at[1, 40:90].add(1.0)
    again = np.asarray(attention_kernels._splash_rows(query, key, moved, ids, interpret=True))
    np.testing.assert_array_equal(again[1, :40], splash[1, :40])
    assert np.abs(again[1, 40:90] - splash[1, 40:90]).min() > 0.5


def test_instance_segments_are_cudnns_packed_layout_with_the_slots_asked_for():
    ids = jnp.asarray([[1, 1, 2, 2, 2, 0], [1, 1, 1, 1, 1, 1]], jnp.int32)
    offsets, lengths = attention_kernels.instance_segments(ids, 2)
    np.testing.assert_array_equal(offsets, [[0, 2, -1], [0, -1, -1]])
    np.testing.assert_array_equal(lengths, [[2, 3], [6, -1]])
    offsets, lengths = attention_kernels.instance_segments(ids, 3)
    np.testing.assert_array_equal(offsets, [[0, 2, -1, -1], [0, -1, -1, -1]])
    np.testing.assert_array_equal(lengths, [[2, 3, -1], [6, -1, -1]])


@pytest.mark.parametrize("platform, rate, seq_len, dtype, instances, fused_dropout, expected", [
    ("tpu", 0.0, 128, "bfloat16", 1, False, "splash"),
    ("tpu", 0.0, 128, "bfloat16", 3, False, "splash"),
    ("tpu", 0.1, 128, "bfloat16", 1, False, "reference"),  # splash has no attention dropout
    ("tpu", 0.1, 128, "bfloat16", 1, True, "reference"),  # nor does the opt-in give it one
    ("tpu", 0.0, 100, "bfloat16", 1, False, "reference"),  # not whole 128-token blocks
    ("cuda", 0.0, 100, "bfloat16", 1, False, "cudnn"),  # unpacked: per-row lengths, measured
    ("gpu", 0.0, 512, "bfloat16", 1, False, "cudnn"),
    ("cuda", 0.0, 128, "bfloat16", 3, False, "xla"),  # packed: cuDNN segments unmeasured
    ("cuda", 0.0, 128, "bfloat16", None, False, "xla"),  # instances per row not known
    ("cuda", 0.0, 128, "float32", 1, False, "reference"),  # cuDNN has no float32 kernel
    ("cuda", 0.1, 128, "bfloat16", 1, False, "reference"),  # cuDNN's dropout is opt-in
    ("cuda", 0.1, 128, "bfloat16", 1, True, "cudnn"),
    ("cuda", 0.1, 128, "bfloat16", 3, True, "reference"),
    ("cpu", 0.0, 512, "bfloat16", 1, False, "reference"),
])
def test_auto_takes_the_platforms_kernel_only_where_it_applies(
        platform, rate, seq_len, dtype, instances, fused_dropout, expected):
    assert attention_kernels.choose("auto", platform, rate, seq_len, dtype, instances,
                                    fused_dropout) == expected
    assert attention_kernels.choose("reference", platform, rate, seq_len, dtype,
                                    instances) == "reference"


def test_a_forced_kernel_with_attention_dropout_is_a_user_error():
    query, key, value, ids = _inputs()
    with pytest.raises(UserError, match="attention_dropout_rate"):
        attention.attention(query, key, value, ids, 0.1, jax.random.PRNGKey(0),
                            Precision(attention="xla"))
    with pytest.raises(UserError, match="precision.attention"):
        Precision(attention="flash")


@pytest.mark.skipif(jax.default_backend() != "gpu", reason="cuDNN attention needs a GPU")
@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
def test_cudnn_segments_and_lengths_equal_the_reference_on_a_gpu(dtype):
    query, key, value, ids = _inputs(dtype)
    real = np.asarray(ids) > 0
    reference = np.asarray(_context("reference", query, key, value, ids), np.float32)
    # Packed rows: 3 segment slots (row 1 holds three instances).
    packed = np.asarray(attention_kernels.fused_context("cudnn", query, key, value, ids, 3),
                        np.float32)
    # bfloat16 and float16 keep 8 and 11 significant bits: a step of a value near 1 is 2**-7
    # (7.8e-3) in bfloat16; 2e-2 is 2.5 of them, for the sums' roundings in low precision.
    np.testing.assert_allclose(packed[real], reference[real], atol=2e-2)
    # Row 0 is one instance then padding: the per-row lengths of unpacked rows.
    lengths = np.asarray(attention_kernels.fused_context(
        "cudnn", query[:1], key[:1], value[:1], ids[:1], 1), np.float32)
    np.testing.assert_allclose(lengths[0][real[0]], reference[0][real[0]], atol=2e-2)  # same
