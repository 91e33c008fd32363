"""bench/glue_minilm.py's transformers grid: runs shared among processes give the figures
that one process gives, each run is trained once, and a rerun trains none.

A tiny BERT and a made-up STS-B of a few pairs, scored by Pearson and Spearman correlation,
which move with any change in a prediction's last bit. Each run's products are too small for
torch to split among threads, so a worker does the sequential run's operations in the same
order: equal floats, compared exactly."""

import argparse
import json
import os

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from bench.glue_minilm import STSB_HEADER, run_path, transformers_runs  # noqa: E402

WORDS = ["good", "bad", "fine", "awful", "film", "plot", "great", "dull"]


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> str:
    directory = tmp_path_factory.mktemp("tiny-bert")
    vocabulary = directory / "vocab.txt"
    vocabulary.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]) +
                          "\n")
    transformers.BertTokenizerFast.from_pretrained(directory).save_pretrained(directory)
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=5 + len(WORDS), hidden_size=16,
                                     num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=32, max_position_embeddings=32)
    transformers.BertModel(config).save_pretrained(directory)
    return str(directory)


@pytest.fixture(scope="module")
def glue(tmp_path_factory) -> str:
    directory = tmp_path_factory.mktemp("glue")
    (directory / "STS-B").mkdir()
    for name, count in (("train.tsv", 12), ("dev.tsv", 8)):
        rows = ["\t".join([str(index), "main-news", "made-up", "2026", str(index), "none",
                           "none", f"{WORDS[index % 8]} {WORDS[(3 * index) % 8]}",
                           f"{WORDS[(5 * index) % 8]} film", f"{index % 6:.1f}"])
                for index in range(count)]
        (directory / "STS-B" / name).write_text(STSB_HEADER + "\n" + "\n".join(rows) + "\n")
    return str(directory)


def grid(processes: int) -> argparse.Namespace:
    return argparse.Namespace(task="stsb", learning_rates="1e-3,2e-3", seeds="0", epochs=1,
                              max_seq_len=16, batch_size=4, reference_processes=processes)


@pytest.fixture
def one_thread():
    """The workers' count on 2 cores (more cores give them more; products this tiny run on
    one thread anyway)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_runs_in_two_processes_equal_one_process_and_repeat_none(tmp_path, model, glue,
                                                                 one_thread):
    sequential = transformers_runs(model, glue, str(tmp_path / "one"), grid(1))
    parallel = transformers_runs(model, glue, str(tmp_path / "two"), grid(2))

    def figures(runs):
        return [(run["learning_rate"], run["seed"], run["metrics"]) for run in runs]

    assert figures(parallel) == figures(sequential)
    assert [run["learning_rate"] for run in parallel] == [1e-3, 2e-3]
    paths = [run_path(str(tmp_path / "two"), "stsb", rate, 0) for rate in (1e-3, 2e-3)]
    kept = [os.stat(path).st_mtime_ns for path in paths]
    assert not [name for name in os.listdir(tmp_path / "two") if name.endswith(".pt")]

    again = transformers_runs(model, glue, str(tmp_path / "two"), grid(2))
    assert [os.stat(path).st_mtime_ns for path in paths] == kept  # nothing trained again
    assert again == [json.load(open(path)) for path in paths]
