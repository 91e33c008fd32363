"""A `tokenizer.json` (ModernBERT's byte-level BPE) against transformers' `AutoTokenizer` on the
same directory (`PreTrainedTokenizerFast`): ids, pairs, special tokens written in text,
offsets, words; and the directories, shards and vocabularies it travels through."""

import json
import os
import pickle

import numpy as np
import pytest
import test_tokenization
import tokenizer_json_helpers

from bert_jax.errors import UserError
from input_pipeline.tokenization import load_tokenizer

# Special tokens as ModernBERT reads them: [MASK] takes the space before it (lstrip), the
# others keep theirs; near misses stay text; the other added tokens (special or not) too.
MODERNBERT_SPECIAL_TEXT = [
    "The capital of France is [MASK].",
    "[MASK] starts, a[MASK]b, two [MASK] [MASK], tab\t[MASK] and newline\n[MASK]",
    "[CLS] first [SEP] second [SEP][SEP]x [PAD] [UNK] [unused0]",
    "[mask] [ MASK ] [MASK ] <|endoftext|>then <|padding|> |||IP_ADDRESS||| x",
    "runs of  two,    four and       seven spaces",
]
TEXTS = test_tokenization.MADE_UP_TEXT + test_tokenization.SPECIAL_TOKEN_TEXT + \
    MODERNBERT_SPECIAL_TEXT


@pytest.fixture(scope="module")
def modernbert_directory(tmp_path_factory):
    return tokenizer_json_helpers.write_modernbert_tokenizer(
        str(tmp_path_factory.mktemp("modernbert") / "tokenizer"))


@pytest.fixture(scope="module")
def pair(modernbert_directory):
    """(ours, transformers' AutoTokenizer) on the ModernBERT-like directory."""
    from transformers import AutoTokenizer
    return load_tokenizer(modernbert_directory), AutoTokenizer.from_pretrained(
        modernbert_directory)


def test_ids_equal_transformers_on_texts_and_special_tokens(pair):
    ours, reference = pair
    expected = reference(TEXTS, add_special_tokens=False)["input_ids"]
    assert ours.encode_batch(TEXTS) == expected
    tokens, lengths = ours.encode_corpus(TEXTS)
    assert tokens.tolist() == [i for ids in expected for i in ids]
    assert lengths.tolist() == [len(ids) for ids in expected]
    for text in TEXTS:
        assert ours.tokenize(text) == reference.tokenize(text)
    # The reading is ModernBERT's: [MASK] one token with the space before it taken, and
    # each of the other special tokens one token.
    mask = [ours.id_to_token(i) for i in expected[len(TEXTS) - len(MODERNBERT_SPECIAL_TEXT)]]
    assert mask[-3:] == ["Ġis", "[MASK]", "."]
    assert ours.encode_batch(["[CLS][SEP][PAD][UNK]"])[0] == [
        ours.cls_id, ours.sep_id, ours.pad_id, ours.unk_id]
    # With the template: single texts as transformers' __call__ gives them.
    single = ours.encode_for_model(TEXTS, 512)
    for row, ids in enumerate(reference(TEXTS)["input_ids"]):
        assert single["input_ids"][row, :len(ids)].tolist() == ids
        assert single["input_mask"][row].sum() == len(ids)


# Texts the shard writer's word cache must encode whole, or cut exactly where the
# pre-tokenizer cuts: odd spaces, added tokens raw and normalised, NFC's compositions.
ODD_TEXTS = ["", " ", "a\x00b", " lead", "trail ", "two  spaces", "tab\there",
             "x |||IP_ADDRESS||| y", "|||ip_address|||", "[MASK]", "[mask] word", "word [MASK]",
             "cafe\u0301 cafe\u0301", "\u212b K \u037e", "İstanbul ÉCOLE", "it 's 'll ...",
             "a <r> b <r>c", "123 4,567.89 1e10", "a\u00a0b \u3000c", "<|endoftext|>x",
             "repeat repeat repeat", "three   spaces, four    and\n    indented", "to New York"]


