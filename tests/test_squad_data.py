"""SQuAD reading and windows: offsets, doc stride, max context, bad input."""

import json
import logging
import os

import numpy as np
import pytest

from bert_jax.errors import UserError
from input_pipeline.tasks.squad import read_squad
from input_pipeline.tasks.squad_windows import (answer_tokens, make_windows, max_context_mask,
                                                piece_starts)
from input_pipeline.tokenization import load_tokenizer
from tests.interop_helpers import minilm_directory

SHARED_SQUAD = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data", "tasks",
                            "squad")

CONTEXT = ("Architecturally, the school has a Catholic character. Atop the Main Building's gold "
           "dome is a golden statue of the Virgin Mary. Immediately in front of the Main "
           "Building and facing it, is a copper statue of Christ with arms upraised with the "
           "legend \"Venite Ad Me Omnes\". Next to the Main Building is the Basilica of the "
           "Sacred Heart. It is a replica of the grotto at Lourdes, France where the Virgin Mary "
           "reputedly appeared to Saint Bernadette Soubirous in 1858.")
ANSWERS = [("To whom did the Virgin Mary allegedly appear in 1858 in Lourdes France?",
            "Saint Bernadette Soubirous"),
           ("What is in front of the Notre Dame Main Building?", "a copper statue of Christ"),
           ("What sits on top of the Main Building at Notre Dame?", "a golden statue"),
           ("What is the legend on the statue?", "\"Venite Ad Me Omnes\""),
           ("Where is the grotto?", "Lourdes, France"),
           ("Which character does the school have?", "Catholic")]


def squad_document(version_2: bool = False) -> dict:
    qas = [{"id": f"q{number}", "question": question,
            "answers": [{"text": text, "answer_start": CONTEXT.index(text)}]}
           for number, (question, text) in enumerate(ANSWERS)]
    if version_2:
        for qa in qas:
            qa["is_impossible"] = False
        qas.append({"id": "impossible", "question": "Who built the grotto?", "answers": [],
                    "is_impossible": True})
    return {"version": "v2.0" if version_2 else "1.1",
            "data": [{"title": "Notre Dame", "paragraphs": [{"context": CONTEXT, "qas": qas}]}]}


def write_json(path, value) -> str:
    path.write_text(json.dumps(value), encoding="utf-8")
    return str(path)


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(minilm_directory())


def test_reads_v1_and_detects_v2(tmp_path):
    version_1 = read_squad(write_json(tmp_path / "a.json", squad_document()))
    version_2 = read_squad(write_json(tmp_path / "b.json", squad_document(version_2=True)))
    assert not version_1.version_2 and version_2.version_2
    assert [q.question_id for q in version_2.questions][-1] == "impossible"
    assert version_2.questions[-1].is_impossible and not version_2.questions[-1].answer_texts
    assert version_1.questions[0].answer_spans == ((CONTEXT.index("Saint"),
                                                    CONTEXT.index(" in 1858")),)


@pytest.mark.parametrize("max_seq_len,doc_stride", [(384, 128), (40, 7), (33, 16)])
def test_every_gold_answer_round_trips_to_its_text(tokenizer, tmp_path, max_seq_len,
                                                   doc_stride):
    """Long contexts in short windows: each answer found in some window, cut back exactly."""
    squad = read_squad(write_json(tmp_path / "a.json", squad_document(version_2=True)))
    windows = make_windows(squad.questions, tokenizer, max_seq_len, doc_stride, 64 if
                           max_seq_len > 100 else 16, training=True)
    found = set()
    for row in range(len(windows)):
        question = squad.questions[windows.question_index[row]]
        start, end = windows.start_positions[row], windows.end_positions[row]
        if start == 0:
            assert end == 0
            continue
        offsets = windows.token_offsets[row]
        assert question.context[offsets[start, 0]:offsets[end, 1]] == question.answer_texts[0]
        assert windows.segment_ids[row, start] == windows.segment_ids[row, end] == 1
        found.add(question.question_id)
    assert found == {f"q{number}" for number in range(len(ANSWERS))}
    if max_seq_len < 100:
        assert len(windows) > 2 * len(squad.questions)  # several windows per question


