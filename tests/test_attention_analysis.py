"""Word-level attention, the probe's scoring and the CoNLL-U reader, on hand-made inputs."""

import numpy as np
import pytest

from bert_jax.analysis.probe import DIRECTIONS, OFFSETS, ProbeCounts, head_predictions
from bert_jax.analysis.statistics import attention_statistics, is_punctuation
from bert_jax.analysis.word_attention import piece_word_ids, word_attention
from bert_jax.errors import UserError
from input_pipeline.tasks.conllu import read_conllu


def test_word_attention_sums_to_and_averages_from_the_pieces():
    # [CLS] play ##ing cats [SEP]: word 0 has two pieces, word 1 one.
    word_ids = piece_word_ids([2, 1])
    np.testing.assert_array_equal(word_ids, [-1, 0, 0, 1, -1])
    attention = np.array([
        [0.5, 0.1, 0.1, 0.2, 0.1],
        [0.2, 0.3, 0.1, 0.3, 0.1],
        [0.1, 0.2, 0.2, 0.4, 0.1],
        [0.3, 0.1, 0.3, 0.1, 0.2],
        [0.6, 0.1, 0.1, 0.1, 0.1],
    ])
    words = word_attention(attention[None, None], word_ids)[0, 0]  # (W, W)
    # from "playing": mean of its two rows; to "playing": sum of its two columns.
    expected = np.array([
        [((0.3 + 0.1) + (0.2 + 0.2)) / 2, (0.3 + 0.4) / 2],
        [0.1 + 0.3, 0.1],
    ])
    np.testing.assert_allclose(words, expected)  # float64 sums of 2: default 1e-7 relative
    # Attention to [CLS]/[SEP] is dropped, not renormalised: rows sum to less than 1.
    # float64 sums of at most 1 (1e-12 is 4500 float64 steps of 1).
    assert (words.sum(axis=1) <= 1 + 1e-12).all() and words.sum(axis=1)[1] == pytest.approx(0.5)


def test_word_attention_of_random_maps_against_a_loop():
    rng = np.random.default_rng(0)
    pieces = [1, 3, 2, 1]
    word_ids = piece_word_ids(pieces)
    attention = rng.dirichlet(np.ones(len(word_ids)), size=(2, 3, len(word_ids)))  # (L,H,T,T)
    words = word_attention(attention, word_ids)
    for source in range(len(pieces)):
        for target in range(len(pieces)):
            rows, columns = np.flatnonzero(word_ids == source), np.flatnonzero(word_ids == target)
            expected = attention[..., rows, :][..., columns].sum(-1).mean(-1)
            # float64 on both sides, summed in another order: the default 1e-7 relative.
            np.testing.assert_allclose(words[..., source, target], expected)


# Two sentences: words, 1-based heads (0 = root), relations. The last word of each is the
# root, so a head attending one word to the right is wrong exactly where offset +1 is.
SENTENCES = [
    (["the", "big", "dog", "barks"], [3, 3, 4, 0], ["det", "amod", "nsubj", "root"]),
    (["his", "cat", "a", "mouse", "chased"], [2, 5, 4, 5, 0],
     ["nmod:poss", "nsubj", "det", "obj", "root"]),
]


def _synthetic_attention(heads: list[int]) -> np.ndarray:
    """(1, 3, W, W): head 0 attends to each word's gold head, head 1 to the next word,
    head 2 from each head word to its dependents (uniformly)."""
    num_words = len(heads)
    attention = np.zeros((1, 3, num_words, num_words))
    for word, head in enumerate(heads):
        if head:
            attention[0, 0, word, head - 1] = 1.0
            attention[0, 2, head - 1, word] = 1.0
        else:
            attention[0, 0, word, word] = 1.0  # the root: only itself (ignored by the probe)
        attention[0, 1, word, min(word + 1, num_words - 1)] = 1.0
    attention[0, 2] /= np.maximum(attention[0, 2].sum(-1, keepdims=True), 1)
    return attention