@pytest.mark.parametrize("variant", ["modernbert", "lowercase", "rstrip"])
def test_encode_corpus_equals_encode_batch(pair, tmp_path, variant):
    """The word cache (byte-level BPE) against encoding every text, on odd texts, on a
    lower-casing BPE and with a token that takes the space after it ("<r> b": "<r>", "b"),
    and on War and Peace when the shared data is there."""
    from input_pipeline import vocabulary
    from input_pipeline.tokenizer_json import TokenizerJson
    ours = pair[0]
    if variant == "rstrip":
        added = {**ours.settings["added_tokens_decoder"], "610": dict(
            content="<r>", rstrip=True, lstrip=False, normalized=False, special=True)}
        ours = TokenizerJson(ours.json_text, ours.path, dict(
            ours.settings, added_tokens_decoder=added), {})
        assert [ours.id_to_token(i) for i in ours.encode_batch(["a <r> b"])[0]] == [
            "a", "Ġ", "<r>", "b"]
    if variant == "lowercase":  # and "new york" one token, found after lower-casing
        text = tmp_path / "text.txt"
        text.write_text("\n".join(tokenizer_json_helpers.TRAINING_TEXT + [
            "aligned    columns    of    text"] * 3), encoding="utf-8")
        trained = load_tokenizer(os.path.dirname(vocabulary.train_bpe(
            [str(text)], 400, str(tmp_path / "bpe"), lowercase=True)))
        ours = TokenizerJson(trained.json_text, trained.path, dict(
            trained.settings, added_tokens_decoder={str(trained.vocab_size): dict(
                content="new york", normalized=True, special=False)}), {})
        assert ours.lowercase and ours.encode_batch(["New York"]) == [[trained.vocab_size]]
        assert "ĠĠ" in ours.tokens  # so three spaces are "ĠĠ" "Ġ", not "Ġ" "Ġ" "Ġ"
    assert ours._cuts_at_spaces()
    texts = TEXTS + ODD_TEXTS
    if os.path.exists(test_tokenization.WAR_AND_PEACE):
        with open(test_tokenization.WAR_AND_PEACE, encoding="utf-8") as file:
            texts += [line.strip() for line in file if line.strip()][:4000]
    # The cache carries over calls; a text of the cache's separator alone is encoded apart.
    for part in (texts, ODD_TEXTS, texts[:7], ["\x00", "a"]):
        tokens, lengths = ours.encode_corpus(part)
        expected = ours.encode_batch(part)
        assert lengths.tolist() == [len(ids) for ids in expected]
        assert tokens.tolist() == [i for ids in expected for i in ids]


def test_pairs_truncate_longest_first_as_transformers(pair):
    ours, reference = pair
    pairs = list(zip(TEXTS, TEXTS[::-1]))
    for max_length in (12, 24, 64):
        batch = ours.encode_for_model(pairs, max_length)
        theirs = reference(*map(list, zip(*pairs)), truncation="longest_first",
                           max_length=max_length, padding=True, return_token_type_ids=True,
                           return_tensors="np")
        assert batch["input_ids"].tolist() == theirs["input_ids"].tolist()
        assert batch["segment_ids"].tolist() == theirs["token_type_ids"].tolist()
        assert batch["input_mask"].tolist() == theirs["attention_mask"].tolist()
    ids = batch["input_ids"][0][batch["input_mask"][0] > 0].tolist()
    assert ids[0] == ours.cls_id and ids[-1] == ours.sep_id and ids.count(ours.sep_id) == 2


def test_special_ids_vocabulary_and_readable_tokens(pair):
    ours, reference = pair
    assert ours.vocab_size == len(reference) == 610  # 600 BPE pieces, 3 + 7 added tokens
    assert (ours.cls_id, ours.sep_id, ours.pad_id, ours.mask_id, ours.unk_id) == (
        reference.cls_token_id, reference.sep_token_id, reference.pad_token_id,
        reference.mask_token_id, reference.unk_token_id)
    # Masking never chooses a special token: the five and ModernBERT's other ones.
    special = [reference.convert_ids_to_tokens(i) for i in ours.special_ids]
    assert set(special) == {"[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]", "<|padding|>",
                            "<|endoftext|>", "[unused0]", "[unused1]"}
    for index in (0, 300, 599, 600, 603, ours.mask_id, 609):
        token = reference.convert_ids_to_tokens(index)
        assert ours.id_to_token(index) == token and ours.token_to_id(token) == index
        assert ours.token_text(index) == reference.decode([index])  # fill-mask's token_str
    quick = ours.token_to_id("Ġquick")
    assert ours.id_to_token(quick) == "Ġquick" and ours.token_text(quick) == " quick"
    ids = reference("Héllo [MASK] wörld")["input_ids"]
    assert ours.decode(ids) == reference.decode(ids) == "[CLS]Héllo[MASK] wörld[SEP]"
    assert not ours.lowercase and ours.hash != load_tokenizer(
        test_tokenization.minilm_dir()).hash


