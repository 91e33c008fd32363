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


def packed_differences(config, params):
    """[(implementation, the worst difference between a sequence packed with another and the
    same sequence alone)] through the reference core and XLA's kernel, for each of
    `packed_row`'s two sequences (padding positions not compared: none is in a sequence)."""
    from bert_jax.models.config import Precision
    from bert_jax.models.families import family_of

    row, instance_ids, position_ids, sequences = packed_row()
    differences = []
    for implementation in ("reference", "xla"):
        encoder = family_of(config).encoder(config, Precision(attention=implementation))
        packed, _ = encoder.apply({"params": params["eurobert"]}, row, np.zeros_like(row),
                                  (instance_ids > 0).astype(np.int32), instance_ids=instance_ids,
                                  position_ids=position_ids)
        for ids, start in sequences:
            alone, _ = encoder.apply({"params": params["eurobert"]}, ids, np.zeros_like(ids),
                                     np.ones_like(ids))
            worst = np.abs(np.asarray(packed[:, start:start + ids.shape[1]]) - alone).max()
            differences.append((implementation, float(worst)))
    return differences


def load_directory(directory):
    """(config, params, model source) of an HF directory, read as every command reads it."""
    from bert_jax.interop import model_source

    source = model_source.in_directory(str(directory))
    loaded = source.load()
    return loaded.config, loaded.params, source


def worst_difference(ours, theirs, mask=None) -> float:
    ours, theirs = np.asarray(ours), np.asarray(theirs)
    if mask is not None:  # padding positions' outputs are not compared (no loss reads them)
        real = mask.reshape(mask.shape + (1,) * (ours.ndim - mask.ndim)) > 0
        ours, theirs = np.where(real, ours, 0), np.where(real, theirs, 0)
    return float(np.max(np.abs(ours - theirs)))


def hidden_and_logits(reference, config, params, ids, mask):
    """The worst differences of every hidden state and of the MLM logits at 3 positions."""
    from bert_jax.models.families import family_of

    theirs = torch_forward(reference, ids, mask, output_hidden_states=True)
    family = family_of(config)
    (_, pooled), state = family.encoder(config).apply(
        {"params": params["eurobert"]}, ids, np.zeros_like(ids), mask,
        mutable=["intermediates"])
    assert pooled is None
    hidden = state["intermediates"]["hidden_states"]
    assert len(hidden) == config.num_layers + 1 == len(theirs.hidden_states)
    worst = [worst_difference(ours, reference_state.numpy(), mask)
             for ours, reference_state in zip(hidden, theirs.hidden_states)]
    positions = np.array([[3, 10, 17], [1, 5, 9], [1, 2, 3]], np.int32)[:len(ids)]
    logits = family.masked_lm_model(config).apply({"params": params}, ids, np.zeros_like(ids),
                                                  mask, positions)
    expected = np.take_along_axis(theirs.logits.numpy(), positions[..., None], axis=1)
    return worst, worst_difference(logits, expected)


def classifier_difference(reference, directory, num_labels: int, seed: int, tokens: bool):
    """(config, the worst difference of our sequence classifier's logits, or the token
    classifier's at real tokens, read from `directory`, against `reference`'s)."""
    from bert_jax.models.families import family_of

    config, params, source = load_directory(directory)
    assert source.task_info()["task"] == ("ner" if tokens else "classify")
    family = family_of(config)
    model = (family.token_classifier if tokens else family.sequence_classifier)(config,
                                                                                num_labels)
    ids, mask = mixed_batch(seed=seed)
    logits = model.apply({"params": params}, ids, np.zeros_like(ids), mask)
    return config, worst_difference(logits, torch_forward(reference, ids, mask).logits.numpy(),
                                    mask if tokens else None)


class SpecialIds:  # the special ids an exported config.json records
    pad_id, cls_id, sep_id, mask_id = 0, 1, 2, 3


def export_difference(directory, architecture: str, reference) -> tuple:
    """Reads the HF directory `directory`/hf, exports it to `directory`/export and loads that
    in transformers (no missing or unexpected key allowed); checks its tensors are the
    original's, bit for bit. Returns (the export's transformers model, the bert-jax config)."""
    from safetensors.numpy import load_file

    from bert_jax.interop import huggingface

    _, transformers = torch_modules()
    config, params, source = load_directory(directory / "hf")
    head = (source.task_info() or {}).get("head")
    (directory / "export").mkdir()
    written = huggingface.write_directory(config, params, str(directory / "export"),
                                          SpecialIds(), head=head)
    assert written == architecture
    model, info = getattr(transformers, architecture).from_pretrained(
        str(directory / "export"), output_loading_info=True, attn_implementation="eager")
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    original = load_file(str(directory / "hf" / "model.safetensors"))
    again = load_file(str(directory / "export" / "model.safetensors"))
    assert sorted(original) == sorted(again)
    for name, tensor in original.items():
        np.testing.assert_array_equal(again[name], tensor, err_msg=name)
    return model.eval(), config