def _probe_synthetic():
    counts = ProbeCounts(num_layers=1, num_heads=3)
    for words, heads, relations in SENTENCES:
        counts.add(words, heads, relations, _synthetic_attention(heads))
    return counts.result()


def test_probe_scores_gold_attention_perfectly_and_a_shift_as_its_offset():
    result = _probe_synthetic()
    assert result.relations[-1] == "all" and result.counts[-1] == 9
    for relation in result.relations:
        accuracy = result.head_accuracy[result.index(relation)]  # (2, L, H)
        expected = 0.0 if relation in ("root", "all") else 1.0
        if relation != "all":
            assert accuracy[0, 0, 0] == expected, relation  # dependent->head, gold head
            assert accuracy[1, 0, 2] == expected, relation  # head->dependent
        shifted = accuracy[0, 0, 1]
        assert shifted == result.offset_accuracy[result.index(relation), OFFSETS.index(1)]
    # 7 of the 9 words are not roots; the gold head gets all of them.
    assert result.head_accuracy[-1, 0, 0, 0] == pytest.approx(7 / 9)  # float64 ratios
    best = result.best_head("det")
    assert (best["layer"], best["head"], best["direction"], best["accuracy"]) == (
        1, 1, DIRECTIONS[0], 1.0)
    # det: "the" -> "dog" is +2 away, "a" -> "mouse" +1: each offset gets one of two.
    assert result.best_offset("det")["accuracy"] == 0.5
    # Only falling off the start predicts the root; these roots are last, so no offset does.
    assert result.best_offset("root") == dict(offset=-3, accuracy=0.0)
    rows = {row["relation"]: row for row in result.rows(min_count=2)}
    assert set(rows) == {"nsubj", "det", "all"}  # root: no head can predict it
    assert rows["det"]["margin"] == pytest.approx(0.5)  # float64 on both sides (tolerances.py)


def test_possessor_is_scored_by_the_clitic_prediction():
    words, heads = ["john", "'s", "cat", "sleeps"], [3, 1, 4, 0]
    relations = ["nmod:poss", "case", "nsubj", "root"]
    attention = _synthetic_attention(heads)  # "'s" attends to "john", its own gold head
    predictions = head_predictions(attention)
    assert predictions.shape == (2, 1, 3, 4) and predictions[0, 0, 0, 0] == 3
    for clitic_target, possessor_accuracy in ((0, 0.0), (2, 1.0)):
        attention[0, 0, 1] = np.eye(4)[clitic_target]
        counts = ProbeCounts(1, 3)
        counts.add(words, heads, relations, attention)
        result = counts.result()
        assert result.head_accuracy[result.index("nmod:poss"), 0, 0, 0] == possessor_accuracy
        assert result.head_accuracy[result.index("case"), 0, 0, 0] == 1 - possessor_accuracy


def test_head_statistics_of_a_hand_made_map():
    tokens = ["[CLS]", "hi", ",", "[SEP]"]
    attention = np.array([[[[1, 0, 0, 0], [0.5, 0.5, 0, 0], [0, 0, 0.5, 0.5],
                            [0.25, 0.25, 0.25, 0.25]]]])  # (1, 1, 4, 4)
    statistics = attention_statistics(attention, tokens)
    # float64 means of exact fractions, and logs, on both sides (tolerances.py).
    assert statistics["to_cls"][0, 0] == pytest.approx((1 + 0.5 + 0 + 0.25) / 4)
    assert statistics["to_sep"][0, 0] == pytest.approx((0.5 + 0.25) / 4)
    assert statistics["to_punctuation"][0, 0] == pytest.approx((0.5 + 0.25) / 4)
    assert statistics["to_self"][0, 0] == pytest.approx((1 + 0.5 + 0.5 + 0.25) / 4)
    assert statistics["entropy"][0, 0] == pytest.approx((0 + 2 * np.log(2) + np.log(4)) / 4)
    assert statistics["uniform_entropy"] == pytest.approx(np.log(4))
    assert is_punctuation("##.") and is_punctuation("...") and not is_punctuation("[SEP]")
    assert not is_punctuation("a.") and not is_punctuation("##a")


