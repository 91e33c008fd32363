"""An UltraBERT directory as transformers saves one (config.json + model.safetensors, beside a
byte-level BPE tokenizer.json) through the path every Hugging Face directory takes:
`bert_jax.load`, `bert-jax convert` and `embed`, held to transformers' `Ultrabert*` classes
and sentence-transformers.

Bounds: random tiny models, float32 both sides, values of size ~1-5: 5e-5 as in
tests/test_ultrabert.py (its docstring says why).
"""

import json
import os

import numpy as np
import pytest
from modernbert_helpers import torch_forward
from test_ultrabert import hf_model

import bert_jax
from bert_jax.cli import main

BOUND = 5e-5
LINES = ["The quick brown fox jumps over the lazy dog, and the dog sleeps on.",
         "A short one.",
         "Paris is the capital of France, and Berlin is the capital of Germany."]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """(the transformers UltrabertForMaskedLM, its directory as a str, a work directory)."""
    from tokenizer_json_helpers import write_eurobert_tokenizer

    from input_pipeline.tokenization import load_tokenizer

    work = tmp_path_factory.mktemp("ultrabert")
    directory = str(work / "model")
    tokenizer = load_tokenizer(write_eurobert_tokenizer(directory))
    model = hf_model("UltrabertForMaskedLM", directory, vocab_size=tokenizer.vocab_size,
                     pad_token_id=tokenizer.pad_id, bos_token_id=tokenizer.cls_id,
                     eos_token_id=tokenizer.sep_id)
    return model, directory, work


def _hf_encode(directory, texts):
    from transformers import AutoTokenizer

    encoded = AutoTokenizer.from_pretrained(directory)(texts, padding=True, return_tensors="np")
    return encoded["input_ids"], encoded["attention_mask"]


def test_load_gives_transformers_hidden_states(model_dir):
    """`bert_jax.load` on the directory: an ultrabert-variant model whose every layer's
    hidden state is transformers' on rows longer than the window beside shorter ones, and
    whose fill-mask ranks first the token transformers' masked-LM logits rank first."""
    model, directory, _ = model_dir
    loaded = bert_jax.load(directory)
    assert loaded.config.variant == "ultrabert" and loaded.config.sliding_window == 4
    layers = list(range(loaded.config.num_layers + 1))
    ours = loaded.features(LINES, layers=layers, max_seq_len=64)
    ids, mask = _hf_encode(directory, LINES)
    assert ids.shape[1] > 2 * loaded.config.sliding_window + 1  # a row the window cuts
    theirs = torch_forward(model, ids, mask, output_hidden_states=True).hidden_states
    real = mask[..., None] > 0
    worst = max(np.abs(ours[layer] - np.where(real, theirs[layer].numpy(), 0)).max()
                for layer in layers)
    print(f"bert_jax.load features: worst difference {worst:.2e}")
    assert worst < BOUND
    text = "The quick brown <|mask|> jumps over the lazy dog."
    ids, mask = _hf_encode(directory, [text])
    position = int(np.flatnonzero(ids[0] == loaded.tokenizer.mask_id)[0])
    best = int(np.argmax(torch_forward(model, ids, mask).logits.numpy()[0, position]))
    [candidates] = loaded.fill_mask(text, top_k=1)  # UltraBERT's two-layer head, then decoder
    assert candidates[0][0].strip() == loaded.tokenizer.decode([best]).strip()


def test_convert_to_hf_loads_in_transformers_and_imports_again_bit_identically(model_dir):
    """HF -> bert-jax -> HF: transformers loads the UltrabertForMaskedLM with no missing or
    unexpected keys and gives the original's logits; its tensors are the original file's,
    and a second import and export writes them again, bit for bit."""
    from safetensors.numpy import load_file
    from transformers import UltrabertForMaskedLM

    model, directory, work = model_dir
    assert main(["convert", directory, str(work / "bj"), "--to", "bert-jax"]) == 0
    assert main(["convert", str(work / "bj"), str(work / "hf"), "--to", "hf"]) == 0
    config = json.loads((work / "hf" / "config.json").read_text())
    assert config["architectures"] == ["UltrabertForMaskedLM"]
    exported, info = UltrabertForMaskedLM.from_pretrained(
        str(work / "hf"), output_loading_info=True, attn_implementation="eager")
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    ids, mask = _hf_encode(directory, LINES)
    worst = np.abs(torch_forward(exported.eval(), ids, mask).logits.numpy()
                   - torch_forward(model, ids, mask).logits.numpy()).max()
    print(f"convert --to hf: logits worst difference {worst:.2e}")
    assert worst < BOUND
    assert main(["convert", str(work / "hf"), str(work / "bj2"), "--to", "bert-jax"]) == 0
    assert main(["convert", str(work / "bj2"), str(work / "hf2"), "--to", "hf"]) == 0
    original = load_file(f"{directory}/model.safetensors")
    for path in (work / "hf", work / "hf2"):
        again = load_file(str(path / "model.safetensors"))
        assert sorted(again) == sorted(original)
        for name, tensor in original.items():
            np.testing.assert_array_equal(again[name], tensor, err_msg=f"{path.name}: {name}")


def test_embed_equals_sentence_transformers_of_the_export(model_dir):
    """`convert --to sentence-transformers` writes a directory sentence-transformers loads
    as an UltrabertModel; `embed` on the original and on the export gives its embeddings."""
    sentence_transformers = pytest.importorskip("sentence_transformers")
    _, directory, work = model_dir
    (work / "lines.txt").write_text("\n".join(LINES) + "\n", encoding="utf-8")
    exported = work / "st"
    assert main(["convert", directory, str(exported), "--to", "sentence-transformers"]) == 0
    reference = sentence_transformers.SentenceTransformer(str(exported), device="cpu")
    assert type(reference[0].auto_model).__name__ == "UltrabertModel"
    theirs = reference.encode(LINES, convert_to_numpy=True)
    for model in (directory, str(exported)):
        output = work / f"embeddings_{os.path.basename(model)}.npy"
        assert main(["embed", "--model", model, "--input", str(work / "lines.txt"),
                     "--output", str(output)]) == 0
        worst = np.abs(np.load(output) - theirs).max()
        print(f"embed {os.path.basename(model)}: worst difference {worst:.2e}")
        assert worst < BOUND
