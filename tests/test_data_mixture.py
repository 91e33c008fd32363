"""Data mixtures (`data.sources`, `data.mixture_tau`): the drawn shares against their
probabilities (binomial bounds), tau sampling against n_i^tau over sizes counted here with
tf.data, the same seed giving the same rows, exact resume, a source that runs out, and the
config's checks."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

import pipeline_helpers as helpers
from bert_jax.errors import UserError
from bert_jax.run_config import base_config, load_run_config
from bert_jax.tasks import pretraining_data
from input_pipeline import mixture_config

SEQ_LEN = 32


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    """Three MLM-only sources of different sizes (made-up corpora), one vocabulary."""
    directory = tmp_path_factory.mktemp("mixture")
    vocab = helpers.write_vocabulary(str(directory))
    made = dict(vocab=vocab)
    for name, documents, seed in (("web", 24, 1), ("code", 8, 2), ("books", 3, 3)):
        corpus = str(directory / f"{name}.txt")
        helpers.make_corpus(corpus, num_documents=documents, seed=seed)
        made[name] = helpers.mlm_shards(directory, name, corpus, vocab, SEQ_LEN, seed=seed)
    return made


def mixture_config_of(shards, weights: dict, tau: float = 0.0, seed: int = 0, **repeat):
    config = base_config("tiny")
    config.objective = "mlm"
    config.seed = seed
    config.data.update(vocab_path=shards["vocab"], shuffle_buffer=50, masking_rate=0.3,
                       mixture_tau=tau)
    for name, weight in weights.items():
        config.data.sources[name] = dict(files=shards[name], weight=weight,
                                         repeat=repeat.get(name, True))
    return config


def open_train(config, batch_size: int, logs=None):
    run = pretraining_data.prepare_run(config, (logs if logs is not None else []).append)
    return run.dataset_factory("train", batch_size, 0, 1)


def rows(dataset, count: int) -> list[dict]:
    return [next(dataset) for _ in range(count)]


def binomial_bound(draws: int, probability: float) -> float:
    """Three binomial standard deviations of a source's count."""
    return 3 * np.sqrt(draws * probability * (1 - probability))


def test_weights_draw_each_source_within_three_standard_deviations(shards):
    dataset = open_train(mixture_config_of(shards, {"web": 0.8, "code": 0.2}), 100)
    rows(dataset, 20)  # 2,000 rows
    drawn = {name: share * 2000 for name, share in dataset.proportions().items()}
    print("drawn of 2,000 rows at 0.8/0.2:", drawn)
    for name, weight in (("web", 0.8), ("code", 0.2)):
        assert abs(drawn[name] - 2000 * weight) <= binomial_bound(2000, weight)


def _records(directory: str) -> int:
    """A source's rows counted by tf.data's own reader (not the manifests the mixture reads)."""
    paths = tf.io.gfile.glob(os.path.join(directory, "*.tfrecord"))
    return int(tf.data.TFRecordDataset(paths).reduce(np.int64(0), lambda count, _: count + 1))


def test_tau_sampling_matches_sizes_to_the_power_tau(shards):
    names = ["books", "code", "web"]  # sorted, as the mixture orders them
    sizes = np.array([_records(shards[name]) for name in names], np.float64)
    assert len(set(sizes)) == 3  # three different sizes, so tau changes the shares
    tau = 0.5
    wanted = sizes ** tau / (sizes ** tau).sum()
    config = mixture_config_of(shards, {name: 1.0 for name in names}, tau=tau)
    logs = []
    dataset = open_train(config, 100, logs)
    np.testing.assert_allclose(dataset.probabilities, wanted, rtol=1e-12)  # float64 sums
    assert any(line.startswith("data mixture (n^0.5): books") for line in logs)
    rows(dataset, 30)  # 3,000 rows
    for name, probability in zip(names, wanted):
        drawn = dataset.proportions()[name] * 3000
        assert abs(drawn - 3000 * probability) <= binomial_bound(3000, probability), name


def _assert_same_batches(first: list[dict], second: list[dict]) -> None:
    for one, other in zip(first, second, strict=True):
        assert sorted(one) == sorted(other)
        for name in one:
            np.testing.assert_array_equal(one[name], other[name], err_msg=name)


def test_the_same_seed_draws_the_same_rows_and_another_seed_others(shards):
    weights = {"web": 0.5, "code": 0.3, "books": 0.2}
    first = rows(open_train(mixture_config_of(shards, weights), 16), 6)
    _assert_same_batches(first, rows(open_train(mixture_config_of(shards, weights), 16), 6))
    other = rows(open_train(mixture_config_of(shards, weights, seed=1), 16), 6)
    assert not np.array_equal(first[0]["input_ids"], other[0]["input_ids"])
    assert first[0]["masked_lm_weights"].shape == (16, 10)  # ceil(0.3 x 32) slots