def test_windows_equal_bert_tokenizer_fast(tokenizer, tmp_path):
    """Ids and offsets equal transformers' BertTokenizerFast; the windows equal its overflow
    windows when its overlap is set to window length - our stride."""
    transformers = pytest.importorskip("transformers")
    reference = transformers.BertTokenizerFast.from_pretrained(minilm_directory())
    squad = read_squad(write_json(tmp_path / "a.json", squad_document()))
    max_seq_len, doc_stride = 48, 12
    windows = make_windows(squad.questions, tokenizer, max_seq_len, doc_stride, 32)
    for number, question in enumerate(squad.questions):
        query_len = len(reference(question.question, add_special_tokens=False)["input_ids"])
        expected = reference(question.question, question.context, truncation="only_second",
                             max_length=max_seq_len, return_overflowing_tokens=True,
                             stride=max_seq_len - query_len - 3 - doc_stride,
                             return_offsets_mapping=True)
        rows = np.flatnonzero(windows.question_index == number)
        assert len(rows) == len(expected["input_ids"])
        for row, ids, types, offsets in zip(rows, expected["input_ids"],
                                            expected["token_type_ids"],
                                            expected["offset_mapping"]):
            length = len(ids)
            np.testing.assert_array_equal(windows.input_ids[row, :length], ids)
            assert windows.input_mask[row].sum() == length
            np.testing.assert_array_equal(windows.segment_ids[row, :length], types)
            context = np.array(types) == 1
            context[length - 1] = False  # the final [SEP]
            np.testing.assert_array_equal(windows.token_offsets[row, :length][context],
                                          np.array(offsets)[context])
            assert (windows.token_offsets[row, :length][~context] == -1).all()


def test_piece_starts_and_max_context_follow_the_original():
    # The original's doc_spans loop on 10 tokens, 4 per piece, stride 3: starts 0, 3, 6.
    assert piece_starts(10, 4, 3) == [(0, 4), (3, 4), (6, 4)]
    assert piece_starts(3, 4, 3) == [(0, 3)]
    assert piece_starts(0, 4, 3) == []
    masks = max_context_mask([(0, 4), (3, 4), (6, 4)])
    # Token 3: min(3, 0) + .04 in span 0 ties min(0, 3) + .04 in span 1: the first wins;
    # token 6 likewise goes to span 1 over span 2; token 5: min(2, 1) in span 1 alone.
    assert [mask.tolist() for mask in masks] == [[True, True, True, True],
                                                 [False, True, True, True],
                                                 [False, True, True, True]]
    # Token 3 of spans [0, 4) and [2, 5): min(3, 0) + .04 against min(1, 1) + .03.
    assert [mask.tolist() for mask in max_context_mask([(0, 4), (2, 3)])] == [
        [True, True, True, False], [False, True, True]]


def test_answer_tokens_inside_a_word():
    offsets = np.array([[0, 5], [5, 8], [9, 13]])  # "start" "ing" " word"
    assert answer_tokens(offsets, (0, 8)) == (0, 1)
    assert answer_tokens(offsets, (6, 7)) == (1, 1)  # inside a piece: the piece
    assert answer_tokens(offsets, (2, 13)) == (0, 2)


def test_real_files_round_trip(tokenizer):
    """Every located answer of XQuAD-English: cut back exactly unless it ends inside a token."""
    path = os.path.join(SHARED_SQUAD, "dev-v1.1.xquad-en.json")
    if not os.path.exists(path):
        pytest.skip("../shared/data/tasks/squad is absent (reference data, not in the repo)")
    squad = read_squad(path)
    windows = make_windows(squad.questions, tokenizer, 384, 128, 64, training=True)
    exact = inside = 0
    for row in np.flatnonzero(windows.start_positions > 0):
        question = squad.questions[windows.question_index[row]]
        offsets = windows.token_offsets[row]
        first, last = offsets[windows.start_positions[row], 0], \
            offsets[windows.end_positions[row], 1]
        answer_start, answer_end = question.answer_spans[0]
        if (first, last) == (answer_start, answer_end):
            exact += 1
        else:  # the answer starts or ends inside a word piece: the covering pieces
            assert first <= answer_start < answer_end <= last
            inside += 1
    assert exact + inside >= 1150 and inside <= 2


