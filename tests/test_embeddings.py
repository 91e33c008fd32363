"""Sentence embeddings: pooling against numpy, `bert-jax embed` against sentence-transformers,
the sentence-transformers directory round trip, exact search, the index and bad inputs."""

import json
import os

import numpy as np
import pytest
from interop_helpers import WORDS, minilm_directory, random_pretraining_params, write_vocab
from tolerances import ENCODER_STEPS, assert_close, float32_steps

from bert_jax.interop import model_writers
from bert_jax.cli import main
from bert_jax.models.presets import preset
from bert_jax.embeddings import pooling, search
from bert_jax.embeddings.encoder import embed_texts, load_embedding_model
from bert_jax.embeddings.model_directory import (EmbeddingSettings, read_settings,
                                                 write_settings)
from bert_jax.commands.evaluate import evaluate_sts
from bert_jax.errors import UserError
from input_pipeline.tokenization import load_tokenizer

SENTENCES = [
    "A man is playing a guitar.",
    "",
    "Natasha laughed.",
    "The prince answered nothing, and she went on talking about the war in Austria.",
    "Pierre had been educated abroad, and this reception was the first he had attended in "
    "Russia. " * 30,  # longer than the 256 tokens MiniLM keeps: truncation must agree
    "Yes, I heard of it.",
    "Ünïcödé façade — naïve café 東京",
    "hello",
    "[MASK] and [SEP] inside",  # special tokens written in the text: ids 103 and 102 (issue 34)
    "x[MASK] [CLS]y [mask] [ MASK ] [PAD][UNK] Ä[SEP]",
]


def naive_pool(hidden: np.ndarray, mask: np.ndarray, mode: str) -> np.ndarray:
    rows = []
    for states, row_mask in zip(hidden, mask):
        real = states[row_mask.astype(bool)]  # (real tokens, H)
        rows.append({"cls": states[0], "max": real.max(0), "mean": real.mean(0),
                     "mean_sqrt_len_tokens": real.sum(0) / np.sqrt(len(real))}[mode])
    return np.stack(rows)


def test_pooling_modes_match_numpy():
    rng = np.random.default_rng(0)
    hidden = rng.normal(size=(4, 7, 5)).astype(np.float32)
    hidden[:, 5:] = 100.0  # padding values that would dominate max or mean if used
    mask = np.array([[1] * 7, [1] * 5 + [0] * 2, [1, 1] + [0] * 5, [1] + [0] * 6], np.int32)
    hidden[0, 5:] = rng.normal(size=(2, 5))  # row 0 has no padding
    # A mean (or root-length sum) of at most 7 float32 values, on each side in its own order:
    # 7 roundings of a sum no larger than 7 times the largest real value, twice.
    real_sum = 7 * np.abs(hidden[mask.astype(bool)]).max()
    for mode in pooling.POOLING_MODES:
        assert_close(pooling.pool(hidden, mask, (mode,)), naive_pool(hidden, mask, mode), 14,
                     scale=real_sum, err_msg=mode)
    both = np.asarray(pooling.pool(hidden, mask, ("cls", "mean")))
    assert_close(both, np.concatenate(
        [naive_pool(hidden, mask, "cls"), naive_pool(hidden, mask, "mean")], 1), 14,
        scale=real_sum)
    unit = np.asarray(pooling.normalize(both))
    # A unit vector: 10 squares summed, a square root and a division, each side: 2 x 12
    # roundings of magnitude 1.
    assert_close(unit, both / np.linalg.norm(both, axis=1, keepdims=True), 24, scale=1.0)
    assert np.all(np.asarray(pooling.normalize(np.zeros((1, 3), np.float32))) == 0)


def test_embed_on_minilm_equals_sentence_transformers(tmp_path):
    directory = minilm_directory()
    sentence_transformers = pytest.importorskip("sentence_transformers")
    reference = sentence_transformers.SentenceTransformer(directory, device="cpu")
    input_path, output = tmp_path / "in.txt", tmp_path / "out.npy"
    input_path.write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    assert main(["embed", "--model", directory, "--input", str(input_path), "--output",
                 str(output), "--batch-size", "3"]) == 0
    ours = np.load(output)
    expected = reference.encode(SENTENCES, batch_size=3, convert_to_numpy=True)
    assert ours.shape == expected.shape == (len(SENTENCES), 384)
    # Unit vectors from two implementations of MiniLM: ENCODER_STEPS steps of their norm, 1.
    assert_close(ours, expected, ENCODER_STEPS, scale=1.0)
    model = load_embedding_model(directory)
    assert model.settings == EmbeddingSettings(("mean",), True, 256)
    ids = model.tokenizer.encode_for_model(SENTENCES, 256)
    theirs = reference.tokenizer(SENTENCES, truncation=True, max_length=256)["input_ids"]
    for row, their_ids in zip(ids["input_ids"], theirs):
        assert list(row[:len(their_ids)]) == their_ids and not row[len(their_ids):].any()