def test_tokenizer_config_settings_are_read_as_transformers_reads_them(modernbert_directory,
                                                                        tmp_path):
    """added_tokens_decoder wins over tokenizer.json's added tokens; split_special_tokens
    reads them as text; a pickled tokenizer (Beam's workers) keeps both."""
    from transformers import AutoTokenizer
    directory = tmp_path / "changed"
    directory.mkdir()
    for name in os.listdir(modernbert_directory):
        (directory / name).write_bytes(open(os.path.join(modernbert_directory, name), "rb").read())
    config = json.loads((directory / "tokenizer_config.json").read_text())
    for entry in config["added_tokens_decoder"].values():
        if entry["content"] == "[MASK]":
            entry["lstrip"] = False
    (directory / "tokenizer_config.json").write_text(json.dumps(config))
    for split in (False, True):
        reference = AutoTokenizer.from_pretrained(str(directory), split_special_tokens=split)
        ours = load_tokenizer(str(directory), split_special_tokens=split)
        expected = reference(TEXTS, add_special_tokens=False)["input_ids"]
        assert ours.encode_batch(TEXTS) == expected
        assert pickle.loads(pickle.dumps(ours)).encode_batch(TEXTS) == expected
    assert ours.mask_id not in ours.encode_batch(["is [MASK]"])[0]  # split: plain text
    assert load_tokenizer(str(directory)).tokenize("is [MASK]") == ["is", "Ġ", "[MASK]"]


def test_squad_offsets_equal_transformers(pair):
    from input_pipeline.tasks.squad import Question
    from input_pipeline.tasks.squad_windows import make_windows
    ours, reference = pair
    context = "The quick brown fox jumps over the lazy dog. Paris is the capital of France."
    start = context.index("Paris is")
    question = Question("q1", "What is the capital of France?", context, ("Paris",),
                        ((start, start + 5),))
    windows = make_windows([question], ours, max_seq_len=64, doc_stride=32, max_query_len=16,
                           training=True)
    theirs = reference(question.question, context, return_offsets_mapping=True)
    length = len(theirs["input_ids"])
    assert windows.input_ids[0, :length].tolist() == theirs["input_ids"]
    in_context = np.array(theirs.sequence_ids()) == 1
    np.testing.assert_array_equal(windows.token_offsets[0, :length][in_context],
                                  np.array(theirs["offset_mapping"])[in_context])
    first, last = windows.start_positions[0], windows.end_positions[0]
    offsets = windows.token_offsets[0]
    assert context[offsets[first, 0]:offsets[last, 1]] == "Paris"


def test_ner_words_get_the_pieces_of_running_text(pair):
    """Each word as it stands in its sentence (`Ġfox`, as pre-training saw it), not alone."""
    from input_pipeline.tasks.word_labels import word_pieces
    ours, _ = pair
    sentences = [["The", "quick", "brown", "fox", "."], ["Héllo", "Wörld", "[MASK]", "!"]]
    pieces = word_pieces(ours, sentences)
    for words, word_ids in zip(sentences, pieces):
        assert [i for ids in word_ids for i in ids] == ours.encode_batch([" ".join(words)])[0]
    assert [ours.id_to_token(i) for i in pieces[0][3]] == ["Ġfox"]


def test_word_boundaries_of_a_byte_level_bpe(pair):
    """A word starts at a piece with a byte-level space, after whitespace or an added token."""
    ours, _ = pair
    text = "The quickest fox\nJumped  over [MASK]ing |||IP_ADDRESS|||x"
    ids = np.array(ours.encode_batch([text])[0])
    tokens = [ours.id_to_token(i) for i in ids]
    continues = ours.continues_word(ids)
    assert continues[0]  # "The" has no space before it: a sentence's start is the caller's
    starts = [0] + [index for index in range(1, len(ids)) if not continues[index]]
    words = ["".join(tokens[start:end]) for start, end in zip(starts, starts[1:] + [len(ids)])]
    assert words == ["The", "Ġquickest", "Ġfox", "Ċ", "Jumped", "  ", "over", "[MASK]", "ing",
                     "Ġ", "|||IP_ADDRESS|||", "x"]


