"""Scanned layer stacks (bert_jax/models/layers/layer_scan.py) compute what unrolled ones do.

Scanned and unrolled run the same operations in the same order on the same per-layer
parameters; only the program's shape differs (a loop over one block against N copies), so
XLA may fuse the loop body otherwise than the unrolled layers and round an intermediate
differently. The bound is 4 float32 steps of each compared array's scale: a few roundings
of one layer, where a wrong layer's weights, a skipped layer or a dropped norm move outputs
by a fair part of their scale. Gradients and trained weights are held to steps of the whole
tree's largest magnitude, 16 of them: the embedding table's gradient sums every token's
contribution (72 here), each add rounding, and a leaf that is zero in exact arithmetic (the
keys' bias: softmax ignores a shift) holds only rounding noise, which no relative bound
covers. Measured on this machine: at most 4.4 steps (an embedding row's gradient, EuroBERT).
Dropout is off in these comparisons: scanned blocks draw their masks from one key split per
block, unrolled layers from flax's per-layer streams, so masks differ by design.
"""

import dataclasses
import os

import flax.linen as nn

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tolerances import ENCODER_STEPS, assert_close

from bert_jax.models.config import REMAT_POLICY_NAMES, Precision, preset
from bert_jax.models.families import family_of
from bert_jax.models.layers.layer_scan import REMAT_POLICIES, stack_layers, unstack_layers
from bert_jax.training import checkpointing, trainer
from test_training_support import pretraining, synthetic_factory, tiny_run_config

SCAN_STEPS = 4  # float32 steps of an output's scale (module docstring)
TREE_STEPS = 16  # float32 steps of a gradient or weight tree's largest magnitude
UNROLLED = Precision()
SCANNED = Precision(scan_layers=True)
# Scanned and rematerialised, keeping the matmul outputs: the same numbers again.
SCANNED_REMAT = Precision(scan_layers=True, remat=True, remat_policy="matmul_outputs")
# Every family at a depth that covers its scan: ModernBERT's 5 layers are layer 0 alone,
# one block of layers 1-3 (two sliding, one global) and layer 4 alone.
CONFIGS = {
    "bert": preset("tiny", vocab_size=64, num_layers=3, max_positions=32, dropout_rate=0.0,
                   attention_dropout_rate=0.0),
    "modernbert": preset("modernbert-tiny", vocab_size=64, num_layers=5, local_attention=8,
                         max_positions=32),
    "eurobert": preset("eurobert-tiny", vocab_size=64, num_layers=3, max_positions=32),
}