def test_convert_minilm_to_bert_jax_keeps_its_pooling_and_normalisation(tmp_path, capsys):
    # Before: the bert-jax directory pooled by the mean, unnormalised (norms near 6), and
    # --to hf dropped the pooling without a word.
    directory = minilm_directory()
    converted, exported = str(tmp_path / "minilm-bert-jax"), str(tmp_path / "minilm-hf")
    assert main(["convert", directory, converted]) == 0
    assert "kept its pooling mean, normalised, max 256 tokens" in capsys.readouterr().out
    model = load_embedding_model(converted)
    assert model.settings == EmbeddingSettings(("mean",), True, 256)
    texts = ["Natasha laughed.", "hello", "[MASK] and [SEP] inside"]  # one length bucket
    ours = embed_texts(model, texts, progress=False)
    # A float32 norm of 384 squares: at most ~384 roundings of a sum of 1 (pairwise sums
    # make it ~9); 64 steps of 1 (7.6e-6) tells normalised from not (norms near 6).
    assert_close(np.linalg.norm(ours, axis=1), 1.0, 64)
    # The same weights, read from two directories, through the same code: bit-equal up to
    # XLA's choices between two compiles.
    assert_close(ours, embed_texts(load_embedding_model(directory), texts, progress=False),
                 ENCODER_STEPS, scale=1.0)
    assert main(["convert", directory, exported, "--to", "hf"]) == 0
    assert capsys.readouterr().err.strip() == (
        f"note: hf has no place for {directory}'s sentence embedding (pooling mean, "
        "normalised, max 256 tokens); --to sentence-transformers or --to bert-jax keeps it")


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    """A bert-jax model directory with random weights that pools cls+max, normalised."""
    work = tmp_path_factory.mktemp("tiny")
    vocab = write_vocab(work)
    config = preset("tiny", vocab_size=5 + len(WORDS), hidden_dim=32, num_heads=2, mlp_dim=64,
                    max_positions=64)
    params = random_pretraining_params(config)
    directory = str(work / "model")
    model_writers.save_model(config, params, load_tokenizer(vocab), directory)
    write_settings(directory, EmbeddingSettings(("cls", "max"), True, 24), config.hidden_dim)
    return directory


CORPUS = ["the man went to store .", "he bought a gallon of milk", "", "the dog sat on the mat",
          "the cat sat on the mat", "paris city", "london city", "it was happy and then home"]


def test_embed_keeps_input_order_and_empty_lines(tiny_model):
    model = load_embedding_model(tiny_model)
    assert model.settings == EmbeddingSettings(("cls", "max"), True, 24)
    together = embed_texts(model, CORPUS, batch_size=3, progress=False)
    assert together.shape == (len(CORPUS), 64)
    assert_close(np.linalg.norm(together, axis=1), 1.0, 64)  # 64 squares' sum: <= 64 steps
    for index, text in enumerate(CORPUS):  # one at a time: no batching or sorting effects
        alone = embed_texts(model, [text], batch_size=1, progress=False)[0]
        # Another batch size and padding: another blocking of the same float32 sums.
        assert_close(together[index], alone, ENCODER_STEPS, scale=1.0)


def test_python_api_embed_equals_the_embed_command(tiny_model, tmp_path):
    import bert_jax

    model = bert_jax.load(tiny_model)
    input_path, output = tmp_path / "in.txt", tmp_path / "out.npy"
    input_path.write_text("\n".join(CORPUS) + "\n", encoding="utf-8")
    for flags, options in (([], {}),  # the directory's cls+max, normalised, 24 tokens
                           (["--pool", "mean", "--no-normalize", "--max-seq-len", "8"],
                            dict(pool="mean", normalize=False, max_seq_len=8))):
        assert main(["embed", "--model", tiny_model, "--input", str(input_path), "--output",
                     str(output), "--batch-size", "4", *flags]) == 0
        embeddings = model.embed(CORPUS, batch_size=4, **options)
        assert embeddings.dtype == np.float32
        np.testing.assert_array_equal(embeddings, np.load(output))
    assert embeddings.shape == (len(CORPUS), 32)
    assert_close(np.linalg.norm(model.embed(CORPUS), axis=1), 1.0, 64)  # 32 squares summed
    single = model.embed(CORPUS[0])  # (D,): no N axis
    # One text alone against it in a batch: another blocking of the same float32 sums.
    assert_close(single, model.embed(CORPUS)[0], ENCODER_STEPS, scale=1.0)
    with pytest.raises(UserError, match="not a fine-tuned task model"):
        model.predict("the cat sat on the mat")


