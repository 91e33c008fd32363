"""Objective mlm through the trainer: the loss, exact resume across a masking-rate change,
no next-sentence task anywhere, and shards of one objective refused by the other."""

import itertools
import json
import os

import jax
import numpy as np
import pytest
import tensorflow as tf

import pipeline_helpers as helpers
import test_packed_training as packed
from bert_jax.errors import UserError
from bert_jax.interop import huggingface, model_source
from bert_jax.models.config import Precision
from bert_jax.run_config import base_config, load_run_config
from bert_jax.run_config.docs import format_config
from bert_jax.tasks.pretraining import MaskedLMPretrainingTask, format_evaluations
from bert_jax.training import trainer
from bert_jax.training.train_step import model_config_of
from input_pipeline.create_data import create_pretraining_data
from test_training_support import pretraining

SEQ_LEN, PER_ROW = packed.SEQ_LEN, 3


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    directory = tmp_path_factory.mktemp("mlm_pretraining")
    vocab, corpus = helpers.vocabulary_and_corpus(directory, num_documents=30, seed=2)
    made = dict(vocab=vocab, mlm=helpers.mlm_shards(directory, "mlm", corpus, vocab, SEQ_LEN,
                                                    PER_ROW, seed=4))
    made["mlm_nsp"] = str(directory / "mlm_nsp")
    create_pretraining_data([corpus], vocab, made["mlm_nsp"], num_shards=2, workers=1,
                            show_progress=False, max_seq_len=SEQ_LEN, max_predictions=4,
                            dupe_factor=1, seed=4)
    return made


def run_config(shards, **overrides):
    """The packed-training tests' tiny run on the objective mlm shards: rate 0.3, then 0.1
    from step 3."""
    return packed.run_config(dict(output=shards["mlm"], vocab=shards["vocab"]), **{
        "objective": "mlm", "data.masking_rate": 0.3, "data.masking_rate_schedule": "3:0.1",
        **overrides})


@pytest.fixture(scope="module", params=["bert", "modernbert"])
def first_batch(shards, request):
    """The task, model, fresh parameters and first training batch of the tiny run, for a
    tiny BERT and a tiny ModernBERT (the objective asks the family for its masked-LM model)."""
    config = run_config(shards)
    if request.param == "modernbert":
        config.model = base_config("modernbert-tiny").model
    run = pretraining(config)
    # The first batch holding a packed row (two or more sequences): which rows come first
    # follows the reader's shuffle, which another test file run earlier in the same process
    # can move (one CI run drew 8 rows of one sequence each).
    batches = run["dataset_factory"]("train", 8, 0, 1)
    task, batch = run["task"], next(batch for batch in itertools.islice(batches, 50)
                                    if (batch["instance_ids"].max(axis=1) > 1).any())
    model = task.build_model(model_config_of(config), Precision())
    params = jax.jit(model.init)(jax.random.PRNGKey(0), *task.model_inputs(batch),
                                 **task.model_keywords(batch))["params"]
    return dict(task=task, batch=batch, model=model, params=params)


@pytest.mark.parametrize("per_row", [1, 3])
def test_the_model_is_told_the_most_sequences_a_row_holds(per_row):
    """data.max_sequences_per_row (the manifest's, which check_settings holds the config to)
    reaches the model as its fused kernels' instance slots: at 1, a GPU's global layers take
    cuDNN with per-row lengths (tests/test_aot_gpu.py compiles it). The slots' weights come
    along, so that a CPU scores only the slots in use (tests/test_slots_in_use.py)."""
    task = MaskedLMPretrainingTask(max_predictions=4, max_sequences_per_row=per_row)
    ids, weights = np.ones((2, 8), np.int32), np.ones((2, 4), np.float32)
    keywords = task.model_keywords({"instance_ids": ids, "position_ids": ids,
                                    "masked_lm_weights": weights})
    assert keywords["max_instances"] == per_row
    assert keywords["instance_ids"] is ids and keywords["position_ids"] is ids
    assert keywords["masked_lm_weights"] is weights


def test_the_loss_is_numpy_cross_entropy_over_the_masked_positions(first_batch):
    task, batch, model, params = (first_batch[name] for name in ("task", "batch", "model",
                                                                 "params"))
    assert isinstance(task, MaskedLMPretrainingTask)
    assert task.max_predictions == batch["masked_lm_weights"].shape[1] == 15  # ceil(.3 x 48)
    paths = [jax.tree_util.keystr(path) for path, _ in
             jax.tree_util.tree_flatten_with_path(params)[0]]
    assert paths and not [path for path in paths if "nsp" in path or "pooler" in path]
    logits = jax.jit(lambda params: task.apply(model, params, batch, train=False))(params)
    means = task.means(task.sums(logits, batch), task.counts(batch))
    assert sorted(means) == ["loss", "mlm_accuracy", "mlm_loss"]
    logits = np.asarray(logits, np.float64)  # (B, P, V)
    shifted = logits - logits.max(axis=-1, keepdims=True)
    log_probabilities = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    labels, weights = batch["masked_lm_ids"], batch["masked_lm_weights"].astype(np.float64)
    nll = -np.take_along_axis(log_probabilities, labels[..., None], axis=-1)[..., 0]
    expected = (nll * weights).sum() / weights.sum()
    accuracy = ((logits.argmax(axis=-1) == labels) * weights).sum() / weights.sum()
    # float32 cross-entropies (each near log 413 = 6.0, within a few ulps) summed over at
    # most 8 x 15 = 120 weighted slots: the relative error stays below 120 x 2^-24 = 7e-6.
    np.testing.assert_allclose(float(means["mlm_loss"]), expected, rtol=1e-5)
    assert float(means["loss"]) == float(means["mlm_loss"])
    np.testing.assert_allclose(float(means["mlm_accuracy"]), accuracy, rtol=1e-6)
    counts = task.counts(batch)
    assert float(counts["num_sequences"]) == batch["instance_ids"].max(axis=1).sum()


