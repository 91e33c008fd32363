"""Attention maps against transformers, and `bert-jax attention` / `probe` end to end."""

import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import tempfile

import numpy as np
import pytest
from interop_helpers import minilm_directory, tiny_random_model, torch_inputs
from tolerances import ENCODER_STEPS, assert_close

from bert_jax import inference
from bert_jax.interop import model_source, model_writers
from bert_jax.analysis.attention_maps import TruncationWarning, text_attention
from bert_jax.analysis.head_view import read_page_data
from bert_jax.analysis.probe import ProbeCounts
from bert_jax.analysis.word_attention import piece_word_ids, word_attention
from bert_jax.cli import main
from input_pipeline.tasks.conllu import read_conllu
from input_pipeline.tokenization import load_tokenizer

TEXTS = ["The quick brown fox jumps over the lazy dog.",
         ("Natasha laughed.", "Pierre had been educated abroad, and this was his first reception."),
         "Yes."]


def test_attention_matches_transformers_eager_on_minilm():
    import torch
    import transformers

    directory = minilm_directory()
    loaded = model_source.resolve(directory).load()
    config, params, vocab_path = loaded.config, loaded.params, loaded.source.vocab_path
    batch = load_tokenizer(vocab_path).encode_for_model(TEXTS, 64)  # padded to the longest
    layers = tuple(range(1, config.num_layers + 1))
    ours = inference.extract_features(config, params, batch, layers, 64, batch_size=3,
                                      with_attention=True, progress=False)["attention"]
    model = transformers.BertModel.from_pretrained(directory, attn_implementation="eager").eval()
    with torch.no_grad():
        reference = model(**torch_inputs(batch), output_attentions=True).attentions
    real = batch["input_mask"].astype(bool)
    assert real.sum(1).min() < real.shape[1]  # the comparison covers padded inputs
    for layer in layers:
        expected = reference[layer - 1].numpy()  # (N, heads, T, T)
        assert ours[layer].shape == expected.shape == (3, 12, real.shape[1], real.shape[1])
        for row, mask in enumerate(real):
            # Probabilities from two implementations: ENCODER_STEPS steps of their scale, 1.
            assert_close(ours[layer][row][:, mask][:, :, mask],
                         expected[row][:, mask][:, :, mask], ENCODER_STEPS, scale=1.0,
                         err_msg=f"layer {layer} row {row}")


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    """A random 2-layer model with 64 positions, saved as a bert-jax directory."""
    directory = tmp_path_factory.mktemp("attention_model")
    config, params, tokenizer = tiny_random_model(directory, seed=5)
    model_directory = str(directory / "model")
    model_writers.save_model(config, params, tokenizer, model_directory)
    return model_directory


PAIR = ("the man went to the store .", "he then bought a gallon of milk !")  # 18 tokens


@pytest.fixture(scope="module")
def attention_output(tiny_model, tmp_path_factory):
    """`bert-jax attention` on PAIR cut to 17 tokens: (output directory, stderr)."""
    output = tmp_path_factory.mktemp("attention") / "out"
    errors = io.StringIO()
    with contextlib.redirect_stderr(errors):
        assert main(["attention", "--model", tiny_model, "--text", PAIR[0], "--text-b",
                     PAIR[1], "--max-seq-len", "17", "--output", str(output)]) == 0
    return output, errors.getvalue()