def test_sentence_transformers_round_trip(tiny_model, tmp_path):
    sentence_transformers = pytest.importorskip("sentence_transformers")
    exported = str(tmp_path / "st")
    assert main(["convert", tiny_model, exported, "--to", "sentence-transformers"]) == 0
    reference = sentence_transformers.SentenceTransformer(exported, device="cpu")
    assert reference.max_seq_length == 24
    input_path, output = tmp_path / "in.txt", tmp_path / "out.npy"
    input_path.write_text("\n".join(CORPUS) + "\n", encoding="utf-8")
    for model in (tiny_model, exported):  # the source and its export embed alike
        assert main(["embed", "--model", model, "--input", str(input_path), "--output",
                     str(output), "--batch-size", "4"]) == 0
        # Unit vectors from two implementations: ENCODER_STEPS steps of their norm, 1.
        assert_close(np.load(output), reference.encode(CORPUS, batch_size=4), ENCODER_STEPS,
                     scale=1.0)
    assert read_settings(exported)[1] == EmbeddingSettings(("cls", "max"), True, 24)
    # evaluate sts: the correlations of sentence-transformers' own cosines on an STS file.
    from scipy import stats

    pairs = [(CORPUS[index], CORPUS[(index * 3 + 1) % len(CORPUS)], index * 0.6)
             for index in range(len(CORPUS))]
    sts = tmp_path / "sts.tsv"
    sts.write_text("".join(f"g\tf\ty\t{index}\t{score}\t{first}\t{second}\n"
                           for index, (first, second, score) in enumerate(pairs)))
    left, right = (reference.encode([pair[side] for pair in pairs]) for side in (0, 1))
    cosines = (left * right).sum(1) / np.linalg.norm(left, axis=1) / np.linalg.norm(right, axis=1)
    metrics = evaluate_sts(exported, str(sts))
    gold = [score for *_, score in pairs]
    # Our cosines and these differ as the embeddings do: each of 32 coordinates of two unit
    # vectors by ENCODER_STEPS steps of 1 moves a cosine by at most `shift`. Spearman reads
    # only the cosines' order, the same on both sides when no two lie within 2 x shift;
    # pearson moves by at most 2 x shift over the cosines' spread.
    shift = 2 * np.sqrt(32) * float32_steps(ENCODER_STEPS, 1.0)
    assert np.diff(np.sort(cosines)).min() > 2 * shift
    assert metrics["spearman"] == pytest.approx(stats.spearmanr(cosines, gold).statistic,
                                                abs=1e-12)
    assert metrics["pearson"] == pytest.approx(stats.pearsonr(cosines, gold).statistic,
                                               abs=2 * shift / np.std(cosines))


