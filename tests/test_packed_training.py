"""Packed pre-training rows give exactly the losses of the same instances unpacked.

(a) loss, metrics and gradients of a packed batch equal those of its instances one to a
row; (b) an instance's outputs do not depend on the other instances of its row, bit for
bit; (c) training on packed shards resumes bit-exactly; (d) packed shards read as
unpacked are refused by name.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pipeline_helpers as helpers
from tolerances import ENCODER_STEPS, assert_close
from bert_jax.models.config import Precision
from bert_jax.models.presets import preset
from bert_jax.errors import UserError
from bert_jax.models.bert import BertModel
from bert_jax.run_config import base_config
from bert_jax.tasks.pretraining import PretrainingTask
from bert_jax.training import checkpointing, trainer
from input_pipeline import packing
from input_pipeline.create_data import create_pretraining_data
from test_training_support import pretraining

SEQ_LEN, PREDICTIONS, PER_ROW, VOCAB = 48, 4, 3, 100
# Instances of these lengths, packed as ROWS (instance indices): 44 of 48 tokens, 45, 30.
LENGTHS = [20, 9, 15, 30, 15, 12, 18]
ROWS = [[0, 2, 1], [3, 5], [6, 4]]
CONFIG = dataclasses.replace(preset("tiny", vocab_size=VOCAB), max_positions=SEQ_LEN,
                             num_layers=1, hidden_dim=32, num_heads=2, mlp_dim=64,
                             dropout_rate=0.0, attention_dropout_rate=0.0)


def instances(seed=0) -> dict:
    """Unpacked rows, one instance each: [CLS] A [SEP] B [SEP], masks, NSP labels."""
    rng = np.random.default_rng(seed)
    count = len(LENGTHS)
    position = np.arange(SEQ_LEN)[None]
    lengths = np.array(LENGTHS)[:, None]
    input_mask = (position < lengths).astype(np.int32)
    input_ids = rng.integers(5, VOCAB, (count, SEQ_LEN)).astype(np.int32) * input_mask
    input_ids[:, 0] = helpers.CLS
    segment_ids = ((position >= lengths // 2) * input_mask).astype(np.int32)
    positions = np.stack([np.sort(rng.choice(np.arange(1, length), PREDICTIONS, replace=False))
                          for length in LENGTHS]).astype(np.int32)
    # As create-data draws them: round(0.15 x length) predictions, at least 1, at most P.
    predicted = np.clip(np.round(0.15 * np.array(LENGTHS)), 1, PREDICTIONS)
    weights = (np.arange(PREDICTIONS)[None] < predicted[:, None]).astype(np.float32)
    positions[weights == 0] = 0
    labels = np.where(weights > 0, rng.integers(5, VOCAB, (count, PREDICTIONS)), 0)
    return dict(input_ids=input_ids, input_mask=input_mask, segment_ids=segment_ids,
                masked_lm_positions=positions, masked_lm_ids=labels.astype(np.int32),
                masked_lm_weights=weights,
                next_sentence_labels=rng.integers(0, 2, count).astype(np.int32))


def loss_and_grads(task, params, batch):
    model = task.build_model(CONFIG, Precision())

    def loss(params):
        outputs = task.apply(model, params, batch, train=False)
        means = task.means(task.sums(outputs, batch), task.counts(batch))
        return means["loss"], means

    (_, means), grads = jax.jit(jax.value_and_grad(loss, has_aux=True))(params)
    return means, grads


@pytest.fixture(scope="module")
def batches():
    unpacked = instances()
    packed = packing.pack_features(unpacked, ROWS, SEQ_LEN, PER_ROW)
    unpacked_task, packed_task = PretrainingTask(PREDICTIONS), PretrainingTask(PREDICTIONS,
                                                                             PER_ROW)
    model = unpacked_task.build_model(CONFIG, Precision())
    params = jax.jit(model.init)(jax.random.PRNGKey(0),
                                 *unpacked_task.model_inputs(unpacked))["params"]
    return dict(unpacked=unpacked, packed=packed, params=params, unpacked_task=unpacked_task,
                packed_task=packed_task)


def test_a_packed_batch_has_the_loss_metrics_and_gradients_of_its_instances_unpacked(batches):
    assert len(batches["packed"]["input_ids"]) == 3 < len(batches["unpacked"]["input_ids"])
    expected, expected_grads = loss_and_grads(batches["unpacked_task"], batches["params"],
                                              batches["unpacked"])
    got, grads = loss_and_grads(batches["packed_task"], batches["params"], batches["packed"])
    assert set(got) == set(expected)
    # The same instances laid out in other rows: the same float32 sums, blocked otherwise
    # (tolerances.ENCODER_STEPS of each value's scale). A gradient entry is a sum of terms
    # of the gradient's scale, its largest entry, which may cancel to nothing (a key bias's
    # gradient is 0 up to such steps).
    for name in expected:
        assert_close(got[name], expected[name], ENCODER_STEPS, err_msg=name)
    flat_expected = jax.tree_util.tree_leaves_with_path(expected_grads)
    gradient_scale = max(np.abs(leaf).max() for leaf in jax.tree.leaves(expected_grads))
    for (path, want), have in zip(flat_expected, jax.tree.leaves(grads)):
        assert_close(have, want, ENCODER_STEPS, scale=gradient_scale,
                     err_msg=jax.tree_util.keystr(path))
    counts = batches["packed_task"].counts(batches["packed"])
    assert float(counts["num_sequences"]) == len(LENGTHS)
    assert float(counts["num_real_tokens"]) == sum(LENGTHS)


def test_each_instance_reads_nsp_at_its_own_cls_and_its_own_predictions(batches):
    model = batches["packed_task"].build_model(CONFIG, Precision())
    unpacked_mlm, unpacked_nsp = jax.jit(lambda params, batch: batches["unpacked_task"].apply(
        model, params, batch, train=False))(batches["params"], batches["unpacked"])
    packed_mlm, packed_nsp = jax.jit(lambda params, batch: batches["packed_task"].apply(
        model, params, batch, train=False))(batches["params"], batches["packed"])
    assert packed_nsp.shape == (3, PER_ROW, 2)
    assert packed_mlm.shape[1] == PREDICTIONS + PER_ROW  # packing.row_predictions
    filled = 0
    for row, members in enumerate(ROWS):
        taken = 0  # the row's predictions are its instances' in turn
        for slot, index in enumerate(members):
            # As above: the same instance in another row (tolerances.ENCODER_STEPS).
            assert_close(packed_nsp[row, slot], unpacked_nsp[index], ENCODER_STEPS)
            count = int(batches["unpacked"]["masked_lm_weights"][index].sum())
            assert_close(packed_mlm[row, taken:taken + count], unpacked_mlm[index, :count],
                         ENCODER_STEPS)
            taken += count
        filled += taken
    assert filled == batches["packed"]["masked_lm_weights"].sum()


@pytest.mark.parametrize("chunk_rows", [0, 1])  # whole batch, and the CPU's row chunks
def test_changing_one_instance_leaves_the_others_bit_identical(batches, chunk_rows):
    packed = batches["packed"]
    model = BertModel(CONFIG, Precision(attention_chunk_rows=chunk_rows))
    params = {"params": batches["params"]["bert"]}

    @jax.jit
    def run(batch):
        return model.apply(params, batch["input_ids"], batch["segment_ids"],
                           batch["input_mask"], instance_ids=batch["instance_ids"],
                           position_ids=batch["position_ids"])[0]

    def encode(batch):
        return np.asarray(run(batch))

    before = encode(packed)
    changed = dict(packed, input_ids=packed["input_ids"].copy())
    third = packed["instance_ids"][0] == 3  # row 0's third instance
    changed["input_ids"][0, third] = (changed["input_ids"][0, third] + 7) % VOCAB
    after = encode(changed)
    # Its other instances (padding queries see every real key, as unpacked; no loss reads them).
    others = ~np.isin(packed["instance_ids"][0], (0, 3))
    np.testing.assert_array_equal(after[0, others], before[0, others])
    np.testing.assert_array_equal(after[1:], before[1:])
    assert not np.allclose(after[0, third], before[0, third])  # moved by O(1), not by steps


# -- training on packed shards ----------------------------------------------------------------
@pytest.fixture(scope="module")
def packed_shards(tmp_path_factory):
    directory = tmp_path_factory.mktemp("packed_training")
    vocab, corpus = helpers.vocabulary_and_corpus(directory, num_documents=30, seed=2)
    output = str(directory / "shards")
    create_pretraining_data([corpus], vocab, output, num_shards=2, workers=1,
                            show_progress=False, max_seq_len=SEQ_LEN, max_predictions=PREDICTIONS,
                            dupe_factor=1, max_sequences_per_row=PER_ROW, seed=4)
    return dict(vocab=vocab, output=output)


def run_config(shards, **overrides):
    config = base_config("tiny")
    config.model.update(hidden_dim=32, num_layers=1, num_heads=2, mlp_dim=64,
                        max_positions=SEQ_LEN)
    config.data.update(train_files=shards["output"], eval_files=shards["output"],
                       vocab_path=shards["vocab"], shuffle_buffer=50)
    config.update(batch_size=8, num_train_steps=4, schedule_steps=4, log_every_steps=1)
    config.optimizer.update(learning_rate=1e-3, warmup_steps=2)
    config.checkpoint.update(every_steps=2, keep=5, async_save=False)
    config.eval.update(every_steps=4, num_batches=1, batch_size=8)
    for key, value in overrides.items():
        section, _, leaf = key.rpartition(".")
        (config[section] if section else config)[leaf] = value
    return config


def params_at(workdir, step):
    return jax.tree.map(np.asarray, checkpointing.restore_params(
        f"{workdir}/checkpoints/{step}/params"))


def _train(config, workdir, log=lambda *_: None):
    """`bert-jax pretrain`'s run: the data section completed, the task, the shard reader."""
    return trainer.train(config, workdir, **pretraining(config, log=log), show_progress=False,
                         log=log)