def one_sequence_a_row(batch: dict) -> dict:
    """The packed rows' sequences one to a row, each with its own masked positions."""
    rows = {name: [] for name in batch}
    seq_len, slots = batch["input_ids"].shape[1], batch["masked_lm_positions"].shape[1]
    for row, sequence in zip(*np.nonzero(np.arange(1, PER_ROW + 1)[None, :]
                                         <= batch["instance_ids"].max(axis=1)[:, None])):
        tokens = np.flatnonzero(batch["instance_ids"][row] == sequence + 1)
        slot = np.flatnonzero(batch["masked_lm_weights"][row] *
                              np.isin(batch["masked_lm_positions"][row], tokens))
        padded = lambda values, size: np.pad(values, (0, size - len(values)))  # noqa: E731
        rows["input_ids"].append(padded(batch["input_ids"][row, tokens], seq_len))
        for name in ("input_mask", "instance_ids"):
            rows[name].append(padded(np.ones(len(tokens), np.int32), seq_len))
        rows["position_ids"].append(np.arange(seq_len, dtype=np.int32))
        rows["segment_ids"].append(np.zeros(seq_len, np.int32))
        rows["masked_lm_positions"].append(padded(
            batch["masked_lm_positions"][row, slot] - tokens[0], slots))
        for name in ("masked_lm_ids", "masked_lm_weights"):
            rows[name].append(padded(batch[name][row, slot], slots))
    return {name: np.stack(values).astype(batch[name].dtype) for name, values in rows.items()}


def test_packed_rows_have_the_loss_and_gradients_of_their_sequences_alone(first_batch):
    task, batch, params = first_batch["task"], first_batch["batch"], first_batch["params"]

    def loss(params, batch):
        outputs = task.apply(first_batch["model"], params, batch, train=False)
        means = task.means(task.sums(outputs, batch), task.counts(batch))
        return means["loss"], means

    alone = one_sequence_a_row(batch)
    assert len(alone["input_ids"]) > len(batch["input_ids"])
    assert alone["masked_lm_weights"].sum() == batch["masked_lm_weights"].sum()
    gradient = jax.jit(jax.value_and_grad(loss, has_aux=True))
    (_, packed_means), packed_grads = gradient(params, batch)
    (_, alone_means), alone_grads = gradient(params, alone)
    # As tests/test_packed_training.py holds BERT's packed rows: the same float32 terms
    # summed in another order (a few ulps of the ~6 loss), gradients likewise.
    for name in packed_means:
        np.testing.assert_allclose(packed_means[name], alone_means[name], rtol=2e-6,
                                   atol=1e-7, err_msg=name)
    for (path, want), have in zip(jax.tree_util.tree_leaves_with_path(alone_grads),
                                  jax.tree.leaves(packed_grads)):
        np.testing.assert_allclose(have, want, rtol=1e-5, atol=1e-7,
                                   err_msg=jax.tree_util.keystr(path))


def train_noting_seeks(config, workdir, seeks: list, log=lambda *_: None,
                       readers: list | None = None) -> dict:
    """`bert-jax pretrain`'s run, noting what the trainer tells the reader (`seek_step`): the
    step of its next batch and the batches steps 0..3 read; and in `readers` every reader
    opened (training and evaluation)."""
    run = pretraining(config, log=log)

    def factory(split, *args):
        dataset = run["dataset_factory"](split, *args)
        if readers is not None:
            readers.append(dataset)
        seek = dataset.seek_step

        def noted(step, reads=None, steady_from=0):
            seeks.append((step, reads and [reads(s) for s in range(4)], steady_from))
            seek(step, reads, steady_from)
        dataset.seek_step = noted
        return dataset
    return trainer.train(config, workdir, **dict(run, dataset_factory=factory),
                         show_progress=False, log=log)