def test_misplaced_answer_is_warned_skipped_and_counted(tmp_path, caplog):
    document = squad_document()
    document["data"][0]["paragraphs"][0]["qas"][1]["answers"][0]["answer_start"] += 3
    with caplog.at_level(logging.WARNING):
        squad = read_squad(write_json(tmp_path / "a.json", document))
    assert squad.misplaced_answers == 1
    assert "question id 'q1'" in caplog.text
    assert squad.questions[1].answer_spans == () and squad.questions[1].answer_texts


@pytest.mark.parametrize("change,message", [
    (lambda d: d.pop("data"), "missing key 'data'"),
    (lambda d: d["data"][0]["paragraphs"][0].pop("context"), "paragraphs[0]: missing key"),
    (lambda d: d["data"][0]["paragraphs"][0]["qas"][2].pop("question"), "question id 'q2'"),
    (lambda d: d["data"][0]["paragraphs"][0]["qas"][3]["answers"][0].update(answer_start="x"),
     "question id 'q3', answer 0: 'answer_start'"),
    (lambda d: d["data"][0]["paragraphs"][0]["qas"][4].update(id="q0"), "duplicate"),
])
def test_malformed_files_name_the_place(tmp_path, change, message):
    document = squad_document()
    change(document)
    with pytest.raises(UserError, match=message.replace("[", r"\[").replace("]", r"\]")):
        read_squad(write_json(tmp_path / "a.json", document))


def test_bad_json_and_lengths(tmp_path, tokenizer, caplog):
    broken = tmp_path / "broken.json"
    broken.write_text('{"data": [', encoding="utf-8")
    with pytest.raises(UserError, match="broken.json: not valid JSON"):
        read_squad(str(broken))
    squad = read_squad(write_json(tmp_path / "a.json", squad_document()))
    with pytest.raises(UserError, match="--max-query-len 64 leaves no room"):
        make_windows(squad.questions, tokenizer, max_seq_len=64, max_query_len=64)
    with caplog.at_level(logging.WARNING):
        windows = make_windows(squad.questions, tokenizer, 64, 32, max_query_len=8)
    assert "question id 'q0'" in caplog.text and "truncated" in caplog.text
    first_window = windows.question_index == 0  # q0 has 15 tokens
    assert (windows.input_ids[first_window, 9] == tokenizer.sep_id).all()  # [CLS] 8 tokens [SEP]
    assert (windows.segment_ids[first_window, 9] == 0).all()
    assert (windows.segment_ids[first_window, 10] == 1).all()


def test_fine_tuning_warns_a_misplaced_answer_once(tmp_path, tokenizer, caplog):
    """The task's settings (the file's version) and its examples both read the training
    file: each warning was printed twice."""
    import argparse

    from bert_jax.tasks.question_answering import QuestionAnsweringTask

    document = squad_document()
    document["data"][0]["paragraphs"][0]["qas"][1]["answers"][0]["answer_start"] += 3
    path = write_json(tmp_path / "train.json", document)
    parser = argparse.ArgumentParser()
    QuestionAnsweringTask.add_arguments(parser)
    args = parser.parse_args([])
    args.train = path
    with caplog.at_level(logging.WARNING):
        task = QuestionAnsweringTask.from_arguments(args, tokenizer)
        task.read_examples(path, tokenizer, 128)
    # The answer's own line and the file's count, once each.
    assert caplog.text.count("does not point at") == 2, caplog.text
    caplog.clear()
    document["data"][0]["paragraphs"][0]["qas"][2]["answers"][0]["answer_start"] += 1
    write_json(tmp_path / "train.json", document)  # a changed file is read again
    with caplog.at_level(logging.WARNING):
        assert read_squad(path).misplaced_answers == 2
    assert "2 answer(s) skipped" in caplog.text