def test_training_on_packed_shards_resumes_bit_exactly(packed_shards, tmp_path):
    logs = []
    whole = _train(run_config(packed_shards), str(tmp_path / "whole"), logs.append)
    assert any("packed shards, up to 3 instances a row" in line for line in logs)
    assert any("instances/s" in line and "real tokens/s" in line for line in logs)
    evaluation = whole["evaluations"][-1][1]
    assert 0 < evaluation["nsp_accuracy"] <= 1 and np.isfinite(evaluation["mlm_loss"])
    first = _train(run_config(packed_shards, num_train_steps=2, **{"data.eval_files": ""}),
                   str(tmp_path / "resumed"))
    assert first["step"] == 2
    second = _train(run_config(packed_shards), str(tmp_path / "resumed"))
    assert second["step"] == 4
    assert [loss for _, loss in second["losses"]] == [loss for _, loss in whole["losses"][2:]]
    jax.tree.map(np.testing.assert_array_equal, params_at(tmp_path / "resumed", 4),
                 params_at(tmp_path / "whole", 4))


def test_packed_shards_with_an_unpacked_config_are_refused(packed_shards, tmp_path):
    with pytest.raises(UserError, match="max_sequences_per_row=3.*but 1 was asked for"):
        _train(run_config(packed_shards, **{"data.max_sequences_per_row": 1}), str(tmp_path))
    with pytest.raises(UserError, match="dynamic masking.*packed"):
        _train(run_config(packed_shards, **{"data.dynamic_masking": True}),
               str(tmp_path / "dynamic"))


def test_a_packed_instance_encodes_as_it_would_alone():
    ids = jnp.array([[1, 1, 2, 2, 0]], jnp.int32)
    model = BertModel(CONFIG)
    inputs = (jnp.ones((1, 5), jnp.int32), jnp.zeros((1, 5), jnp.int32), (ids > 0).astype(int))
    params = model.init(jax.random.PRNGKey(0), *inputs)
    packed, _ = model.apply(params, *inputs, instance_ids=ids,
                            position_ids=jnp.array([[0, 1, 0, 1, 0]]))
    alone, _ = model.apply(params, inputs[0][:, :2], inputs[1][:, :2], inputs[2][:, :2])
    # The second instance sees only itself at positions 0, 1: as the first one alone does.
    assert_close(packed[0, 2:4], alone[0], ENCODER_STEPS)  # another layout of the same sums
