"""CoNLL reading, IOB1 -> IOB2, word-piece label alignment, seqeval scores, layer combinations."""

import os

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tolerances import assert_close

from bert_jax.models.presets import preset
from bert_jax.errors import UserError
from bert_jax.models.frozen_encoder_heads import FeatureTokenClassifier, LayerCombination
from bert_jax.tasks.entity_metrics import entity_scores
from input_pipeline.tasks import word_labels
from input_pipeline.tasks.conll import (check_known_tags, iob1_to_iob2, label_names,
                                        read_conll, write_conll)
from input_pipeline.tokenization import load_tokenizer
from tests.interop_helpers import minilm_directory

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
         "peter", "black", "##burn", "##er", "went", "home", "."]


def write(tmp_path, name: str, text: str) -> str:
    path = os.path.join(str(tmp_path), name)
    with open(path, "w", encoding="utf-8") as file:
        file.write(text)
    return path


@pytest.fixture
def tokenizer(tmp_path):
    write(tmp_path, "vocab.txt", "\n".join(VOCAB) + "\n")
    return load_tokenizer(str(tmp_path), lowercase=True)


def test_read_conll_skips_docstart_and_keeps_fields(tmp_path):
    path = write(tmp_path, "a.txt", "-DOCSTART- -X- -X- O\n\nEU NNP B-NP B-ORG\nrejects VBZ B-VP O"
                 "\n\nPeter NNP B-NP B-PER\nBlackburn NNP I-NP I-PER\n\n\n")
    data = read_conll(path)
    assert data.scheme == "iob2"
    assert [s.words for s in data.sentences] == [("EU", "rejects"), ("Peter", "Blackburn")]
    assert [s.tags for s in data.sentences] == [("B-ORG", "O"), ("B-PER", "I-PER")]
    assert [s.line for s in data.sentences] == [3, 6]
    assert read_conll(path, tag_column=2).sentences[0].tags == ("B-NP", "B-VP")
    assert read_conll(path, tag_column=None).sentences[1].tags is None
    assert label_names(data.sentences) == ["O", "B-ORG", "I-ORG", "B-PER", "I-PER"]


def test_iob1_becomes_iob2():
    # IOB1: I- opens an entity; B- only separates two adjacent entities of one type.
    tags = ["I-PER", "I-PER", "O", "I-LOC", "B-LOC", "I-ORG", "I-LOC", "O", "B-MISC"]
    assert iob1_to_iob2(tags) == ["B-PER", "I-PER", "O", "B-LOC", "B-LOC", "B-ORG", "B-LOC",
                                  "O", "B-MISC"]
    assert iob1_to_iob2(iob1_to_iob2(tags)) == iob1_to_iob2(tags)  # IOB2 stays as it is


def test_iob1_file_is_detected_and_converted(tmp_path):
    path = write(tmp_path, "a.txt", "U.N. I-ORG\nofficial O\nEkeus I-PER\nheads O\n"
                 "for O\nBaghdad I-LOC\nand O\nKurdistan I-LOC\nLondon B-LOC\n")
    data = read_conll(path)
    assert data.scheme == "iob1"
    assert data.sentences[0].tags == ("B-ORG", "O", "B-PER", "O", "O", "B-LOC", "O", "B-LOC",
                                      "B-LOC")
    assert read_conll(path, scheme="iob2").sentences[0].tags[0] == "I-ORG"


@pytest.mark.parametrize("text, message", [
    ("EU B-ORG\nrejects VBZ O\n", r"a.txt:2: 3 field\(s\) 'rejects VBZ O'; every token line must have 2"),
    ("", "no sentences"),
    ("-DOCSTART- O\n\n\n", "no sentences"),
    ("EU ORG\n", "a.txt:1: tag 'ORG' is not an IOB tag"),
    ("EU\n", "tag column -1 does not exist"),
])
def test_bad_conll_is_a_user_error_naming_the_line(tmp_path, text, message):
    with pytest.raises(UserError, match=message):
        read_conll(write(tmp_path, "a.txt", text))


