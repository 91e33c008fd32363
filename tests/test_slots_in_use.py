"""On a CPU the masked-LM decoder scores only the slots that count (bert_jax/models/layers/
slots_in_use.py): the static product's logits at those slots and its gradients, through a
smaller product that the compiled program does take; the static product on a mesh of
several devices and below SMALLEST_PRODUCT."""

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bert_jax.models.config import Precision
from bert_jax.models.families import family_of
from bert_jax.models.layers import slots_in_use
from bert_jax.models.layers.slots_in_use import bucket_sizes, decoder_logits
from tolerances import ENCODER_STEPS, assert_close

from family_configs import CONFIGS, family_batch

SLOTS, HIDDEN, VOCABULARY = (4, 10), 16, 50


@pytest.fixture
def every_product(monkeypatch):
    """The slots in use scored at any size (the tests' products are tiny)."""
    monkeypatch.setattr(slots_in_use, "SMALLEST_PRODUCT", 0)


def test_a_batch_is_scored_in_sixteenths_of_its_slots():
    # ModernBERT's CPU bench: 616 slots, its padded rows' 340 in use scored as 347.
    assert bucket_sizes(616) == [39, 77, 116, 154, 193, 231, 270, 308, 347, 385, 424, 462,
                                 501, 539, 578, 616]
    assert bucket_sizes(32) == list(range(2, 33, 2))
    assert bucket_sizes(5) == [1, 2, 3, 4, 5]  # fewer slots than buckets: each size once