def test_a_run_resumed_across_a_rate_change_is_bit_identical(shards, tmp_path):
    """Rate 0.3 until step 3, then 0.1, and the batch warmed up from one micro-batch of 8
    rows to two at step 2: the second half of the resumed run trains steps 2 and 3, across
    the change, and must see the uninterrupted run's very batches."""
    logs, seeks, readers = [], [], []
    warmup = {"batch_size": 16, "grad_accum_steps": 2, "batch_warmup.steps": 2,
              "batch_warmup.start_batch_size": 8}
    whole = train_noting_seeks(run_config(shards, **warmup), str(tmp_path / "whole"), seeks,
                               logs.append, readers)
    # The run closed every reader it opened (training and each evaluation's): none is left
    # with read-ahead threads for the garbage collector to stop at some later moment.
    assert len(readers) >= 2 and all(reader._iterator is None for reader in readers)
    first = train_noting_seeks(run_config(shards, num_train_steps=2, **warmup, **{
        "data.eval_files": ""}), str(tmp_path / "resumed"), seeks)
    assert first["step"] == 2
    second = train_noting_seeks(run_config(shards, **warmup), str(tmp_path / "resumed"), seeks)
    assert second["step"] == 4
    # The training readers; an evaluation's reader is rewound to step 0, one micro-batch a step.
    assert [seek for seek in seeks if seek[1] is not None] == [(0, [1, 1, 2, 2], 2)] * 2 + [
        (2, [1, 1, 2, 2], 2)]
    assert {seek for seek in seeks if seek[1] is None} == {(0, None, 0)}
    assert [loss for _, loss in second["losses"]] == [loss for _, loss in whole["losses"][2:]]
    jax.tree.map(np.testing.assert_array_equal, packed.params_at(tmp_path / "resumed", 4),
                 packed.params_at(tmp_path / "whole", 4))
    # No next-sentence task anywhere: logs, metrics, TensorBoard, evaluations, export.
    assert logs and not any("nsp" in line.lower() for line in logs)
    evaluation = whole["evaluations"][-1][1]
    assert set(evaluation) == {"loss", "mlm_loss", "mlm_accuracy"}
    table = format_evaluations(whole["evaluations"], MaskedLMPretrainingTask.evaluated)
    assert table.split("\n")[0].split() == ["step", "loss", "mlm_loss", "mlm_acc"]
    events = os.path.join(tmp_path / "whole", "tensorboard")
    tags = {value.tag for name in os.listdir(events)
            for record in tf.data.TFRecordDataset(os.path.join(events, name))
            for value in tf.compat.v1.Event.FromString(record.numpy()).summary.value}
    assert "train/loss" in tags and "eval/mlm_accuracy" in tags
    assert not [tag for tag in tags if "nsp" in tag]
    trained = model_source.resolve(str(tmp_path / "whole"))
    assert huggingface.default_architecture(trained.config(),
                                            packed.params_at(tmp_path / "whole", 4)) == \
        "BertForMaskedLM"
    with open(tmp_path / "whole" / "run_config.json", encoding="utf-8") as file:
        recorded = json.load(file)
    assert recorded["objective"] == "mlm" and recorded["data"]["max_predictions"] == 15


def test_shards_of_one_objective_are_refused_by_the_other(shards, tmp_path):
    with pytest.raises(UserError, match=r"made for objective mlm \(create-data --objective "
                                        r"mlm\) but the run's objective is mlm_nsp") as error:
        pretraining(run_config(shards, objective="mlm_nsp", **{
            "data.masking_rate_schedule": "", "data.max_predictions": 4}))
    assert "\n" not in str(error.value)
    with pytest.raises(UserError, match=r"made for objective mlm_nsp \(create-data\) but the "
                                        "run's objective is mlm"):
        pretraining(run_config(shards, **{"data.train_files": shards["mlm_nsp"],
                                          "data.eval_files": ""}))


def test_the_objective_keys_are_documented_and_checked():
    printed = format_config(load_run_config("demo"))
    for key in ("objective", "data.masking_rate", "data.masking_rate_schedule"):
        assert [line for line in printed.splitlines() if line.startswith(key + " ") and "  # "
                in line], key
    for overrides, message in (
            (["--config.objective=nsp"], "objective must be one of mlm_nsp, mlm; got 'nsp'"),
            (["--config.data.masking_rate=1.5"], "data.masking_rate must be between 0 and 1"),
            (["--config.data.masking_rate_schedule=10:0.1"],
             "data.masking_rate_schedule needs objective mlm"),
            (["--config.objective=mlm", "--config.data.dynamic_masking=true"],
             "data.dynamic_masking is for objective mlm_nsp"),
            (["--config.objective=mlm", "--config.data.masking_rate_schedule=10"],
             "'10' is not STEP:RATE"),
            (["--config.data.masking_rat=0.3"], "did you mean data.masking_rate")):
        with pytest.raises(UserError, match=message):
            load_run_config("demo", overrides)


def test_the_pod_rehearsal_reads_objective_mlm_shards(shards):
    from bert_jax.preflight import check_run

    logs = []
    check_run(run_config(shards), 8, 2, logs.append)  # `launch check`: 8 devices, 2 workers
    assert any("have the schema" in line for line in logs)
