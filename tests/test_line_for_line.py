"""Outputs line up with what the user gave, and a bad input is refused before any work
(issue 42).

Old behaviour, each checked here: `predict` on a .txt dropped empty and blank lines (3
lines in, 2 predictions out; `embed` keeps them) and refused a .csv output only after
predicting everything; NER `predict` dropped the -DOCSTART- lines; `--max-seq-len 2`
trained on [CLS] [SEP] alone, silently; the qa `predict` summary counted windows ("wrote
132 predictions" for 2 questions); `create-data` imported TensorFlow and started its
workers (4-9 s) before it found an input empty or not UTF-8.
"""

import json

import numpy as np
import pytest
from finetune_helpers import made_up_sentences, tiny_model_directory, write_tsv
from interop_helpers import random_pretraining_params, write_vocab
from pipeline_helpers import write_vocabulary

from bert_jax.cli import main
from bert_jax.interop import model_writers
from bert_jax.models.presets import preset
from input_pipeline.tokenization import load_tokenizer


def _task_model(root, task_name: str, settings: dict, head: dict) -> str:
    """An untrained fine-tuned model directory of `task_name`: random weights, task.json."""
    from bert_jax.tasks import task_module
    from bert_jax.training.finetune import task_info

    tokenizer = load_tokenizer(write_vocab(root))
    config = preset("tiny", vocab_size=tokenizer.vocab_size, hidden_dim=32, num_layers=1,
                    num_heads=2, mlp_dim=64, max_positions=64)
    rng = np.random.default_rng(0)
    encoder = random_pretraining_params(config)["bert"]
    if task_name == "qa":  # as `finetune qa` saves it; the ner model keeps a pooler it does
        del encoder["pooler"]  # not read (a tree.map traceback before issue 42)
    params = {"bert": encoder,
              **{name: {"kernel": rng.normal(0, 0.3, (32, width)).astype(np.float32),
                        "bias": np.zeros(width, np.float32)} for name, width in head.items()}}
    task = task_module(task_name).TASK.from_settings(settings)
    directory = str(root / task_name)
    model_writers.save_model(config, params, tokenizer, directory,
                             task_info=task_info(task, 32))
    return directory


def test_predict_writes_a_row_for_every_line_empty_ones_too(tmp_path, capsys):
    model = _task_model(tmp_path, "classify", {"label_names": ["neg", "pos"]},
                        {"classifier": 2})
    texts = tmp_path / "texts.txt"
    texts.write_text("he was happy\n\n   \nthe man went to the store\tit was\n",
                     encoding="utf-8")
    output = tmp_path / "predictions.jsonl"
    assert main(["predict", "--model", model, "--input", str(texts), "--output",
                 str(output), "--no-progress"]) == 0
    assert f"wrote 4 predictions to {output}" in capsys.readouterr().out
    rows = [json.loads(line) for line in output.read_text().splitlines()]
    assert [row["texts"] for row in rows] == [["he was happy"], [""], [""],
                                              ["the man went to the store", "it was"]]
    # The empty text is predicted as what it is: [CLS] [SEP], the same as an empty string.
    import bert_jax

    assert bert_jax.load(model).predict([""])[0]["label"] == rows[1]["label"]


