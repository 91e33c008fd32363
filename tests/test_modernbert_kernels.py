"""ModernBERT's sliding window on each platform's attention kernel, read on a CPU.

XLA's attention takes the window in bands on a CPU or GPU (banded_attention.py; its
`local_window_size` elsewhere), against JAX's own windowed call here. Here too: splash's
`LocalMask` in Pallas's interpret mode against the reference core, on padded and packed
rows; what cuDNN is handed for a sliding layer (JAX's cuDNN window is left-sided only, so
the two-sided band goes in as a mask, which JAX turns into a bias), read through a fake as
tests/test_cudnn_arguments.py reads the segment arguments; and which kernel `auto` takes for
a windowed layer.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax._src.cudnn import fused_attention_stablehlo

from bert_jax.models.config import ModernBertConfig, Precision
from bert_jax.models.families import family_of
from bert_jax.models.layers import attention, attention_kernels
from bert_jax.models.layers.visibility import visible_keys, within_window

XLA_ATTENTION = jax.nn.dot_product_attention  # the real one, before the fixture replaces it
WINDOW = 16


def _inputs():
    rng = np.random.default_rng(0)
    shape = (2, 128, 2, 64)  # splash works on whole 128-token blocks
    query, key, value = (jnp.asarray(rng.standard_normal(shape) / 4, jnp.float32)
                         for _ in range(3))
    ids = np.zeros(shape[:2], np.int32)
    ids[0, :100] = 1  # one instance, then padding
    ids[1, :40], ids[1, 40:90], ids[1, 90:120] = 1, 2, 3  # three packed instances, padding
    return query, key, value, jnp.asarray(ids)


def test_splash_local_mask_equals_the_windowed_reference_on_real_tokens():
    query, key, value, ids = _inputs()
    reference = np.asarray(attention.attention(
        query, key, value, ids, 0.0, None, Precision(attention="reference"), window=WINDOW))
    splash = np.asarray(attention_kernels._splash_rows(query, key, value, ids, interpret=True,
                                                       window=WINDOW))
    real = np.asarray(ids) > 0
    # One softmax over <= 33 keys of size ~0.25 and a weighted sum, in float32 both ways
    # but blocked differently: a few roundings of values ~0.5, well under 1e-6.
    np.testing.assert_allclose(splash[real], reference[real], atol=1e-6)
    whole = np.asarray(attention.attention(query, key, value, ids, 0.0, None,
                                           Precision(attention="reference")))
    assert np.abs(whole[real] - reference[real]).max() > 1e-2  # the window mattered


@pytest.mark.parametrize("platform, instances, window, expected", [
    ("tpu", 1, WINDOW, "splash"),  # LocalMask
    ("tpu", 3, WINDOW, "splash"),
    ("cuda", 1, None, "cudnn"),  # a global layer of unpacked rows: measured fastest
    ("cuda", 1, WINDOW, "xla"),  # a sliding one: cuDNN's window is one-sided (module doc)
    ("cuda", 3, WINDOW, "xla"),
    ("cpu", 1, WINDOW, "reference"),
])
def test_auto_takes_a_window_kernel_where_one_applies(platform, instances, window, expected):
    assert attention_kernels.choose("auto", platform, 0.0, 128, "bfloat16", instances,
                                    window=window) == expected


@pytest.fixture
def cudnn_calls(monkeypatch):
    """Both cuDNN entries replaced by a fake that records its arguments and computes what
    they mean (per-row lengths, and a mask if given) with XLA's attention."""
    calls = []

    def as_cudnn_would(query, key, value, lengths, mask):
        positions = jnp.arange(query.shape[1])
        visible = (positions[None, None, None, :] < lengths[:, None, None, None])  # (B,1,1,T)
        if mask is not None:
            visible = visible & mask
        return XLA_ATTENTION(query, key, value, mask=visible, scale=1.0, implementation="xla")

    def public(query, key, value, *args, implementation=None, **options):
        if implementation != "cudnn":
            return XLA_ATTENTION(query, key, value, *args, implementation=implementation,
                                 **options)
        calls.append(options)
        return as_cudnn_would(query, key, value, options["query_seq_lengths"],
                              options.get("mask"))

    monkeypatch.setattr(jax.nn, "dot_product_attention", public)
    monkeypatch.setattr(fused_attention_stablehlo, "dot_product_attention",
                        lambda *args, **options: pytest.fail("no segments on unpacked rows"))
    monkeypatch.setattr(attention, "traced_platform", lambda: "gpu")
    return calls