def test_read_settings_formats_and_errors(tmp_path):
    (tmp_path / "1_Pooling").mkdir()
    modules = [{"path": "", "type": "sentence_transformers.models.Transformer"},
               {"path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
    (tmp_path / "modules.json").write_text(json.dumps(modules))
    pooling_config = tmp_path / "1_Pooling" / "config.json"
    pooling_config.write_text(json.dumps({"embedding_dimension": 8,
                                          "pooling_mode": ["max", "mean"]}))
    assert read_settings(str(tmp_path))[1] == EmbeddingSettings(("max", "mean"), False, None)
    pooling_config.write_text(json.dumps({"pooling_mode_lasttoken": True}))
    with pytest.raises(UserError, match="config.json: pooling .* not supported"):
        read_settings(str(tmp_path))
    os.remove(pooling_config)  # missing: all-MiniLM-L6-v2's mean pooling
    assert read_settings(str(tmp_path))[1].pooling == ("mean",)
    (tmp_path / "modules.json").write_text(json.dumps(
        modules + [{"path": "2_Dense", "type": "sentence_transformers.models.Dense"}]))
    with pytest.raises(UserError, match="modules.json: module .*Dense.* not supported"):
        read_settings(str(tmp_path))
    fine_tuned = tmp_path / "best"  # what `finetune sentence-embedding` leaves in WORKDIR/best
    fine_tuned.mkdir()
    (fine_tuned / "task.json").write_text(json.dumps(dict(
        task="sentence-embedding", settings=dict(loss="mnrl", pooling=["cls"]), max_seq_len=64)))
    assert read_settings(str(fine_tuned)) == (str(fine_tuned),
                                              EmbeddingSettings(("cls",), False, 64))


def test_top_k_and_pairs_match_brute_force():
    rng = np.random.default_rng(1)
    corpus = rng.normal(size=(50, 6)).astype(np.float32)
    corpus[7] = corpus[3] * 2  # same direction: a tie in cosine, resolved by line order
    queries = np.concatenate([rng.normal(size=(4, 6)), corpus[3:4]]).astype(np.float32)
    unit = corpus / np.linalg.norm(corpus, axis=1, keepdims=True)
    cosine = (queries / np.linalg.norm(queries, axis=1, keepdims=True)) @ unit.T  # (Q, N)
    scores, rows = search.top_k(corpus, queries, 5, chunk_rows=7)
    np.testing.assert_array_equal(rows, np.argsort(-cosine, axis=1, kind="stable")[:, :5])
    # Cosines of unit rows (6 products summed, a norm each side), 1 in magnitude, computed
    # by chunks in one order and here in another: a few float32 steps of 1.
    assert_close(scores, np.sort(cosine, axis=1)[:, ::-1][:, :5], 16, scale=1.0)
    assert list(rows[-1, :2]) == [3, 7]
    assert search.top_k(corpus[:2], queries, 5)[1].shape == (5, 2)  # k capped by the corpus
    all_pairs = unit @ unit.T
    expected = [(i, j) for i in range(50) for j in range(i + 1, 50) if all_pairs[i, j] >= 0.6]
    found = search.similar_pairs(corpus, 0.6, chunk_rows=8)
    # Row 7 is row 3 doubled: cosine 1 to float32 steps (approx's 1e-6 is 8 steps of 1).
    assert [(i, j) for i, j, _ in found] == expected and (3, 7, pytest.approx(1.0)) in found


def test_search_command_reuses_and_rebuilds_its_index(tiny_model, tmp_path, capsys):
    corpus_path = tmp_path / "corpus.txt"
    corpus_path.write_text("\n".join(CORPUS) + "\n", encoding="utf-8")
    index = tmp_path / "corpus.txt.bert-jax-index.npz"
    command = ["search", "--model", tiny_model, "--corpus", str(corpus_path), "--top-k", "3"]
    assert main([*command, "--query", CORPUS[4]]) == 0
    first = capsys.readouterr()
    assert index.exists() and "stale" not in first.err
    rank, score, line, text = first.out.splitlines()[0].split("\t")
    # A text's cosine with itself, printed with 4 decimals: 1 to the printed 5e-5.
    assert (rank, line, text, float(score)) == ("1", "5", CORPUS[4], pytest.approx(1.0, 1e-4))
    built = os.path.getmtime(index)
    assert main([*command, "--query", CORPUS[4]]) == 0
    assert capsys.readouterr().out == first.out and os.path.getmtime(index) == built
    corpus_path.write_text("\n".join(CORPUS[::-1]) + "\n", encoding="utf-8")
    queries = tmp_path / "queries.txt"
    queries.write_text(f"{CORPUS[0]}\n{CORPUS[5]}\n", encoding="utf-8")
    assert main([*command, "--queries", str(queries)]) == 0
    changed = capsys.readouterr()
    assert "stale (corpus changed" in changed.err
    best = [row.split("\t") for row in changed.out.splitlines() if row.split("\t")[1] == "1"]
    assert [(query, line) for query, _, _, line, _ in best] == [("1", "8"), ("2", "3")]
    with np.load(index) as stored:
        assert stored["embeddings"].shape == (len(CORPUS), 64)
    assert main(["search", "--model", tiny_model, "--corpus", str(corpus_path), "--dedupe",
                 "0.9999"]) == 0
    pairs = capsys.readouterr().out.splitlines()
    assert all(float(pair.split("\t")[0]) >= 0.9999 for pair in pairs)


@pytest.mark.parametrize("which", ["corpus", "queries"])
def test_search_rejects_empty_files(tiny_model, tmp_path, capsys, which):
    corpus_path, queries = tmp_path / "corpus.txt", tmp_path / "queries.txt"
    corpus_path.write_text("" if which == "corpus" else "a line\n", encoding="utf-8")
    queries.write_text("", encoding="utf-8")
    assert main(["search", "--model", tiny_model, "--corpus", str(corpus_path), "--queries",
                 str(queries)]) == 2
    expected = "corpus file has no lines" if which == "corpus" else "query file has no lines"
    assert expected in capsys.readouterr().err
    assert not os.path.exists(str(corpus_path) + search.INDEX_SUFFIX)