def _batch(seed: int = 0):
    """(input_ids, segment_ids, input_mask) (3, 24): a full row and two padded ones."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, 64, (3, 24)).astype(np.int32)
    mask = (np.arange(24)[None] < np.array([[24], [13], [6]])).astype(np.int32)
    return jnp.asarray(ids * mask), jnp.zeros_like(ids), jnp.asarray(mask)


def _masked_lm(config, precision):
    return family_of(config).masked_lm_model(config, precision)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_scanned_forward_and_gradients_equal_unrolled(name):
    config = CONFIGS[name]
    ids, segments, mask = _batch()
    positions = jnp.asarray([[1, 4, 7], [2, 5, 9], [1, 2, 3]], jnp.int32)
    unrolled, scanned = _masked_lm(config, UNROLLED), _masked_lm(config, SCANNED_REMAT)
    params = nn.meta.unbox(unrolled.init(jax.random.PRNGKey(0), ids, segments, mask, positions))
    # Initialisation runs unrolled either way: a seed gives the same weights.
    jax.tree.map(np.testing.assert_array_equal, nn.meta.unbox(
        scanned.init(jax.random.PRNGKey(0), ids, segments, mask, positions)), params)

    def loss(params, model):
        logits = model.apply(params, ids, segments, mask, positions, True)
        return jnp.mean(jax.nn.log_softmax(logits) ** 2), logits

    step = jax.jit(jax.value_and_grad(loss, has_aux=True), static_argnums=1)
    (expected_loss, expected_logits), expected_grads = step(params, unrolled)
    (actual_loss, actual_logits), actual_grads = step(params, scanned)
    assert_close(actual_logits, expected_logits, SCAN_STEPS, err_msg="logits")
    assert_close(actual_loss, expected_loss, SCAN_STEPS, err_msg="loss")
    _assert_trees_close(actual_grads, expected_grads)
    last = actual_grads["params"][family_of(config).encoder_key][
        f"layer_{config.num_layers - 1}"]
    assert min(float(jnp.abs(leaf).max()) for leaf in jax.tree.leaves(last["mlp"])) > 0


def _assert_trees_close(actual, expected):
    """Every leaf within TREE_STEPS float32 steps of the largest magnitude in `expected`."""
    scale = max(float(np.abs(leaf).max()) for leaf in jax.tree.leaves(expected))
    flat_expected = dict(jax.tree_util.tree_leaves_with_path(expected))
    for path, value in jax.tree_util.tree_leaves_with_path(actual):
        assert_close(value, flat_expected[path], TREE_STEPS, scale,
                     err_msg=jax.tree_util.keystr(path))


def test_the_config_accepts_exactly_the_remat_policies_the_scan_has():
    """models/config.py checks the name without importing JAX; the two lists must agree."""
    assert sorted(REMAT_POLICY_NAMES) == sorted(REMAT_POLICIES)


def test_stack_and_unstack_are_inverse():
    per_layer = [{"kernel": np.full((2, 3), index, np.float32), "bias": np.arange(3) + index}
                 for index in range(4)]
    stacked = stack_layers(per_layer)
    assert stacked["kernel"].shape == (4, 2, 3) and stacked["bias"].shape == (4, 3)
    for original, back in zip(per_layer, unstack_layers(stacked), strict=True):
        jax.tree.map(np.testing.assert_array_equal, back, original)


def test_attention_maps_and_hidden_states_are_per_layer_with_scanning_on():
    """Collecting intermediates runs the layers unrolled: one map per layer, as before."""
    config = CONFIGS["modernbert"]
    ids, segments, mask = _batch()
    model = family_of(config).encoder(config, SCANNED)
    params = nn.meta.unbox(model.init(jax.random.PRNGKey(0), ids, segments, mask))
    (output, _), state = model.apply(params, ids, segments, mask, mutable=["intermediates"])
    hidden = state["intermediates"]["hidden_states"]
    assert len(hidden) == config.num_layers + 1
    assert sorted(state["intermediates"]) == ["hidden_states"] + [
        f"layer_{index}" for index in range(config.num_layers)]
    np.testing.assert_array_equal(hidden[-1], output)
    # Collecting takes the attention maps' own path (layers/attention.py), the plain call the
    # kernel's: two implementations (ENCODER_STEPS), compared where tokens are real (padding
    # rows' states are ill-conditioned, tests/test_interop.py).
    plain, _ = model.apply(params, ids, segments, mask)
    real = np.asarray(mask, bool)
    assert_close(np.asarray(plain)[real], np.asarray(output)[real], ENCODER_STEPS,
                 err_msg="scanned against collected")


def _losses(result):
    return np.array([loss for _, loss in result["losses"]])


def test_a_run_saved_unrolled_continues_scanned_with_the_same_losses(tmp_path):
    """6 steps unrolled, then 6 scanned from its checkpoint: the losses and weights of 12
    unrolled steps (dropout off, see the module docstring)."""
    # One schedule over 12 steps for every run, the 6-step one too.
    overrides = {"model.num_layers": 3, "model.dropout_rate": 0.0,
                 "model.attention_dropout_rate": 0.0, "schedule_steps": 12}
    run = lambda workdir, steps, scan: trainer.train(  # noqa: E731
        config := tiny_run_config(**overrides, num_train_steps=steps,
                                  **{"precision.scan_layers": scan}),
        str(workdir), **pretraining(config, synthetic_factory(config)), show_progress=False,
        log=lambda *_: None)
    reference = run(tmp_path / "unrolled", 12, False)
    run(tmp_path / "resumed", 6, False)
    resumed = run(tmp_path / "resumed", 12, True)
    assert resumed["step"] == 12 and len(resumed["losses"]) == 6
    assert_close(_losses(resumed), _losses(reference)[6:], SCAN_STEPS, err_msg="losses 7-12")
    params = [jax.tree.map(np.asarray, checkpointing.restore_params(
        os.path.join(workdir, "checkpoints", "12", "params")))
        for workdir in (tmp_path / "resumed", tmp_path / "unrolled")]
    _assert_trees_close(*params)


def test_transformers_weights_run_scanned_and_export_back_unchanged(tmp_path):
    """A transformers BertModel read into bert-jax runs scanned as transformers runs it
    (ENCODER_STEPS: two float32 implementations, tests/tolerances.py), and its weights go
    back to transformers unchanged: the parameter tree is per layer with scanning on."""
    import torch
    import transformers
    from interop_helpers import tiny_random_model, torch_inputs

    from bert_jax.interop import model_source, model_writers
    from bert_jax.models.bert import BertModel

    config, params, tokenizer = tiny_random_model(tmp_path)
    model_writers.export_huggingface(config, params, tokenizer, str(tmp_path / "hf"))
    loaded = model_source.resolve(str(tmp_path / "hf")).load()
    batch = tokenizer.encode_for_model(["the man went to the store .", ("he sat", "on it !")],
                                       16, pad_to_max=True)
    sequence, pooled = BertModel(loaded.config, SCANNED).apply(
        {"params": loaded.params["bert"]}, batch["input_ids"], batch["segment_ids"],
        batch["input_mask"])
    reference = transformers.BertModel.from_pretrained(str(tmp_path / "hf")).eval()
    with torch.no_grad():
        theirs = reference(**torch_inputs(batch))
    real = batch["input_mask"].astype(bool)
    assert_close(np.asarray(sequence)[real], theirs.last_hidden_state.numpy()[real],
                 ENCODER_STEPS, err_msg="sequence output")
    assert_close(pooled, theirs.pooler_output.numpy(), ENCODER_STEPS, err_msg="pooled")
    model_writers.export_huggingface(loaded.config, loaded.params, tokenizer,
                                     str(tmp_path / "again"))
    loaded_again = model_source.resolve(str(tmp_path / "again")).load()
    jax.tree.map(np.testing.assert_array_equal, loaded_again.params, params)


def test_frozen_encoder_features_are_each_layers_with_scanning_on():
    """The feature-based NER head intercepts every layer's call: it runs the encoder unrolled."""
    from bert_jax.models.frozen_encoder_heads import FrozenEncoderTokenClassifier
    from bert_jax.tasks.arguments import COMBINE_MODES

    config = CONFIGS["bert"]
    ids, segments, mask = _batch(2)
    heads = [FrozenEncoderTokenClassifier(config, 3, (1, 2, 3), COMBINE_MODES[0], precision)
             for precision in (UNROLLED, SCANNED)]
    params = heads[0].init(jax.random.PRNGKey(2), ids, segments, mask)
    np.testing.assert_array_equal(heads[1].apply(params, ids, segments, mask),
                                  heads[0].apply(params, ids, segments, mask))