def test_cudnn_is_handed_each_sliding_layers_band_as_a_mask(cudnn_calls):
    config = ModernBertConfig(vocab_size=64, hidden_dim=32, num_layers=4, num_heads=2,
                              mlp_dim=48, local_attention=8, max_positions=64)
    bf16 = Precision(dtype="bfloat16")
    ids = np.tile(np.arange(3, 27, dtype=np.int32), (2, 1))  # (2, 24)
    mask = np.ones_like(ids)
    mask[1, 15:] = 0
    encoder = family_of(config).encoder(config, dataclasses.replace(bf16, attention="cudnn"))
    params = jax.jit(encoder.init)(jax.random.PRNGKey(0), ids, ids, mask)
    cudnn_calls.clear()  # the init traced them too
    outputs, _ = encoder.apply(params, ids, ids, mask)
    assert len(cudnn_calls) == config.num_layers
    for layer, options in enumerate(cudnn_calls):
        np.testing.assert_array_equal(options["query_seq_lengths"], [24, 15])
        if config.is_global(layer):
            assert options.get("mask") is None
        else:
            np.testing.assert_array_equal(options["mask"], within_window(24, config.window))
    reference = family_of(config).encoder(config, dataclasses.replace(bf16, attention="reference"))
    expected, _ = reference.apply(params, ids, ids, mask)
    real = mask[..., None] > 0
    # bf16 activations (8 bits of mantissa) through 4 layers: ~1e-2 of values ~1-4.
    np.testing.assert_allclose(np.where(real, np.asarray(outputs, np.float32), 0),
                               np.where(real, np.asarray(expected, np.float32), 0), atol=0.05)


def _scores_shapes(function, *args) -> set:
    """The shapes of every value `function` traces whose last two dimensions are T x T."""
    length = args[0].shape[1]
    shapes = set()
    for equation in jax.make_jaxpr(function)(*args).jaxpr.eqns:
        for variable in equation.outvars:
            shape = getattr(variable.aval, "shape", ())
            if shape[-2:] == (length, length):
                shapes.add(shape)
    return shapes


@pytest.mark.parametrize("key_heads", [2, 1])  # as many as the queries; grouped (UltraBERT)
def test_xla_attention_runs_a_sliding_layer_in_bands_on_a_gpu_when_asked(monkeypatch,
                                                                          key_heads):
    """On a GPU with precision.gpu_attention_bands, XLA's attention scores each block of
    queries against the keys its window reaches, not T x T; values and gradients at real
    tokens equal JAX's own windowed call. Without the opt-in, and on a TPU, the full form.

    Bound: both forms add the same non-zero terms (a hidden key's weight is exactly 0) in other
    groupings: a softmax over <= 33 keys of inputs ~0.25 and sums of values ~0.25, a few
    float32 roundings (6e-8 each) of numbers below 1; 1e-6 for values and 1e-5 for gradients
    (sums over up to 33 queries) leave a tenfold margin."""
    query, key, value, ids = _inputs()
    key, value = key[:, :, :key_heads], value[:, :, :key_heads]
    real = (np.asarray(ids) > 0)[..., None, None]

    def windowed(query, key, value):  # JAX's own window: the full T x T scores, masked
        return XLA_ATTENTION(query, key, value, mask=visible_keys(ids), scale=1.0,
                             local_window_size=(WINDOW, WINDOW), implementation="xla")

    def xla_attention(bands: bool):  # a new function each time: jax caches traces by function
        precision = Precision(attention="xla", gpu_attention_bands=bands)
        return lambda query, key, value: attention.attention(
            query, key, value, ids, 0.0, None, precision, window=WINDOW)

    def loss(core):
        return lambda *x: jnp.sum(jnp.where(real, jnp.sin(core(*x)), 0.0))

    monkeypatch.setattr(attention, "traced_platform", lambda: "gpu")
    banded = xla_attention(bands=True)
    assert _scores_shapes(banded, query, key, value) == set()
    assert _scores_shapes(windowed, query, key, value)  # the full form holds T x T scores
    np.testing.assert_allclose(np.where(real, banded(query, key, value), 0),
                               np.where(real, windowed(query, key, value), 0), atol=1e-6)
    expected = jax.grad(loss(windowed), argnums=(0, 1, 2))(query, key, value)
    for got, want in zip(jax.grad(loss(banded), argnums=(0, 1, 2))(query, key, value),
                         expected):
        np.testing.assert_allclose(got, want, atol=1e-5)
    assert _scores_shapes(xla_attention(bands=False), query, key, value)  # the default
    monkeypatch.setattr(attention, "traced_platform", lambda: "tpu")
    # No bands where splash takes windows.
    assert _scores_shapes(xla_attention(bands=True), query, key, value)


def test_the_window_never_reaches_into_another_instance():
    ids = jnp.asarray([[1, 1, 1, 2, 2, 2, 2, 0]], jnp.int32)
    visible = np.asarray(visible_keys(ids, window=2))[0, 0]
    # Token 3 (first of instance 2) sees tokens 3..5 only: not 1 or 2, though within 2.
    np.testing.assert_array_equal(visible[3], [0, 0, 0, 1, 1, 1, 0, 0])
    # A padding query sees the real keys within its window, as the reference rule has it.
    np.testing.assert_array_equal(visible[7], [0, 0, 0, 0, 0, 1, 1, 0])
