"""The model config: presets, validation, and the parameter count of the published sizes."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax.linen import meta
from tolerances import ENCODER_STEPS, assert_close

from bert_jax.models.config import BertConfig
from bert_jax.models.presets import PRESET_NAMES, preset
from bert_jax.errors import UserError
from bert_jax.models.bert import BertForPreTraining, BertModel


@pytest.mark.parametrize("name", [name for name in PRESET_NAMES
                                  if isinstance(preset(name), BertConfig)])
def test_presets_have_four_times_hidden_feed_forward(name):
    config = preset(name)
    assert config.mlp_dim == 4 * config.hidden_dim
    assert config.hidden_dim % config.num_heads == 0


@pytest.mark.parametrize("name", ["modernbert-base", "modernbert-large"])
def test_modernbert_presets_count_the_parameters_transformers_builds(name):
    """ModernBERT-base is 149M and -large 395M with their 50,368-token vocabulary: the
    count of transformers' ModernBertModel at the paper's sizes, from shapes alone."""
    transformers = pytest.importorskip("transformers")
    from bert_jax.models.families import family_of

    config = preset(name)
    reference = transformers.ModernBertConfig(
        vocab_size=config.vocab_size, hidden_size=config.hidden_dim,
        intermediate_size=config.mlp_dim, num_hidden_layers=config.num_layers,
        num_attention_heads=config.num_heads)
    with __import__("torch").device("meta"):
        expected = transformers.ModernBertModel(reference).num_parameters()
    ids = jax.ShapeDtypeStruct((1, 8), jnp.int32)
    shapes = jax.eval_shape(family_of(config).encoder(config).init, jax.random.key(0),
                            ids, ids, ids)
    ours = sum(leaf.size for leaf in jax.tree.leaves(meta.unbox(shapes["params"])))
    assert ours == expected
    assert round(ours / 1e6) == {"modernbert-base": 149, "modernbert-large": 395}[name]


@pytest.mark.parametrize("name, expected_millions", [("base", 109.48), ("large", 335.14)])
def test_encoder_parameter_counts_match_the_paper(name, expected_millions):
    """BERT-Base is 110M and BERT-Large 340M (bert-base-uncased's BertModel: 109,482,240)."""
    config = preset(name)
    ids = jax.ShapeDtypeStruct((1, 8), jnp.int32)
    shapes = jax.eval_shape(
        lambda x: BertModel(config).init(jax.random.key(0), x, x, x), ids)
    count = sum(np.prod(x.shape) for x in jax.tree.leaves(meta.unbox(shapes)))
    assert count / 1e6 == pytest.approx(expected_millions, abs=0.01)  # given to 0.01M


def test_unknown_key_is_named():
    with pytest.raises(UserError, match="hidden_size"):
        BertConfig.from_dict({"hidden_size": 768})
    with pytest.raises(UserError, match="unknown model preset 'huge'"):
        preset("huge")
    with pytest.raises(UserError, match="multiple of"):
        preset("tiny", num_heads=3)


def test_padding_tokens_do_not_change_real_token_outputs():
    """Masking must hide padded keys: appending padding leaves the real positions unchanged."""
    config = preset("tiny", vocab_size=64)
    model = BertForPreTraining(config)
    rng = np.random.default_rng(0)
    ids = rng.integers(5, 64, (2, 10)).astype(np.int32)
    segments = np.zeros_like(ids)
    mask = np.ones_like(ids)
    positions = np.array([[1, 3], [2, 9]], np.int32)
    params = model.init(jax.random.key(0), ids, segments, mask, positions)
    short = model.apply(params, ids, segments, mask, positions)
    padded_ids = np.concatenate([ids, np.zeros((2, 6), np.int32)], axis=1)
    padded_mask = np.concatenate([mask, np.zeros((2, 6), np.int32)], axis=1)
    padded = model.apply(params, padded_ids, np.zeros_like(padded_ids), padded_mask, positions)
    for a, b in zip(short, padded):
        # Masked keys add exact zeros to each softmax; 16 positions instead of 10 may only
        # block the same float32 sums otherwise (tolerances.ENCODER_STEPS).
        assert_close(a, b, ENCODER_STEPS)