def test_eval_tag_unseen_in_training_is_a_user_error(tmp_path):
    train = read_conll(write(tmp_path, "train.txt", "Peter B-PER\n\nParis B-LOC\nEU B-ORG\n"))
    check_known_tags(read_conll(write(tmp_path, "ok.txt", "Paris I-LOC\n")), label_names(
        train.sentences))  # I-LOC was never in training, but LOC was: fine
    evaluation = read_conll(write(tmp_path, "eval.txt", "EU B-ORG\nsaid O\n\nIBM B-CORP\n"))
    with pytest.raises(UserError, match=r"eval.txt:4: tag 'B-CORP' was not seen in training"):
        check_known_tags(evaluation, label_names(train.sentences))


def test_write_conll_appends_the_predicted_column(tmp_path):
    data = read_conll(write(tmp_path, "a.txt", "EU NNP B-ORG\nrejects VBZ O\n\nPeter NNP B-PER\n"))
    out = os.path.join(str(tmp_path), "out.txt")
    write_conll(out, data.sentences, [["B-ORG", "B-LOC"], ["O"]])
    assert open(out).read() == "EU NNP B-ORG B-ORG\nrejects VBZ O B-LOC\n\nPeter NNP B-PER O\n\n"
    assert sorted(os.listdir(tmp_path)) == ["a.txt", "out.txt"]  # no temporary left behind


LABELS = {"O": 0, "B-ORG": 1, "I-ORG": 2, "B-PER": 3, "I-PER": 4}
SENTENCES = [["Peter", "Blackburn", "went", "home"], ["Blackburner", "went", "."]]
TAGS = [["B-PER", "I-PER", "O", "O"], ["B-ORG", "O", "O"]]
I = word_labels.IGNORED


def test_first_subword_carries_the_label(tokenizer):
    windows = word_labels.align(tokenizer, SENTENCES, TAGS, LABELS, 32)
    ids = [VOCAB.index(t) for t in ["[CLS]", "black", "##burn", "##er", "went", ".", "[SEP]"]]
    assert windows[1].input_ids.tolist() == ids
    assert windows[1].labels.tolist() == [I, 1, I, I, 0, 0, I]
    assert windows[0].labels.tolist() == [I, 3, 4, I, 0, 0, I]
    assert windows[0].word_starts.tolist() == [1, 2, 4, 5]


def test_all_subwords_labelled_with_b_turned_into_i(tokenizer):
    windows = word_labels.align(tokenizer, SENTENCES, TAGS, LABELS, 32, label_all_subwords=True)
    assert windows[1].labels.tolist() == [I, 1, 2, 2, 0, 0, I]
    assert windows[0].labels.tolist() == [I, 3, 4, 4, 0, 0, I]


def test_long_sentences_split_into_windows_and_join_back(tokenizer):
    # Room for 3 pieces: [peter][black ##burn] | [went][home]; [black ##burn ##er] | [went .]
    windows = word_labels.align(tokenizer, SENTENCES, TAGS, LABELS, 5)
    assert [(w.sentence, w.first_word, len(w.input_ids)) for w in windows] == [
        (0, 0, 5), (0, 2, 4), (1, 0, 5), (1, 1, 4)]
    batch = word_labels.pad_windows(windows, 8, batch_size=6)
    assert batch["label_weights"].sum() == 7 and batch["input_mask"][4:, 0].tolist() == [1, 1]
    predictions = [np.where(batch["label_weights"][row] > 0, batch["labels"][row], 9)
                   for row in range(len(windows))]
    assert word_labels.word_predictions(windows, predictions, 2) == [[3, 4, 0, 0], [1, 0, 0]]


def test_word_without_pieces_becomes_unk(tokenizer):
    windows = word_labels.align(tokenizer, [["peter", "\x00", "home"]], None, LABELS, 32)
    assert windows[0].input_ids.tolist() == [2, 5, 1, 10, 3]
    assert windows[0].word_starts.tolist() == [1, 2, 3]


