"""`bert-jax features`, `fill-mask` and `convert` end to end through `bert_jax.cli.main`."""

import json
import os
import shutil

import numpy as np
import pytest
from interop_helpers import minilm_directory, tiny_random_model, torch_inputs
from tolerances import ENCODER_STEPS, assert_close

from bert_jax import inference
from bert_jax.interop import model_source, model_writers
from bert_jax.cli import main
from input_pipeline.tokenization import load_tokenizer

LINES = [
    "It was in July, 1805, and the speaker was the well-known Anna Pavlovna Scherer.",
    "Natasha laughed.",
    "The prince answered nothing.\tShe went on talking about the war.",
    "Pierre had been educated abroad, and this reception was the first he had attended in Russia.",
    "Yes, I heard of it.",
]
FEATURE_ARGS = ["--layers=0,-1", "--max-seq-len", "32", "--batch-size", "2"]


@pytest.fixture(scope="module")
def minilm_features(tmp_path_factory):
    """The MiniLM model, the input file, and the unpooled `features` output."""
    directory = minilm_directory()
    work = tmp_path_factory.mktemp("features")
    input_path = work / "lines.txt"
    input_path.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    output = work / "all.npz"
    assert main(["features", "--model", directory, "--input", str(input_path),
                 "--output", str(output), "--attention", *FEATURE_ARGS]) == 0
    return directory, input_path, dict(np.load(output))


def test_features_match_a_direct_model_call(minilm_features):
    directory, _, arrays = minilm_features
    loaded = model_source.resolve(directory).load()
    config, params, vocab_path = loaded.config, loaded.params, loaded.source.vocab_path
    texts = [tuple(line.split("\t")) if "\t" in line else line for line in LINES]
    batch = load_tokenizer(vocab_path).encode_for_model(texts, 32)
    count, seq_len = batch["input_ids"].shape
    # The longest input sets seq_len; the shorter ones run in a smaller length bucket.
    assert seq_len == 26 and batch["input_mask"].sum(1).min() < 16
    np.testing.assert_array_equal(arrays["input_ids"], batch["input_ids"])
    np.testing.assert_array_equal(arrays["attention_mask"], batch["input_mask"])
    assert arrays["layer_0"].shape == arrays["layer_-1"].shape == (count, seq_len, 384)
    assert arrays["attention_layer_-1"].shape == (count, 12, seq_len, seq_len)
    assert "attention_layer_0" not in arrays  # the embedding output has no attention
    direct = inference.encode(params["bert"], batch["input_ids"], batch["segment_ids"],
                              batch["input_mask"], config=config, layers=(0, 6),
                              with_attention=True)
    mask = batch["input_mask"][..., None]
    for index, name in enumerate(("layer_0", "layer_-1")):
        expected = np.asarray(direct["hidden_states"][index]) * mask
        # The command batches by length bucket, the direct call all at once: the same
        # float32 sums blocked otherwise (tolerances.ENCODER_STEPS).
        assert_close(arrays[name], expected, ENCODER_STEPS, err_msg=name)
    # Layer 0 is the embedding output: LayerNorm(word + position + segment) of the weights.
    embeddings = params["bert"]["embeddings"]
    summed = (embeddings["word_embeddings"]["embedding"][batch["input_ids"]]
              + embeddings["position_embeddings"]["embedding"][:seq_len]
              + embeddings["segment_embeddings"]["embedding"][batch["segment_ids"]])
    normed = (summed - summed.mean(-1, keepdims=True)) / np.sqrt(summed.var(-1, keepdims=True)
                                                                 + config.layer_norm_eps)
    normed = normed * embeddings["layer_norm"]["scale"] + embeddings["layer_norm"]["bias"]
    # A LayerNorm of 384 values against numpy's (means and variances of 384 float32 terms,
    # a root, a quotient): about 2 x 384 roundings of the largest term in the worst case.
    assert_close(arrays["layer_0"], normed * mask, 2 * 384)
    real = batch["input_mask"].astype(bool)  # (N, T)
    attention = arrays["attention_layer_-1"].transpose(0, 2, 1, 3)[real]  # (real queries, nh, T)
    expected = np.asarray(direct["attention"][1]).transpose(0, 2, 1, 3)[real]
    assert_close(attention, expected, ENCODER_STEPS, scale=1.0)  # as the hidden states
    # Probabilities over at most 26 keys: 26 roundings of a sum of 1.
    assert_close(attention.sum(-1), 1.0, 26)


def test_features_pooling_uses_only_real_tokens(minilm_features, tmp_path):
    directory, input_path, unpooled = minilm_features
    output = tmp_path / "mean.npz"
    assert main(["features", "--model", directory, "--input", str(input_path), "--output",
                 str(output), "--pool", "mean", "--combine", "concat", *FEATURE_ARGS]) == 0
    arrays = dict(np.load(output))
    mask = unpooled["attention_mask"][..., None]
    means = [unpooled[name].sum(1) / mask.sum(1) for name in ("layer_0", "layer_-1")]
    # Means over up to 26 tokens of hidden states computed in another batch (ENCODER_STEPS)
    # summed in another order (26 roundings of the sum).
    assert_close(arrays["features"], np.concatenate(means, -1), ENCODER_STEPS + 26)
    assert arrays["features"].shape == (len(LINES), 2 * 384) and "layer_0" not in arrays
    over_all_positions = unpooled["layer_-1"].mean(1)
    assert np.abs(arrays["features"][:, 384:] - over_all_positions).max() > 1e-2  # O(0.1)


