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
import optax
import pytest
from family_configs import CONFIGS, POSITIONS, family_batch
from tolerances import ENCODER_STEPS, assert_close

from bert_jax.models.config import REMAT_POLICY_NAMES, Precision
from bert_jax.models.presets import preset
from bert_jax.models.families import family_of
from bert_jax.models.layers.layer_scan import (REMAT_POLICIES, per_layer, stack_layers,
                                               store_stacked, unstack_layers)
from bert_jax import sharding
from bert_jax.run_config import base_config
from bert_jax.tasks.pretraining import task_from_run_config
from bert_jax.training import checkpointing, optimizer, train_step, trainer
from test_training_support import pretraining, synthetic_factory, tiny_run_config

SCAN_STEPS = 4  # float32 steps of an output's scale (module docstring)
TREE_STEPS = 16  # float32 steps of a gradient or weight tree's largest magnitude
UNROLLED = Precision()
SCANNED = Precision(scan_layers=True)
# Scanned and rematerialised, keeping the matmul outputs: the same numbers again.
SCANNED_REMAT = Precision(scan_layers=True, remat=True, remat_policy="matmul_outputs")
def _masked_lm(config, precision):
    return family_of(config).masked_lm_model(config, precision)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_scanned_forward_and_gradients_equal_unrolled(name):
    config = CONFIGS[name]
    ids, segments, mask = family_batch()
    positions = jnp.asarray(POSITIONS)
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
    ids, segments, mask = family_batch()
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


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_stored_stacked_weights_are_the_layers_and_run_as_they_do(name):
    """`store_stacked` puts the scan plan's layers on a leading axis, one tree a position of
    the block, and `per_layer` gives back the same tree; the scanned model reading the stored
    weights computes what it computes from the per-layer ones (the same scan on the same
    values, stacked before the step instead of in it: SCAN_STEPS, as the module docstring)."""
    config = CONFIGS[name]
    plan = config.scan_plan
    ids, segments, mask = family_batch(1)
    positions = jnp.asarray(POSITIONS)
    model = _masked_lm(config, SCANNED)
    params = nn.meta.unbox(model.init(jax.random.PRNGKey(1), ids, segments, mask, positions))
    stored = store_stacked(params, plan)
    encoder = stored["params"][family_of(config).encoder_key]
    stacked_keys = {key for key in encoder if key.startswith("layers_")}
    expected = {"bert": {"layers_0_every_1"},  # 3 layers, one a block
                "modernbert": {"layers_1_every_3", "layers_2_every_3", "layers_3_every_3"},
                "eurobert": {"layers_0_every_1"}}[name]
    assert stacked_keys == expected
    unrolled_left = {key for key in encoder if key.startswith("layer_")}
    assert unrolled_left == ({"layer_0", "layer_4"} if name == "modernbert" else set())
    for key in stacked_keys:
        assert {leaf.shape[0] for leaf in jax.tree.leaves(encoder[key])} == {plan.blocks}
    jax.tree.map(np.testing.assert_array_equal, per_layer(stored), params)
    apply = jax.jit(lambda params: model.apply(params, ids, segments, mask, positions))
    assert_close(apply(stored), apply(params), SCAN_STEPS, err_msg="stored against per layer")


@pytest.mark.parametrize("name", ["adamw", "lamb", "stable_adamw"])
def test_the_optimizers_update_stored_layers_as_they_update_each_layer(name):
    """Three updates of three layers of unequal scale, stored stacked and per layer: the same
    weights. LAMB's trust ratio and StableAdamW's clipping are one number a tensor, so each
    layer gets its own (taken over the stack, the layers' ratios would mix: the 100x scales
    below move them by a factor of ten and more). Both sides do the same float32 arithmetic
    on each element; a norm's sum may be blocked otherwise under vmap: TREE_STEPS."""
    config = base_config("tiny").optimizer
    config.update(name=name, warmup_steps=0, learning_rate=1e-2, clip_norm=0.0)
    tx, _ = optimizer.make_optimizer(config, total_steps=10)
    rng = np.random.default_rng(3)
    layer = lambda scale: {"dense": {"kernel": scale * rng.normal(size=(4, 6)),  # noqa: E731
                                     "bias": scale * rng.normal(size=6)},
                           "norm": {"scale": 1 + scale * rng.normal(size=6)}}
    params = jax.tree.map(jnp.float32, {"bert": {f"layer_{index}": layer(10.0 ** (index - 1))
                                                 for index in range(3)},
                                        "head": layer(1.0)})
    plan = CONFIGS["bert"].scan_plan
    results = []
    for start in (params, store_stacked(params, plan)):
        state, current = tx.init(start), start
        for step in range(3):
            grads = jax.tree.map(lambda leaf, step=step: jnp.sin(leaf * (step + 2)) * leaf,
                                 current)
            updates, state = tx.update(grads, state, current)
            current = optax.apply_updates(current, updates)
        results.append(per_layer(current))
    _assert_trees_close(results[1], results[0])