CONLLU = """\
# sent_id = first
# text = I don't know.
1\tI\tI\tPRON\tPRP\t_\t4\tnsubj\t4:nsubj\t_
2-3\tdon't\t_\t_\t_\t_\t_\t_\t_\t_
2\tdo\tdo\tAUX\tVBP\t_\t4\taux\t4:aux\t_
3\tn't\tnot\tPART\tRB\t_\t4\tadvmod\t4:advmod\t_
4\tknow\tknow\tVERB\tVB\t_\t0\troot\t0:root\t_
4.1\tknow\tknow\tVERB\tVB\t_\t_\t_\t4:conj\t_
5\t.\t.\tPUNCT\t.\t_\t4\tpunct\t4:punct\t_

1\tYes\tyes\tINTJ\tUH\t_\t0\troot\t0:root\t_
"""


def test_conllu_skips_multiword_ranges_and_empty_nodes(tmp_path):
    path = tmp_path / "tiny.conllu"
    path.write_text(CONLLU, encoding="utf-8")
    first, second = list(read_conllu(str(path)))
    assert first.words == ("I", "do", "n't", "know", ".")
    assert first.heads == (4, 4, 4, 0, 4)
    assert first.relations == ("nsubj", "aux", "advmod", "root", "punct")
    assert first.sentence_id == "first"
    assert second.words == ("Yes",) and second.heads == (0,)
    assert second.sentence_id == f"{path}:11"  # no sent_id comment: file and first line


@pytest.mark.parametrize("broken, line, fragment", [
    ("2\tdo\tdo\tAUX\tVBP\t_\t4\taux\t4:aux", 5, "10 tab-separated columns"),
    ("2\tdo\tdo\tAUX\tVBP\t_\tfour\taux\t4:aux\t_", 5, "HEAD (column 7) must be an integer"),
    ("7\tdo\tdo\tAUX\tVBP\t_\t4\taux\t4:aux\t_", 5, "expected word ID 2"),
])
def test_conllu_errors_name_the_line(tmp_path, broken, line, fragment):
    path = tmp_path / "broken.conllu"
    lines = CONLLU.splitlines()
    lines[line - 1] = broken
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(UserError, match=f"{path}:{line}: .*{fragment}".replace("(", r"\(")
                       .replace(")", r"\)")):
        list(read_conllu(str(path)))


def test_conllu_head_beyond_the_sentence_and_missing_file(tmp_path):
    path = tmp_path / "far.conllu"
    path.write_text("1\tHi\thi\tINTJ\tUH\t_\t3\troot\t_\t_\n", encoding="utf-8")
    with pytest.raises(UserError, match="line 1 has a HEAD 3 beyond its 1 words"):
        list(read_conllu(str(path)))
    with pytest.raises(UserError, match="treebank file not found"):
        list(read_conllu(str(tmp_path / "absent.conllu")))


def test_head_view_page_round_trips_its_data_even_with_markup_in_tokens():
    from bert_jax.analysis.head_view import head_view_html, read_page_data

    tokens = ["[CLS]", "</script>", "<b>", "[SEP]"]
    attention = np.random.default_rng(1).dirichlet(np.ones(4), size=(2, 3, 4))  # (L, H, T, T)
    html = head_view_html(tokens, attention, title="<i>title</i>")
    assert html.count("</script>") == 2  # the data's and the code's, none from a token
    data = read_page_data(html)
    assert data["tokens"] == tokens and data["layers"] == [1, 2] and data["num_heads"] == 3
    # The page keeps each probability in steps of 1/255: half of one off at most.
    np.testing.assert_allclose(data["attention"], attention, atol=0.5 / 255 + 1e-9)
    assert "&lt;i&gt;title&lt;/i&gt;" in html