def test_attention_command_writes_figures_arrays_and_a_page(tiny_model, attention_output):
    output, errors = attention_output
    assert sorted(os.listdir(output)) == ["attention.npz", "head_view.html", "heads.png",
                                          "layer_1.png", "layer_2.png"]
    assert "warning: the input is 18 tokens long, more than the limit of 17" in errors
    arrays = np.load(output / "attention.npz")
    loaded = model_source.resolve(tiny_model).load()
    config, params, vocab_path = loaded.config, loaded.params, loaded.source.vocab_path
    batch = load_tokenizer(vocab_path).encode_for_model([PAIR], 17)
    direct = inference.encode(params["bert"], batch["input_ids"], batch["segment_ids"],
                              batch["input_mask"], config=config, layers=(1, 2),
                              with_attention=True)["attention"][:, 0]  # (L, H, T, T)
    # The command's batch against this direct call: the same float32 arithmetic, compiled
    # for other shapes (ENCODER_STEPS of the probabilities' scale, 1).
    assert_close(arrays["attention"], direct, ENCODER_STEPS, scale=1.0)
    # Longest first: the 8-token second text lost its "!".
    assert list(arrays["tokens"]) == ["[CLS]", *PAIR[0].split(), "[SEP]",
                                      *PAIR[1].split()[:-1], "[SEP]"]
    np.testing.assert_array_equal(arrays["segment_ids"], batch["segment_ids"][0])
    html = (output / "head_view.html").read_text(encoding="utf-8")
    data = read_page_data(html)
    assert data["tokens"] == list(arrays["tokens"]) and data["layers"] == [1, 2]
    # The page keeps each probability in steps of 1/255: half of one off, and a float32
    # step of 1 for the division.
    np.testing.assert_allclose(data["attention"], arrays["attention"], atol=0.5 / 255 + 1e-7)
    # Offline: no resource is fetched from anywhere (the SVG namespace is a name, not a fetch).
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//|@import|<link|url\(""", html)


def test_long_text_is_truncated_with_a_warning(tiny_model):
    loaded = model_source.resolve(tiny_model).load()
    config, params, vocab_path = loaded.config, loaded.params, loaded.source.vocab_path
    long_text = " ".join(["the man went to the store ."] * 20)  # 140 tokens for 64 positions
    with pytest.warns(TruncationWarning, match="142 tokens long, more than the limit of 64"):
        result = text_attention(config, params, load_tokenizer(vocab_path), long_text)
    assert len(result.tokens) == 64 and result.tokens[-1] == "[SEP]"
    assert result.truncated_from == 142 and result.attention.shape == (2, 2, 64, 64)


TREEBANK = """\
# sent_id = a
1\tThe\tthe\tDET\tDT\t_\t2\tdet\t_\t_
2\tman\tman\tNOUN\tNN\t_\t3\tnsubj\t_\t_
3\twent\tgo\tVERB\tVBD\t_\t0\troot\t_\t_
4\thome\thome\tADV\tRB\t_\t3\tadvmod\t_\t_
5\t.\t.\tPUNCT\t.\t_\t3\tpunct\t_\t_

# sent_id = b
1\tHe\the\tPRON\tPRP\t_\t2\tnsubj\t_\t_
2\tbought\tbuy\tVERB\tVBD\t_\t0\troot\t_\t_
3\ta\ta\tDET\tDT\t_\t4\tdet\t_\t_
4\tgallon\tgallon\tNOUN\tNN\t_\t2\tobj\t_\t_
5-6\tof milk\t_\t_\t_\t_\t_\t_\t_\t_
5\tof\tof\tADP\tIN\t_\t6\tcase\t_\t_
6\tmilk\tmilk\tNOUN\tNN\t_\t4\tnmod\t_\t_
6.1\tmilk\tmilk\tNOUN\tNN\t_\t_\t_\t_\t_
7\tParis\tParis\tPROPN\tNNP\t_\t2\tobl\t_\t_

# sent_id = c
1\tThe\tthe\tDET\tDT\t_\t2\tdet\t_\t_
2\tcat\tcat\tNOUN\tNN\t_\t3\tnsubj\t_\t_
3\tsat\tsit\tVERB\tVBD\t_\t0\troot\t_\t_
4\ton\ton\tADP\tIN\t_\t6\tcase\t_\t_
5\tthe\tthe\tDET\tDT\t_\t6\tdet\t_\t_
6\tmat\tmat\tNOUN\tNN\t_\t3\tobl\t_\t_
7\tand\tand\tCCONJ\tCC\t_\t9\tcc\t_\t_
8\tthe\tthe\tDET\tDT\t_\t9\tdet\t_\t_
9\tdog\tdog\tNOUN\tNN\t_\t3\tconj\t_\t_
10\truns\trun\tVERB\tVBZ\t_\t3\tparataxis\t_\t_
11\t!\t!\tPUNCT\t.\t_\t3\tpunct\t_\t_
"""