def test_a_scanned_run_keeps_its_layers_stacked_and_its_checkpoints_per_layer():
    """The step's state holds the stack as stored stacked trees; what checkpoints and
    weights go through (`layer_storage`) is the per-layer tree, and converting there and
    back returns the same arrays. An unscanned run keeps its layers as they are."""
    run_config = tiny_run_config(**{"model.num_layers": 3, "precision.scan_layers": True})
    mesh = sharding.make_mesh(devices=jax.devices()[:1])
    bundle = train_step.build_train_step(run_config, mesh, task_from_run_config(run_config))
    storage = bundle.layer_storage
    stored_encoder = bundle.abstract_state.params["bert"]
    assert "layers_0_every_1" in stored_encoder and "layer_0" not in stored_encoder
    assert stored_encoder["layers_0_every_1"]["attention"]["query"]["kernel"].shape[0] == 3
    assert sorted(key for key in storage.abstract_state.params["bert"]
                  if key.startswith("layer")) == ["layer_0", "layer_1", "layer_2"]
    # The moments are stored as the parameters are.
    assert "layers_0_every_1" in bundle.abstract_state.opt_state[1][0].mu["bert"]
    state = bundle.init_state(jax.random.PRNGKey(0))
    back = storage.stored(storage.per_layer(state))
    jax.tree.map(np.testing.assert_array_equal, back, state)
    run_config.precision.scan_layers = False
    unscanned = train_step.build_train_step(run_config, mesh, task_from_run_config(run_config))
    assert unscanned.layer_storage.plan is None
    assert "layer_0" in unscanned.abstract_state.params["bert"]


def _losses(result):
    return np.array([loss for _, loss in result["losses"]])


def test_a_run_saved_unrolled_continues_scanned_and_back_with_the_same_losses(tmp_path):
    """4 steps unrolled, 4 scanned from its checkpoint (its layers stored stacked), 4
    unrolled again from the scanned run's: the losses and weights of 12 unrolled steps
    (dropout off, see the module docstring). LAMB, whose trust ratio is a layer's."""
    # One schedule over 12 steps for every run, the shorter ones too.
    overrides = {"model.num_layers": 3, "model.dropout_rate": 0.0,
                 "model.attention_dropout_rate": 0.0, "schedule_steps": 12,
                 "optimizer.name": "lamb"}
    run = lambda workdir, steps, scan: trainer.train(  # noqa: E731
        config := tiny_run_config(**overrides, num_train_steps=steps,
                                  **{"precision.scan_layers": scan}),
        str(workdir), **pretraining(config, synthetic_factory(config)), show_progress=False,
        log=lambda *_: None)
    reference = run(tmp_path / "unrolled", 12, False)
    run(tmp_path / "resumed", 4, False)
    scanned = run(tmp_path / "resumed", 8, True)
    resumed = run(tmp_path / "resumed", 12, False)
    assert scanned["step"] == 8 and len(scanned["losses"]) == 4
    assert resumed["step"] == 12 and len(resumed["losses"]) == 4
    assert_close(_losses(scanned), _losses(reference)[4:8], SCAN_STEPS, err_msg="losses 5-8")
    assert_close(_losses(resumed), _losses(reference)[8:], SCAN_STEPS, err_msg="losses 9-12")
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
    ids, segments, mask = family_batch(2)
    heads = [FrozenEncoderTokenClassifier(config, 3, (1, 2, 3), COMBINE_MODES[0], precision)
             for precision in (UNROLLED, SCANNED)]
    params = heads[0].init(jax.random.PRNGKey(2), ids, segments, mask)
    np.testing.assert_array_equal(heads[1].apply(params, ids, segments, mask),
                                  heads[0].apply(params, ids, segments, mask))


def test_a_scanned_fine_tuning_saves_its_best_model_per_layer(tmp_path):
    """Fine-tuning with scanning on keeps its layers stacked while it trains; the best model
    it saves is per layer, as every reader of a model directory expects, and predicts."""
    from finetune_helpers import made_up_sentences, write_tsv
    from interop_helpers import random_pretraining_params, write_vocab

    from bert_jax.cli import main
    from bert_jax.interop import model_source, model_writers
    from input_pipeline.tokenization import load_tokenizer

    tokenizer = load_tokenizer(write_vocab(tmp_path))
    config = preset("tiny", vocab_size=tokenizer.vocab_size, hidden_dim=32, num_layers=2,
                    num_heads=2, mlp_dim=64, max_positions=64)
    model = str(tmp_path / "model")
    model_writers.save_model(config, random_pretraining_params(config), tokenizer, model)
    train = write_tsv(tmp_path / "train.tsv", made_up_sentences(32, seed=0))
    workdir = tmp_path / "run"
    assert main(["finetune", "classify", "--model", model, "--train", train, "--eval", train,
                 "--workdir", str(workdir), "--epochs", "1", "--batch-size", "16",
                 "--max-seq-len", "16", "--no-progress",
                 "--config.precision.scan_layers=True"]) == 0
    best = model_source.resolve(str(workdir / "best")).load()
    assert sorted(key for key in best.params["bert"] if key.startswith("layer")) == [
        "layer_0", "layer_1"]
    output = tmp_path / "predictions.jsonl"
    assert main(["predict", "--model", str(workdir / "best"), "--input", train,
                 "--output", str(output)]) == 0
    assert len(output.read_text().splitlines()) == 32