@pytest.fixture(scope="module")
def pretraining_export(tmp_path_factory):
    directory = tmp_path_factory.mktemp("fill")
    config, params, tokenizer = tiny_random_model(directory, seed=3)
    exported = str(directory / "hf")
    model_writers.export_huggingface(config, params, tokenizer, exported)
    return exported, tokenizer


def test_fill_mask_probabilities_match_transformers(pretraining_export, capsys):
    import torch
    import transformers

    exported, tokenizer = pretraining_export
    text = "the man went to the [MASK] . he bought a [MASK] of milk"
    assert main(["fill-mask", "--model", exported, "--top-k", "4", text]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == text and len(printed) == 3
    loaded = model_source.resolve(exported).load()
    config, params = loaded.config, loaded.params
    predictions = inference.fill_mask(config, params, tokenizer, text, top_k=4)
    ids, positions = inference.masked_input(tokenizer, text, 64)
    model = transformers.BertForPreTraining.from_pretrained(exported).eval()
    batch = dict(input_ids=np.array([ids]), segment_ids=np.zeros((1, len(ids))),
                 input_mask=np.ones((1, len(ids))))
    with torch.no_grad():
        logits = model(**torch_inputs(batch)).prediction_logits[0, positions]
    reference = torch.softmax(logits.double(), dim=-1).numpy()  # (P, vocab)
    for row, candidates, line in zip(reference, predictions, printed[1:]):
        probabilities = [probability for _, probability in candidates]
        assert probabilities == sorted(probabilities, reverse=True)
        expected = np.sort(row)[::-1][:4]
        # Ours in float32 against transformers' logits in float32, softmaxed in float64:
        # ENCODER_STEPS of the probabilities' scale, 1, less than 1e-5.
        assert_close(probabilities, expected, ENCODER_STEPS, scale=1.0)
        assert [tokenizer.token_to_id(token) for token, _ in candidates] == \
            list(np.argsort(-row, kind="stable")[:4])
        assert line.split()[2:4] == [candidates[0][0], f"{candidates[0][1]:.4f}"]


def test_convert_both_ways_through_the_command_line(pretraining_export, tmp_path, capsys):
    exported, _ = pretraining_export
    bert_jax_dir, hf_dir = tmp_path / "bj", tmp_path / "hf"
    assert main(["convert", exported, str(bert_jax_dir)]) == 0
    assert json.loads((bert_jax_dir / "model_config.json").read_text())["num_layers"] == 2
    assert main(["convert", str(bert_jax_dir), str(hf_dir)]) == 0
    from safetensors.numpy import load_file
    original = load_file(os.path.join(exported, "model.safetensors"))
    written = load_file(str(hf_dir / "model.safetensors"))
    assert sorted(written) == sorted(original)
    assert all(np.array_equal(written[name], original[name]) for name in original)
    assert main(["convert", str(bert_jax_dir), str(hf_dir)]) == 2  # not empty
    assert "not empty" in capsys.readouterr().err
    assert main(["convert", str(bert_jax_dir), str(hf_dir), "--overwrite",
                 "--hf-architecture", "BertModel"]) == 0
    assert json.loads((hf_dir / "config.json").read_text())["architectures"] == ["BertModel"]
    assert [name for name in os.listdir(tmp_path) if name.startswith(".")] == []  # no debris


def test_command_errors_exit_2_naming_the_path(pretraining_export, tmp_path, capsys):
    exported, _ = pretraining_export
    pickle_only = tmp_path / "pickle_only"
    pickle_only.mkdir()
    shutil.copy(os.path.join(exported, "config.json"), pickle_only)
    (pickle_only / "pytorch_model.bin").write_bytes(b"not read")
    unknown = tmp_path / "unknown"
    os.mkdir(unknown)
    for name in ("config.json", "vocab.txt"):
        shutil.copy(os.path.join(exported, name), unknown)
    from safetensors.numpy import load_file, save_file
    tensors = load_file(os.path.join(exported, "model.safetensors"))
    save_file({**tensors, "qa_outputs.weight": np.zeros((2, 2), np.float32)},
              str(unknown / "model.safetensors"))
    missing = str(tmp_path / "nowhere")
    lines = tmp_path / "lines.txt"
    lines.write_text("the cat sat on the mat .\n")
    cases = [
        (["convert", missing, str(tmp_path / "out")], [missing, "no such file"]),
        (["fill-mask", "--model", str(pickle_only), "a [MASK]"],
         [str(pickle_only), "pytorch_model.bin", "safetensors"]),
        (["features", "--model", str(unknown), "--input", str(lines), "--output",
          str(tmp_path / "x.npz")], [str(unknown), "qa_outputs.weight"]),
        (["fill-mask", "--model", minilm_directory(), "a [MASK]"], ["no masked-LM head"]),
    ]
    for argv, fragments in cases:
        assert main(argv) == 2, argv
        error = capsys.readouterr().err
        assert all(fragment in error for fragment in fragments), (argv, error)
    assert not (tmp_path / "out").exists() and not (tmp_path / "x.npz").exists()


def test_length_buckets_training_and_inference_ladders():
    training = sorted({inference.bucket_length(n, 512) for n in range(1, 513)})
    assert training == [8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512]
    serving = sorted({inference.bucket_length(n, 512, per_octave=4) for n in range(1, 513)})
    assert serving == [8, 12, 16, 20, 24, 28, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192,
                       224, 256, 320, 384, 448, 512]
    for per_octave in (2, 4):
        for length in range(1, 200):  # the smallest bucket that holds the batch, or the cap
            bucket = inference.bucket_length(length, 150, per_octave)
            assert bucket == 150 if length >= 150 else length <= bucket <= 150
    assert inference.bucket_length(5, 6) == 6  # a max_seq_len below 8 caps the first bucket
