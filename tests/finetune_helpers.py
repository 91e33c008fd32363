"""Shared by the fine-tuning tests: a tiny model directory and made-up labelled files."""

import numpy as np
from interop_helpers import WORDS, random_pretraining_params, write_vocab

from bert_jax.interop import model_writers
from bert_jax.models.presets import preset
from input_pipeline.tokenization import load_tokenizer


def tiny_model_directory(root) -> str:
    """A random one-layer BERT (hidden 32) with the small test vocabulary, as a bert-jax dir."""
    vocab = write_vocab(root)
    tokenizer = load_tokenizer(vocab)
    config = preset("tiny", vocab_size=tokenizer.vocab_size, hidden_dim=32, num_layers=1,
                    num_heads=2, mlp_dim=64, max_positions=64)
    destination = str(root / "tiny_model")
    model_writers.save_model(config, random_pretraining_params(config), tokenizer, destination)
    return destination


def made_up_sentences(count: int, seed: int) -> list[tuple[str, str]]:
    """(label, sentence): 'pos' exactly when the sentence holds 'happy' (learnable)."""
    rng = np.random.default_rng(seed)
    plain = [word for word in WORDS if not word.startswith("##") and word != "happy"]
    rows = []
    for index in range(count):
        words = list(rng.choice(plain, size=int(rng.integers(2, 12))))
        if index % 2:
            words.insert(int(rng.integers(0, len(words))), "happy")
        rows.append(("pos" if index % 2 else "neg", " ".join(words)))
    return rows


def write_tsv(path, rows, header=("label", "sentence")) -> str:
    lines = (["\t".join(header)] if header else []) + ["\t".join(map(str, row)) for row in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)
