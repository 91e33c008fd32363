"""Released ModernBERT-family checkpoints' configs: random-init models at their published sizes
load and match transformers (no Hub here, so the weights are drawn, the configs are theirs).

The config.json values (architecture fields) as the Hub's copies give them:
  - jhu-clsp/ettin-encoder-17m: 7 layers, hidden 256, GeGLU 384, 4 heads, window 128, a
    global layer every 3rd, both RoPE bases 160,000, 7,999 positions, vocabulary 50,368
    (ModernBERT's tokenizer); read from models fine-tuned from it (benjamintli/colbert-code-17m,
    lightonai/LateOn-Code-edge, whose only other difference is a vocabulary grown by 2).
  - jhu-clsp/ettin-encoder-150m: ModernBERT-base's shape (22 layers, hidden 768, GeGLU 1,152,
    12 heads) with Ettin's RoPE bases (160,000 both) and 7,999 positions.
  - jhu-clsp/mmBERT-small: 22 layers, hidden 384, GeGLU 1,152, 6 heads, window 128, both RoPE
    bases 160,000, 8,192 positions, Gemma 2's 256,000-token vocabulary, tied embeddings
    (a copy of its config.json: datalama/mmBERT-small).

Bound: 5e-5 on the last hidden state (tests/test_modernbert.py's, for the same sums in another
order). The rows: one longer than the 128-token window on both sides of its middle tokens
(so the sliding layers' band is exercised at its real width) beside a short padded one.
"""

import numpy as np
import pytest
from modernbert_helpers import torch_forward

from bert_jax.interop import model_source
from bert_jax.models.families import family_of

BOUND = 5e-5
ETTIN = dict(global_attn_every_n_layers=3, local_attention=128, global_rope_theta=160000.0,
             local_rope_theta=160000.0, max_position_embeddings=7999, vocab_size=50368,
             pad_token_id=50283, cls_token_id=50281, sep_token_id=50282, bos_token_id=50281,
             eos_token_id=50282, norm_eps=1e-5)
RELEASED = {
    "ettin-encoder-17m": dict(ETTIN, num_hidden_layers=7, hidden_size=256,
                              intermediate_size=384, num_attention_heads=4),
    "ettin-encoder-150m": dict(ETTIN, num_hidden_layers=22, hidden_size=768,
                               intermediate_size=1152, num_attention_heads=12),
    "mmBERT-small": dict(num_hidden_layers=22, hidden_size=384, intermediate_size=1152,
                         num_attention_heads=6, global_attn_every_n_layers=3,
                         local_attention=128, global_rope_theta=160000.0,
                         local_rope_theta=160000.0, max_position_embeddings=8192,
                         vocab_size=256000, pad_token_id=0, cls_token_id=1, sep_token_id=1,
                         bos_token_id=2, eos_token_id=1, norm_eps=1e-5,
                         tie_word_embeddings=True),
}
LONG, SHORT = 160, 17  # tokens: past the window (64 a side) on both sides of its middle, and short