def test_predict_refuses_an_output_type_before_reading_the_weights(tmp_path, monkeypatch,
                                                                  capsys):
    # Before: every prediction was computed, then ".csv" was refused.
    from bert_jax.interop import model_source

    model = _task_model(tmp_path, "classify", {"label_names": ["neg", "pos"]},
                        {"classifier": 2})
    texts = tmp_path / "texts.txt"
    texts.write_text("he was happy\n", encoding="utf-8")

    def no_weights(self):
        raise AssertionError("the weights were read")

    monkeypatch.setattr(model_source.ModelSource, "load", no_weights)
    output = tmp_path / "predictions.csv"
    assert main(["predict", "--model", model, "--input", str(texts), "--output",
                 str(output)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"bert-jax predict: error: {output}: unknown output type '.csv'; expected .jsonl or "
        ".tsv")


def test_ner_predict_keeps_the_document_lines(tmp_path):
    model = _task_model(tmp_path, "ner", {"label_names": ["O", "B-PER", "I-PER"]},
                        {"classifier": 3})
    conll = tmp_path / "test.conll"
    conll.write_text("-DOCSTART- -X- O\n\nJohn NNP\nsaw VBD\n\nMary NNP\n\n"
                     "-DOCSTART- -X- O\n\nhe PRP\n", encoding="utf-8")
    output = tmp_path / "predicted.conll"
    assert main(["predict", "--model", model, "--input", str(conll), "--output", str(output),
                 "--no-progress"]) == 0
    lines = output.read_text().split("\n")
    assert len(lines) == 12 and lines[-2:] == ["", ""]  # every sentence ends with a blank line
    given = conll.read_text().split("\n")
    # Line for line: each input line and a predicted tag (O for a document line).
    assert [line.rsplit(" ", 1)[0] for line in lines[:10]] == given[:10]
    assert lines[0] == "-DOCSTART- -X- O O" and lines[7] == "-DOCSTART- -X- O O"
    assert all(line.split()[-1] in ("O", "B-PER", "I-PER") for line in lines if line)


def test_a_max_seq_len_that_leaves_no_text_is_refused(tmp_path, capsys):
    model = tiny_model_directory(tmp_path)
    train = write_tsv(tmp_path / "train.tsv", made_up_sentences(8, seed=0))
    workdir = tmp_path / "run"
    assert main(["finetune", "classify", "--model", model, "--train", train, "--workdir",
                 str(workdir), "--max-seq-len", "2", "--no-progress"]) == 2
    assert capsys.readouterr().err.strip() == (
        "bert-jax finetune: error: finetune: --max-seq-len must be at least 3, got 2")
    assert not workdir.exists()
    pairs = write_tsv(tmp_path / "pairs.tsv", [("pos", "he was happy", "the man went"),
                                              ("neg", "the dog", "sat on a mat")],
                      header=("label", "first", "second"))
    assert main(["finetune", "classify", "--model", model, "--train", pairs, "--workdir",
                 str(workdir), "--max-seq-len", "4", "--no-progress"]) == 2
    assert capsys.readouterr().err.strip() == (
        "bert-jax finetune: error: --max-seq-len 4 leaves a pair of texts no room for both: "
        "[CLS] A [SEP] B [SEP] needs at least 5")
    assert not workdir.exists()


def test_qa_predict_counts_questions_not_windows(tmp_path, capsys):
    model = _task_model(tmp_path, "qa", {"max_query_len": 6, "doc_stride": 8},
                        {"qa_outputs": 2})
    context = " ".join(["the man went to the store and he bought a gallon of milk"] * 4)
    questions = {"version": "1.1", "data": [{"title": "t", "paragraphs": [
        {"context": context, "qas": [{"id": "a", "question": "what did he buy ?"},
                                     {"id": "b", "question": "where did he go ?"}]}]}]}
    path = tmp_path / "questions.json"
    path.write_text(json.dumps(questions), encoding="utf-8")
    output = tmp_path / "answers" / "predictions.json"
    assert main(["predict", "--model", model, "--input", str(path), "--output", str(output),
                 "--no-progress"]) == 0
    assert f"wrote 2 predictions to {output}" in capsys.readouterr().out  # of 10 windows
    assert sorted(json.loads(output.read_text())) == ["a", "b"]


@pytest.mark.parametrize("name, content, words", [
    ("empty.txt", b"", "input file has no text"),
    ("latin1.txt", "Caf\u00e9 au lait.\nA second line.\n".encode("latin-1"),
     "line 1: not UTF-8 (invalid continuation byte)"),
    ("cut.txt", "One sentence.\nAnother one, cut in the middle of \u00e9".encode()[:-1],
     "line 2: not UTF-8 (unexpected end of data)"),
])
def test_create_data_refuses_a_bad_input_before_starting_work(tmp_path, monkeypatch, capsys,
                                                              name, content, words):
    import multiprocessing

    from input_pipeline import create_data

    def started(*_, **__):
        raise AssertionError("work started before the input was read")

    monkeypatch.setattr(create_data._ShardSet, "open", started)  # imports TensorFlow
    monkeypatch.setattr(multiprocessing, "get_context", started)  # the worker processes
    path = tmp_path / name
    path.write_bytes(content)
    output = tmp_path / "shards"
    assert main(["create-data", "--input", str(path), "--vocab", write_vocabulary(str(tmp_path)),
                 "--output-dir", str(output), "--workers", "2", "--quiet"]) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"bert-jax create-data: error: {path}: {words}") and not output.exists()