def test_a_resumed_mixture_draws_what_an_uninterrupted_one_draws(shards):
    weights = {"web": 0.5, "code": 0.3, "books": 0.2}
    whole = open_train(mixture_config_of(shards, weights), 16)
    whole.seek_step(0)
    expected = rows(whole, 9)  # past a chunk of 64 rows in every source
    stopped = open_train(mixture_config_of(shards, weights), 16)
    stopped.seek_step(0)
    rows(stopped, 4)
    state = json.loads(json.dumps(stopped.state()))  # as the checkpoint holds it
    resumed = open_train(mixture_config_of(shards, weights), 16)
    resumed.restore(state)
    resumed.seek_step(4)
    _assert_same_batches(expected[4:], rows(resumed, 5))
    assert resumed.proportions() == whole.proportions()


def test_an_evaluation_rewinds_its_reader_to_the_start_at_every_step(shards, monkeypatch):
    """TermEvaluator opens its reader once and rewinds it before every evaluation (its
    position, and its step to 0): each evaluation reads the batches a newly opened mixture
    reads, at step 0's masking rate (the schedule changes it at step 2, within the 4
    batches an evaluation reads, so a step left where the last evaluation ended fails)."""
    from types import SimpleNamespace

    from bert_jax.training import evaluation

    config = mixture_config_of(shards, {"web": 0.5, "code": 0.3, "books": 0.2})
    config.data.masking_rate_schedule = "2:0.1"
    opened, read = [], []

    def dataset_factory(split, batch_size, process_index, process_count):
        opened.append(split)
        return open_train(config, batch_size)

    def evaluate(bundle, params, dataset, num_batches, progress):
        read.append(rows(dataset, num_batches))
        return {}

    monkeypatch.setattr(evaluation, "evaluate", evaluate)
    settings = config.eval
    settings.update(every_steps=1, batch_size=16, num_batches=4)
    evaluator = evaluation.TermEvaluator(settings, dataset_factory)
    for step in range(3):
        evaluator(None, SimpleNamespace(params=None), step)
    assert opened == ["eval"] and [entry["step"] for entry in evaluator.history] == [0, 1, 2]
    fresh = open_train(config, 16)
    expected = rows(fresh, 4)
    for batches in read:
        _assert_same_batches(expected, batches)


def test_a_source_that_runs_out_is_dropped_and_the_log_says_so(shards):
    logs = []
    config = mixture_config_of(shards, {"web": 0.5, "books": 0.5}, books=False)
    dataset = open_train(config, 32, logs)
    books = _records(shards["books"])
    rows(dataset, 2 * books // 32 + 4)
    assert any("data source books ran out (repeat false)" in line for line in logs)
    # Its rows until the batch whose draw asked for more than it had left (< one batch).
    drawn = dataset.drawn[dataset.names.index("books")]
    assert books - 32 < drawn <= books
    assert any("data source web starts its epoch 2" in line for line in logs)


def test_every_source_run_out_is_an_error(shards):
    config = mixture_config_of(shards, {"books": 1.0}, books=False)
    dataset = open_train(config, 32)
    with pytest.raises(UserError, match="every data source ran out"):
        rows(dataset, _records(shards["books"]) // 32 + 2)


def test_mixture_settings_are_checked_when_the_config_loads(shards, tmp_path):
    path = tmp_path / "mixed.py"
    path.write_text(
        "from bert_jax.run_config import base_config\n"
        "def get_config():\n"
        "    config = base_config('tiny')\n"
        f"    config.data.sources.web = dict(files={shards['web']!r}, weight=0.8, wieght=1)\n"
        "    return config\n")
    with pytest.raises(UserError, match=r"data.sources.web: unknown key\(s\) wieght; a source "
                                        r"sets files, weight, repeat"):
        load_run_config(str(path))
    config = mixture_config_of(shards, {"web": 1.0})
    config.data.train_files = shards["code"]
    with pytest.raises(UserError, match="data.train_files and data.sources are both set"):
        mixture_config.check_sources(config, "mixed.py")
    config = mixture_config_of(shards, {"web": 0.0})
    with pytest.raises(UserError, match="every data.sources weight is 0"):
        mixture_config.check_sources(config, "mixed.py")


def test_sources_root_holds_the_relative_files_of_every_source():
    config = base_config("tiny")
    config.data.sources.web = dict(files="web_1024,/abs/web/*.tfrecord")
    config.data.sources.code = dict(files="gs://bucket/code_1024")
    config.data.sources_root = "gs://corpus/shards/"
    files = {source.name: source.files for source in mixture_config.sources_of(config.data)}
    assert files == {"web": "gs://corpus/shards/web_1024,/abs/web/*.tfrecord",
                     "code": "gs://bucket/code_1024"}
    config.data.sources_root = ""
    assert mixture_config.sources_of(config.data)[1].files == "web_1024,/abs/web/*.tfrecord"


def test_the_shares_reported_are_every_hosts_rows(monkeypatch):
    """Each host draws its own rows; TensorBoard and the summary sum every host's counts."""
    from bert_jax.training import trainer

    class Mixture:
        def drawn_counts(self):
            return {"code": 30, "web": 70}

    gathered = [{"code": 30, "web": 70}, {"code": 10, "web": 90}]  # this host, then another
    monkeypatch.setattr(trainer.distributed, "gather_json", lambda value: gathered)
    run = object.__new__(trainer._Loop)  # only its dataset is read
    run.dataset = Mixture()
    assert run._drawn_shares() == {"code": 0.2, "web": 0.8}