def _rows(vocab_size: int, cls_id: int, sep_id: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    ids = np.zeros((2, LONG), np.int64)
    mask = np.zeros((2, LONG), np.int64)
    for row, length in enumerate((LONG, SHORT)):
        ids[row, :length] = [cls_id, *rng.integers(5, vocab_size, length - 2), sep_id]
        mask[row, :length] = 1
    return ids, mask


def _clipped_normal(tensor, mean=0.0, std=1.0, a=-2.0, b=2.0, generator=None):
    """torch's trunc_normal_ drawn as a normal clipped at the same bounds: a tenth of the time
    (0.35 s against 3.7 s for the 50,368 x 768 embedding, Ice Lake), the same magnitudes."""
    return tensor.normal_(mean, std, generator=generator).clamp_(a, b)


@pytest.mark.parametrize("name", list(RELEASED))
def test_a_released_config_loads_and_matches_transformers(tmp_path, name, monkeypatch):
    transformers = pytest.importorskip("transformers")
    values = RELEASED[name]
    torch = pytest.importorskip("torch")
    config = transformers.ModernBertConfig(**values)
    config._attn_implementation = "eager"
    torch.manual_seed(1)
    # transformers' own initialisation (truncated normal at initializer_range 0.02 cut at 2
    # standard deviations, norms at 1): the magnitudes a released checkpoint has, which
    # tests/test_modernbert.py's redrawn weights (std 0.08 whatever the width) exceed at 768
    # wide and 22 deep. Its truncated normal is the test's slowest part, so it is clipped.
    initialization = pytest.importorskip("transformers.initialization")
    monkeypatch.setitem(initialization.TORCH_INIT_FUNCTIONS, "trunc_normal_", _clipped_normal)
    reference = transformers.ModernBertModel(config).eval()
    reference.save_pretrained(str(tmp_path))
    loaded = model_source.in_directory(str(tmp_path)).load()
    ours_config = loaded.config
    assert (ours_config.num_layers, ours_config.hidden_dim, ours_config.mlp_dim,
            ours_config.num_heads, ours_config.vocab_size, ours_config.max_positions) == (
        values["num_hidden_layers"], values["hidden_size"], values["intermediate_size"],
        values["num_attention_heads"], values["vocab_size"], values["max_position_embeddings"])
    assert (ours_config.global_rope_theta, ours_config.local_rope_theta) == (160000.0, 160000.0)
    ids, mask = _rows(values["vocab_size"], values["cls_token_id"], values["sep_token_id"])
    theirs = torch_forward(reference, ids, mask).last_hidden_state.numpy()
    (ours, _), _ = family_of(ours_config).encoder(ours_config, with_pooler=False).apply(
        {"params": loaded.params[family_of(ours_config).encoder_key]}, ids.astype(np.int32),
        np.zeros_like(ids, np.int32), mask.astype(np.int32), mutable=["intermediates"])
    real = mask[..., None] > 0
    worst = float(np.abs(np.where(real, np.asarray(ours) - theirs, 0)).max())
    print(f"{name}: last hidden state, worst difference {worst:.2e} "
          f"(largest value {np.abs(theirs * real).max():.2f})")
    assert worst < BOUND


# Text the Gemma-style BPE is trained on; the test texts add what it never saw (emoji, Thai,
# accents), which only byte fallback can encode.
GEMMA_TRAINING = ["The quick brown fox jumps over the lazy dog.",
                  "Paris est la capitale de la France.", "Berlin ist die Hauptstadt.",
                  "中文字符 and 日本語 too.", "def f(x):\n    return x  # code"]
GEMMA_TEXTS = ["The quick brown fox.", "  spaces  before and after  ", "naïve café 🙂",
               "ภาษาไทย ist neu", "tab\tand\nnewline", "[MASK] at the start, and a <mask>"]


def _gemma_style_tokenizer(directory) -> str:
    """A small tokenizer.json of Gemma 2's kind (mmBERT's): a BPE over '▁'-joined text with
    byte fallback (<0x00>..<0xFF> in the vocabulary) and no pre-tokenizer, the normaliser
    replacing spaces with '▁', the decoder undoing it; specials <pad> <eos> <bos> <unk>
    <mask> at ids 0-4 as mmBERT's config.json numbers them, and the template
    `<bos> A <eos>` / `<bos> A <eos> B <eos>` (the tokenizer_config names them cls/sep)."""
    import json
    import os

    from tokenizers import Tokenizer, decoders, models, normalizers, processors, trainers

    specials = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>"]
    backend = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    backend.normalizer = normalizers.Replace(" ", "▁")
    backend.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                         decoders.Fuse()])
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=specials + [f"<0x{byte:02X}>" for byte in range(256)],
        show_progress=False)
    backend.train_from_iterator(GEMMA_TRAINING, trainer=trainer)
    backend.post_processor = processors.TemplateProcessing(
        single="<bos>:0 $A:0 <eos>:0", pair="<bos>:0 $A:0 <eos>:0 $B:1 <eos>:1",
        special_tokens=[("<bos>", 2), ("<eos>", 1)])
    os.makedirs(directory, exist_ok=True)
    backend.save(os.path.join(directory, "tokenizer.json"))
    with open(os.path.join(directory, "tokenizer_config.json"), "w", encoding="utf-8") as file:
        json.dump(dict(tokenizer_class="PreTrainedTokenizerFast", pad_token="<pad>",
                       unk_token="<unk>", cls_token="<bos>", sep_token="<eos>",
                       mask_token="<mask>", bos_token="<bos>", eos_token="<eos>"), file)
    return str(directory)


def test_a_gemma_style_tokenizer_with_byte_fallback_gives_transformers_ids(tmp_path):
    transformers = pytest.importorskip("transformers")
    from input_pipeline.tokenization import load_tokenizer

    directory = _gemma_style_tokenizer(tmp_path / "tokenizer")
    ours = load_tokenizer(directory)
    theirs = transformers.AutoTokenizer.from_pretrained(directory)
    assert ours.vocab_size == len(theirs)
    fallback = 0
    for text in GEMMA_TEXTS:
        expected = theirs(text)["input_ids"]
        assert ours.encode_for_model([text], 64)["input_ids"][0][:len(expected)].tolist() == \
            expected, text
        fallback += sum(theirs.convert_ids_to_tokens(index).startswith("<0x")
                        for index in expected)
    assert fallback > 0  # the emoji, Thai and accents went through byte fallback
    assert (ours.cls_id, ours.sep_id, ours.pad_id, ours.mask_id) == (2, 1, 0, 4)
