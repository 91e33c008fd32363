"""Shared by the ModernBERT tests: small random transformers models saved as HF directories, and
the inputs both sides run on."""

import numpy as np
import pytest

# A small ModernBERT whose window (8 tokens: 4 each side) is much shorter than the test rows,
# with 4 layers so that layers 0 and 3 are global and 1 and 2 slide; biases switched on where
# the config allows, so a bias that is dropped or misplaced cannot hide.
HF_CONFIG = dict(vocab_size=96, hidden_size=32, intermediate_size=48, num_hidden_layers=4,
                 num_attention_heads=2, local_attention=8, max_position_embeddings=64,
                 global_attn_every_n_layers=3, pad_token_id=0, cls_token_id=1, sep_token_id=2,
                 bos_token_id=1, eos_token_id=2, norm_bias=True, attention_bias=True,
                 mlp_bias=True, classifier_bias=True)


def torch_modules():
    torch = pytest.importorskip("torch", reason="torch is the reference")
    transformers = pytest.importorskip("transformers", reason="transformers is the reference")
    return torch, transformers


def hf_config(**overrides):
    _, transformers = torch_modules()
    return transformers.ModernBertConfig(**{**HF_CONFIG, **overrides})


def randomize(model, seed: int = 0):
    """Every parameter drawn again (norm scales near 1, the rest small and centred), so a
    LayerNorm bias or a projection bias left out of a conversion changes the outputs."""
    torch, _ = torch_modules()
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            noise = torch.randn(parameter.shape, generator=generator)
            scale = 0.2 if name.endswith("norm.weight") else 0.1 if "norm" in name else 0.08
            parameter.copy_((1.0 if name.endswith("norm.weight") else 0.0) + scale * noise)
    return model.eval()


def hf_model(architecture: str, directory=None, seed: int = 0, **overrides):
    """A random transformers `architecture` (e.g. "ModernBertForMaskedLM"), eager attention,
    saved to `directory` if given."""
    _, transformers = torch_modules()
    config = hf_config(**overrides)
    config._attn_implementation = "eager"
    model = randomize(getattr(transformers, architecture)(config), seed)
    if directory is not None:
        model.save_pretrained(str(directory))
    return model


def mixed_batch(seed: int = 0, batch: int = 3, seq_len: int = 24):
    """(input_ids, input_mask): a row longer than the window on both sides of every token,
    and shorter rows padded; [CLS] ... [SEP] as the tokenizer makes them."""
    rng = np.random.default_rng(seed)
    lengths = [seq_len, 11, 5][:batch] + [seq_len] * max(0, batch - 3)
    ids = np.zeros((batch, seq_len), np.int32)
    mask = np.zeros((batch, seq_len), np.int32)
    for row, length in enumerate(lengths):
        ids[row, :length] = [1, *rng.integers(5, HF_CONFIG["vocab_size"], length - 2), 2]
        mask[row, :length] = 1
    return ids, mask


def torch_forward(model, ids, mask, **keywords):
    torch, _ = torch_modules()
    with torch.no_grad():
        return model(input_ids=torch.as_tensor(ids, dtype=torch.long),
                     attention_mask=torch.as_tensor(mask, dtype=torch.long), **keywords)


def modernbert_directory(directory, architecture: str = "ModernBertForMaskedLM", seed: int = 0,
                         **overrides):
    """A ModernBERT directory as the Hub ships one: a random transformers `architecture` over
    a ModernBERT-like byte-level BPE (tests/tokenizer_json_helpers.py), its special ids in
    config.json. Returns (the transformers model, the directory as a str)."""
    from tokenizer_json_helpers import write_modernbert_tokenizer

    from input_pipeline.tokenization import load_tokenizer

    directory = str(directory)
    tokenizer = load_tokenizer(write_modernbert_tokenizer(directory))
    ids = dict(vocab_size=tokenizer.vocab_size, pad_token_id=tokenizer.pad_id,
               cls_token_id=tokenizer.cls_id, sep_token_id=tokenizer.sep_id,
               bos_token_id=tokenizer.cls_id, eos_token_id=tokenizer.sep_id)
    model = hf_model(architecture, directory, seed, **{**ids, **overrides})
    return model, directory