def test_a_model_directory_keeps_its_tokenizer_json(pair, modernbert_directory, tmp_path):
    """Saved (bert-jax), exported (Hugging Face) and copied into a work directory, the
    tokenizer.json gives the same ids to load_tokenizer and to AutoTokenizer."""
    from interop_helpers import random_pretraining_params
    from transformers import AutoTokenizer

    from bert_jax.interop import model_source, model_writers
    from bert_jax.models.presets import preset
    from input_pipeline.vocabulary_files import copy_tokenizer_files
    ours, reference = pair
    config = preset("tiny", vocab_size=ours.vocab_size, hidden_dim=16, num_layers=1,
                    num_heads=2, mlp_dim=32, max_positions=32)
    params = random_pretraining_params(config)
    expected = reference(TEXTS, add_special_tokens=False)["input_ids"]
    saved, exported, run = (str(tmp_path / name) for name in ("saved", "exported", "run"))
    model_writers.save_model(config, params, ours, saved)
    model_writers.export_huggingface(config, params, model_source.in_directory(saved)
                                     .tokenizer(), exported)
    copy_tokenizer_files(modernbert_directory, run)
    for directory in (saved, exported, run):
        assert "vocab.txt" not in os.listdir(directory)
        again = load_tokenizer(directory)
        assert again.encode_batch(TEXTS) == expected and again.hash == ours.hash
        assert AutoTokenizer.from_pretrained(directory)(
            TEXTS, add_special_tokens=False)["input_ids"] == expected
    with open(os.path.join(exported, "tokenizer_config.json"), encoding="utf-8") as file:
        settings = json.load(file)
    assert settings["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert settings["model_max_length"] == config.max_positions
    os.remove(os.path.join(exported, "tokenizer.json"))
    with pytest.raises(UserError, match="no tokenizer; looked for sentencepiece.model, "
                                        "vocab.txt or tokenizer.json in .*exported"):
        model_source.resolve(exported).tokenizer()


def _roberta_template(values):
    values["post_processor"]["pair"].insert(3, {"SpecialToken": {"id": "[SEP]", "type_id": 0}})


@pytest.mark.parametrize("name, edit, message", [
    ("tokenizer.json", _roberta_template,
     r"makes '\[CLS\] a \[SEP\] \[SEP\] b \[SEP\]'.*builds \[CLS\] A \[SEP\] B \[SEP\]"),
    ("tokenizer_config.json", lambda values: values.update(mask_token="<mask>"),
     "its mask_token '<mask>' is not in its vocabulary"),
    ("tokenizer.json", lambda values: values.update(model={"type": "Unknown"}),
     "not a readable tokenizer.json"),
])
def test_a_tokenizer_json_bert_jax_cannot_follow_is_refused(tmp_path, name, edit, message):
    directory = tokenizer_json_helpers.write_modernbert_tokenizer(str(tmp_path / "bad"))
    path = tmp_path / "bad" / name
    values = json.loads(path.read_text(encoding="utf-8"))
    edit(values)
    path.write_text(json.dumps(values), encoding="utf-8")
    with pytest.raises(UserError, match=message):
        load_tokenizer(directory)


def test_lowercase_flag_must_agree_with_the_normaliser(modernbert_directory):
    assert load_tokenizer(modernbert_directory, lowercase=False).lowercase is False
    with pytest.raises(UserError, match="normaliser decides the casing .*keeps case"):
        load_tokenizer(modernbert_directory, lowercase=True)
    with pytest.raises(UserError, match="tokenizer file not found"):
        load_tokenizer(os.path.join(modernbert_directory, "missing.json"))


def _sentence_corpus(path, documents: int, seed: int) -> None:
    """BERT-format text whose sentences each begin with "§" (a piece found nowhere else, so
    a test sees where sentences start) and hold words of several pieces and special tokens."""
    rng = np.random.default_rng(seed)
    words = ["quixotic", "wordplay", "antidisestablishment", "fox", "brown", "capital",
             "zebrafish", "Paris", "overcapitalization", "[MASK]", "<|endoftext|>", "the"]
    lines = []
    for _ in range(documents):
        for _ in range(int(rng.integers(3, 9))):
            lines.append("§ " + " ".join(rng.choice(words, int(rng.integers(3, 12)))) + ".")
        lines.append("")
    path.write_text("\n".join(lines), encoding="utf-8")


def test_shards_of_a_tokenizer_json_mask_whole_words_and_name_it(pair, modernbert_directory,
                                                                   tmp_path):
    """create-data with a tokenizer.json: a byte-level word's pieces are masked together, a
    sentence's first piece (no `Ġ`: it had no space) starts a word, special tokens written
    in the text are never masked, and the manifest refuses another vocabulary."""
    import pipeline_helpers as helpers

    from input_pipeline import manifest as manifest_lib
    from input_pipeline.create_data import create_pretraining_data
    ours, _ = pair
    corpus, output = tmp_path / "corpus.txt", str(tmp_path / "shards")
    _sentence_corpus(corpus, documents=30, seed=0)
    manifest = create_pretraining_data(
        [str(corpus)], modernbert_directory, output, num_shards=1, max_seq_len=64,
        max_predictions=20, masked_lm_prob=0.3, dupe_factor=3, whole_word_mask=True, seed=1,
        workers=1, show_progress=False)
    assert manifest["vocabulary"]["kind"] == "TokenizerJson"
    assert manifest["vocabulary"]["hash"] == ours.hash
    with pytest.raises(UserError, match="made with vocabulary .* token ids would not match"):
        manifest_lib.check_vocabulary(manifest, load_tokenizer(
            test_tokenization.minilm_dir()).hash, output)
    features = helpers.read_shards([os.path.join(output, manifest["shards"][0]["file"])], 64, 20)
    sentence_start = ours.encode_batch(["§ fox"])[0][0]
    boundaries = {ours.cls_id, ours.sep_id, *ours.special_ids}
    joined = separate_starts = 0
    for row in range(len(features["input_ids"])):
        ids = helpers.unmasked_ids(features, row)
        count = int(features["masked_lm_weights"][row].sum())
        masked = set(features["masked_lm_positions"][row, :count].tolist())
        assert not set(features["masked_lm_ids"][row, :count].tolist()) & set(ours.special_ids)
        for position in range(1, int(features["input_mask"][row].sum())):
            token, previous = ours.id_to_token(ids[position]), ids[position - 1]
            # A word also starts after a special token, and after the lone "Ġ" that stands
            # before one which keeps its space ("a <|endoftext|>": "a", "Ġ", "<|endoftext|>").
            if {previous, ids[position]} & boundaries or ours.id_to_token(previous) == "Ġ":
                continue
            if ids[position] == sentence_start:
                separate_starts += (position in masked) != (position - 1 in masked)
            elif not token.startswith("Ġ"):
                assert (position in masked) == (position - 1 in masked)
                joined += position in masked
    assert joined > 50 and separate_starts > 5


def test_vocab_trains_a_byte_level_bpe_that_transformers_loads(tmp_path, capsys):
    from transformers import AutoTokenizer

    from bert_jax import cli
    text = tmp_path / "text.txt"
    text.write_text("\n".join(tokenizer_json_helpers.TRAINING_TEXT * 3), encoding="utf-8")
    output = str(tmp_path / "bpe")
    assert cli.main(["vocab", "--type", "bpe", "--size", "400", "--input", str(text),
                     "--output", output]) == 0
    assert "tokenizer.json (400 tokens, cased)" in capsys.readouterr().out
    assert sorted(os.listdir(output)) == ["tokenizer.json", "tokenizer_config.json"]
    ours, reference = load_tokenizer(output), AutoTokenizer.from_pretrained(output)
    assert (ours.pad_id, ours.unk_id, ours.cls_id, ours.sep_id, ours.mask_id) == (0, 1, 2, 3, 4)
    assert ours.vocab_size == len(reference) == 400
    assert ours.encode_batch(TEXTS) == reference(TEXTS, add_special_tokens=False)["input_ids"]
    pairs = list(zip(TEXTS, TEXTS[::-1]))
    assert ours.encode_for_model(pairs, 32)["input_ids"].tolist() == reference(
        *map(list, zip(*pairs)), truncation="longest_first", max_length=32,
        padding=True)["input_ids"]
    assert ours.tokenize("The capital is [MASK].")[-3:] == ["Ġis", " [MASK]", "."]
    assert ours.unk_id not in ours.encode_batch(["Ünïcödé ✓ 🙂 never seen"])[0]  # bytes