def test_probe_command_matches_sentence_by_sentence_scoring(tiny_model, tmp_path, capsys):
    treebank = tmp_path / "tiny.conllu"
    treebank.write_text(TREEBANK, encoding="utf-8")
    output = tmp_path / "probe"
    # --max-seq-len 12 skips sentence c (13 pieces with [CLS]/[SEP]); batches of 1 and 2.
    assert main(["probe", "--model", tiny_model, "--treebank", str(treebank), "--output",
                 str(output), "--max-seq-len", "12", "--batch-size", "1", "--min-count",
                 "2"]) == 0
    assert "probed 2 sentences (1 skipped" in capsys.readouterr().out
    assert sorted(os.listdir(output)) == ["attention_statistics.png", "best_heads.png",
                                          "report.json", "report.md"]
    report = json.loads((output / "report.json").read_text())
    assert report["settings"]["sentences"] == 2
    assert report["settings"]["skipped_longer_than_max_seq_len"] == 1
    # The reference: each sentence alone through the encoder, no batching or padding.
    loaded = model_source.resolve(tiny_model).load()
    config, params, vocab_path = loaded.config, loaded.params, loaded.source.vocab_path
    tokenizer = load_tokenizer(vocab_path)
    counts = ProbeCounts(config.num_layers, config.num_heads)
    for sentence in list(read_conllu(str(treebank)))[:2]:
        pieces = tokenizer.encode_batch(list(sentence.words))
        ids = [tokenizer.cls_id, *[i for word in pieces for i in word], tokenizer.sep_id]
        token_attention = np.asarray(inference.encode(
            params["bert"], np.array([ids]), np.zeros((1, len(ids)), np.int32),
            np.ones((1, len(ids)), np.int32), config=config, layers=(1, 2),
            with_attention=True)["attention"][:, 0])
        words = word_attention(token_attention, piece_word_ids([len(p) for p in pieces]))
        counts.add(sentence.words, sentence.heads, sentence.relations, words)
    expected = counts.result()
    by_name = {entry["relation"]: entry for entry in report["relations"]}
    assert set(by_name) == set(expected.relations)
    for index, relation in enumerate(expected.relations):
        # Ratios of equal counts (unless float32 steps flipped an argmax), which report.json
        # rounds to 5 decimals: 5e-6 off at most.
        np.testing.assert_allclose(by_name[relation]["head_accuracy"],
                                   expected.head_accuracy[index], atol=1e-5)
        assert by_name[relation]["count"] == expected.counts[index]
    assert [row["relation"] for row in report["rows"]] == ["det", "nsubj", "all"]
    markdown = (output / "report.md").read_text()
    assert "| det | 2 |" in markdown and "| 2-2 |" in markdown  # a statistics row


def test_probe_command_errors_name_the_file_and_line(tiny_model, tmp_path, capsys):
    broken = tmp_path / "broken.conllu"
    broken.write_text(TREEBANK.replace("4\thome\thome\tADV\tRB\t_\t3", "4\thome\thome"),
                      encoding="utf-8")
    output = tmp_path / "out"
    assert main(["probe", "--model", tiny_model, "--treebank", str(broken), "--output",
                 str(output)]) == 2
    assert f"{broken}:5: expected 10 tab-separated columns" in capsys.readouterr().err
    assert not output.exists() and not any(name.startswith(".") for name in os.listdir(tmp_path))


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--proxy-server=127.0.0.1:9"]  # any network request would fail


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install "
                    "chromium) for the browser test of the head view")
def test_head_view_renders_offline_in_a_headless_browser(attention_output):
    output, _ = attention_output
    with tempfile.TemporaryDirectory() as profile:
        dom = subprocess.run(
            [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "--dump-dom",
             (output / "head_view.html").as_uri()],
            capture_output=True, text=True, timeout=60).stdout
    assert 'data-rendered="yes"' in dom, dom[:500]
    lines = int(re.search(r'data-lines="(\d+)"', dom).group(1))
    attention = np.load(output / "attention.npz")["attention"]  # (L, H, T, T)
    # Layer 1 with every head ticked: one line per weight of at least 0.01 (as the page
    # stores it: in 255ths).
    assert lines == int((np.round(attention[0] * 255) / 255 >= 0.01).sum()) > 0
    assert dom.count("<line") == lines and dom.count('class="token') == 2 * 17