def test_word_pieces_equal_transformers_on_real_words():
    from transformers import BertTokenizerFast

    directory = minilm_directory()
    sentences = [["Peter", "Blackburn", "visited", "Ljubljana", "on", "1996-08-22", "."],
                 ["Müller", "didn't", "see", "U.S.", "naïve", "São", "Paulo", "fans", "(", "AFP",
                  ")", "Schwarzenegger's", "1:0", "win"]]
    ours = word_labels.word_pieces(load_tokenizer(directory), sentences)
    reference = BertTokenizerFast.from_pretrained(directory)(
        sentences, is_split_into_words=True, add_special_tokens=False)
    for index, words in enumerate(sentences):
        expected = [[] for _ in words]
        for piece, word in zip(reference["input_ids"][index], reference.word_ids(index)):
            expected[word].append(piece)
        assert ours[index] == expected
    assert max(len(pieces) for pieces in ours[0]) >= 3  # words split into several pieces


def test_entity_scores_on_a_hand_made_example():
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O"]]
    predicted = [["B-PER", "I-PER", "O", "B-ORG"], ["I-ORG", "O"]]
    # Strict IOB2: the lone I-ORG opens no entity. Predicted: PER (right), ORG at word 3
    # (wrong); gold: PER, LOC, ORG. P = 1/2, R = 1/3, F1 = 2PR/(P+R) = 0.4; words 4/6 right.
    scores = entity_scores(gold, predicted)
    # Ratios of counts in float64 (tolerances.py: approx's default).
    assert scores["precision"] == pytest.approx(0.5)
    assert scores["recall"] == pytest.approx(1 / 3)
    assert scores["f1"] == pytest.approx(0.4)
    assert scores["accuracy"] == pytest.approx(4 / 6)
    assert scores["per_type"]["PER"] == dict(precision=1.0, recall=1.0, f1=1.0, support=1)
    assert scores["per_type"]["ORG"] == dict(precision=0.0, recall=0.0, f1=0.0, support=1)
    assert scores["per_type"]["LOC"]["support"] == 1 and scores["per_type"]["LOC"]["f1"] == 0


def test_layer_combinations_against_numpy():
    hidden = np.random.default_rng(0).normal(size=(3, 2, 4, 5)).astype(np.float32)  # (L,B,T,H)
    concat = LayerCombination("concat").apply({}, hidden)
    np.testing.assert_allclose(concat, np.concatenate(list(hidden), axis=-1))  # copies: exact
    # A sum of 3 float32 layers, in any order: 2 roundings of a partial sum no larger than
    # 3 times the largest value, on each side.
    largest = 3 * np.abs(hidden).max()
    assert_close(LayerCombination("sum").apply({}, hidden), hidden.sum(0), 4, scale=largest)
    logits, scale = np.array([0.3, -1.2, 2.0], np.float32), np.float32(1.7)
    weights = np.exp(logits) / np.exp(logits).sum()
    expected = scale * np.tensordot(weights, hidden, axes=1)  # (B, T, H)
    mixed = LayerCombination("scalar-mix").apply(
        {"params": {"layer_weights": logits, "scale": scale}}, hidden)
    # A softmax of 3 logits (3 exponentials, a sum, a division), 3 weighted terms summed and
    # a scale: about 9 roundings of the largest term on each side.
    assert_close(mixed, expected, 18, scale=scale * largest)
    initial = LayerCombination("scalar-mix").init(jax.random.key(0), hidden)
    assert_close(LayerCombination("scalar-mix").apply(initial, hidden), hidden.mean(0), 18,
                 scale=largest)  # starts as the mean


def test_feature_head_trains_the_mix_but_not_the_encoder():
    config = preset("tiny", hidden_dim=8, num_heads=2)
    head = FeatureTokenClassifier(config, num_labels=3, combine="scalar-mix")
    hidden = jnp.asarray(np.random.default_rng(1).normal(size=(4, 2, 3, 8)), jnp.float32)
    params = nn.unbox(head.init(jax.random.key(0), hidden)["params"])

    def loss(params, hidden):
        return jnp.sum(head.apply({"params": params}, hidden) ** 2)

    parameter_grads, hidden_grads = jax.grad(loss, argnums=(0, 1))(params, hidden)
    assert float(jnp.abs(parameter_grads["combination"]["layer_weights"]).sum()) > 0
    assert float(jnp.abs(hidden_grads).sum()) == 0.0