def _decoder_case(used: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((*SLOTS, HIDDEN)).astype(np.float32)
    table = rng.standard_normal((VOCABULARY, HIDDEN)).astype(np.float32)
    bias = rng.standard_normal(VOCABULARY).astype(np.float32)
    weights = np.zeros(np.prod(SLOTS), np.float32)
    weights[rng.choice(weights.size, used, replace=False)] = rng.uniform(0.5, 1.0, used)
    upstream = rng.standard_normal((*SLOTS, VOCABULARY)).astype(np.float32)
    return x, table, bias, weights.reshape(SLOTS), upstream


@pytest.mark.parametrize("used", [0, 3, 17, 40])
@pytest.mark.parametrize("with_bias", [True, False])
def test_the_slots_in_use_get_the_static_products_logits_and_gradients(every_product, used,
                                                                        with_bias):
    x, table, bias, weights, upstream = _decoder_case(used)
    bias = bias if with_bias else None

    def loss(x, table, bias, skipping):
        logits = decoder_logits(x, table, bias, weights if skipping else None)
        return jnp.sum(logits * upstream * weights[..., None]), logits

    gradients = jax.jit(jax.grad(loss, argnums=(0, 1, 2), has_aux=True), static_argnums=3)
    (skipped, skipped_logits), (static, static_logits) = (
        gradients(x, table, bias, True), gradients(x, table, bias, False))
    in_use = weights != 0
    # A logit is a sum of HIDDEN products, whichever rows the product takes: one rounding a
    # term at most, of the largest |x| |table|.
    logit_scale = np.abs(x).max() * np.abs(table).max() * HIDDEN
    assert_close(np.asarray(skipped_logits)[in_use], np.asarray(static_logits)[in_use],
                 HIDDEN, logit_scale, "logits of the slots in use")
    size = next(size for size in bucket_sizes(in_use.size) if size >= in_use.sum())
    assert np.count_nonzero(np.abs(np.asarray(skipped_logits)).sum(-1)) <= size
    # The table's and the bias's gradients add one term a slot (np.prod(SLOTS) at most),
    # the input's one a word of the vocabulary; a slot out of use gets none.
    scale = np.abs(upstream).max() * max(np.abs(x).max(), np.abs(table).max(), 1.0)
    terms = max(np.prod(SLOTS), VOCABULARY)
    for got, want, name in zip(skipped, static, ("input", "table", "bias")):
        if want is not None:
            assert_close(got, want, terms, scale * terms, f"{name} gradient")
    assert not np.asarray(skipped[0])[~in_use].any()


def test_the_compiled_program_takes_the_smaller_product(every_product):
    x, table, bias, weights, upstream = _decoder_case(9)
    text = jax.jit(jax.value_and_grad(lambda x, table: jnp.sum(
        decoder_logits(x, table, bias, weights) * upstream))).lower(x, table).as_text()
    # One conditional forward, one backward, each with a branch a size.
    assert text.count("stablehlo.case") == 2


def test_small_products_and_meshes_of_several_devices_keep_the_static_product():
    x, table, bias, weights, _ = _decoder_case(9)
    assert "stablehlo.case" not in jax.jit(decoder_logits).lower(
        x, table, bias, weights).as_text()  # 40 slots x 50 words: under SMALLEST_PRODUCT
    wide = VOCABULARY * slots_in_use.SMALLEST_PRODUCT  # any size past the smallest
    assert slots_in_use._skips(np.prod(SLOTS), wide)
    with jax.sharding.use_abstract_mesh(jax.sharding.AbstractMesh((2,), ("data",))):
        assert not slots_in_use._skips(np.prod(SLOTS), wide)  # rows split across devices


TIED = {
    "bert": CONFIGS["bert"],
    "modernbert": CONFIGS["modernbert"],
    "eurobert tied, with a bias": dataclasses.replace(
        CONFIGS["eurobert"], tie_word_embeddings=True, mlp_bias=True),
    "eurobert tied": dataclasses.replace(CONFIGS["eurobert"], tie_word_embeddings=True),
    "ultrabert tied": dataclasses.replace(
        CONFIGS["eurobert"], variant="ultrabert", tie_word_embeddings=True,
        classifier_pooling="cls", layer_types=(), sliding_window=4, prediction_head_size=24),
}


@pytest.mark.parametrize("name", sorted(TIED))
def test_every_tied_decoders_masked_lm_step_is_the_static_ones(every_product, name):
    """A family's masked-LM model given its slots' weights: the same loss and gradients as
    without them, where only 4 of its 12 slots count."""
    config = TIED[name]
    ids, segments, mask = family_batch(2)
    positions = jnp.asarray([[1, 4, 7, 8], [2, 5, 9, 11], [1, 2, 3, 4]], jnp.int32)
    weights = jnp.asarray([[1, 1, 0, 0], [1, 0, 0, 0], [1, 0, 0, 0]], jnp.float32)
    labels = jnp.asarray(np.random.default_rng(3).integers(0, config.vocab_size, (3, 4)))
    model = family_of(config).masked_lm_model(config, Precision())
    params = nn.meta.unbox(model.init(jax.random.PRNGKey(0), ids, segments, mask, positions))

    def loss(params, skipping):
        logits = model.apply(params, ids, segments, mask, positions, True,
                             **({"masked_lm_weights": weights} if skipping else {}))
        log_probabilities = jax.nn.log_softmax(logits)
        picked = jnp.take_along_axis(log_probabilities, labels[..., None], -1)[..., 0]
        return -jnp.sum(picked * weights)

    step = jax.jit(jax.value_and_grad(loss), static_argnums=1)
    assert "stablehlo.case" in step.lower(params, True).as_text()
    (skipped_loss, skipped), (static_loss, static) = step(params, True), step(params, False)
    # The encoder's bound (tolerances.ENCODER_STEPS): the decoder's sums in another order,
    # carried back through the layers, in steps of the largest gradient (a key bias's is 0
    # but for rounding).
    assert_close(skipped_loss, static_loss, ENCODER_STEPS, err_msg="loss")
    scale = max(float(np.abs(leaf).max()) for leaf in jax.tree.leaves(static))
    for (path, got), want in zip(jax.tree_util.tree_leaves_with_path(skipped),
                                 jax.tree.leaves(static)):
        assert_close(got, want, ENCODER_STEPS, scale, err_msg=jax.tree_util.keystr(path))
