"""Shared by the EuroBERT tests: small random transformers `EuroBert*` models saved as HF
directories, over a Llama-3-like tokenizer.json (tokenizer_json_helpers.py)."""

import numpy as np
import pytest
from modernbert_helpers import mixed_batch, randomize, torch_forward  # noqa: F401 (re-exported)

# A small EuroBERT with grouped-query attention (4 query heads read 2 key/value heads, so a
# wrong grouping changes the outputs), biases switched on where the config allows, untied
# output embeddings as EuroBERT-210m has them. Token ids as modernbert_helpers' batches use.
HF_CONFIG = dict(vocab_size=96, hidden_size=32, intermediate_size=48, num_hidden_layers=3,
                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                 pad_token_id=0, bos_token_id=1, eos_token_id=2, mask_token_id=3,
                 attention_bias=True, mlp_bias=True, rope_parameters={
                     "rope_type": "default", "rope_theta": 250000.0})
# EuroBERT-210m's published config.json (the Hub's EuroBERT/EuroBERT-210m, as transformers'
# EuroBertConfig defaults say): its widths, at 2 of its 12 layers to keep the test short.
EUROBERT_210M = dict(vocab_size=128256, hidden_size=768, intermediate_size=3072,
                     num_attention_heads=12, num_key_value_heads=12, rms_norm_eps=1e-5,
                     max_position_embeddings=8192, tie_word_embeddings=False,
                     rope_parameters={"rope_type": "default", "rope_theta": 250000.0})


def torch_modules():
    torch = pytest.importorskip("torch", reason="torch is the reference")
    transformers = pytest.importorskip("transformers", reason="transformers is the reference")
    return torch, transformers


def hf_model(architecture: str, directory=None, seed: int = 0, **overrides):
    """A random transformers `architecture` (e.g. "EuroBertForMaskedLM"), eager attention,
    saved to `directory` if given."""
    _, transformers = torch_modules()
    config = transformers.EuroBertConfig(**{**HF_CONFIG, **overrides})
    config._attn_implementation = "eager"
    model = randomize(getattr(transformers, architecture)(config), seed)
    if directory is not None:
        model.save_pretrained(str(directory))
    return model


def packed_row(seed: int = 3):
    """Two sequences in one row, then padding: (row, instance_ids, position_ids, [(ids,
    start)] each sequence alone and where it starts), each (1, 28)."""
    first, _ = mixed_batch(seed=seed, batch=1, seq_len=14)
    second, _ = mixed_batch(seed=seed + 1, batch=1, seq_len=9)
    row = np.concatenate([first, second, np.zeros((1, 5), np.int32)], axis=1)
    instance_ids = np.array([[1] * 14 + [2] * 9 + [0] * 5], np.int32)
    position_ids = np.array([list(range(14)) + list(range(9)) + [0] * 5], np.int32)
    return row, instance_ids, position_ids, [(first, 0), (second, 14)]


def eurobert_directory(directory, architecture: str = "EuroBertForMaskedLM", seed: int = 0,
                       **overrides):
    """A EuroBERT directory as the Hub ships one: a random transformers `architecture` over a
    EuroBERT-like byte-level BPE (tests/tokenizer_json_helpers.py), its special ids in
    config.json. Returns (the transformers model, the directory as a str)."""
    from tokenizer_json_helpers import write_eurobert_tokenizer

    from input_pipeline.tokenization import load_tokenizer

    directory = str(directory)
    tokenizer = load_tokenizer(write_eurobert_tokenizer(directory))
    ids = dict(vocab_size=tokenizer.vocab_size, pad_token_id=tokenizer.pad_id,
               bos_token_id=tokenizer.cls_id, eos_token_id=tokenizer.sep_id,
               mask_token_id=tokenizer.mask_id)
    model = hf_model(architecture, directory, seed, **{**ids, **overrides})
    return model, directory
