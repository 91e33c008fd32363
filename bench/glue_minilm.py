"""`bert-jax glue` beside transformers' own fine-tuning of the same model, same recipe, same seeds.

STS-B from ../shared/data (sts-train.tsv, sts-dev.tsv) is laid out as the GLUE download lays
it out (STS-B/train.tsv, STS-B/dev.tsv with its ten columns) in a temporary directory;
`bert-jax glue` runs on it as a user runs it (a subprocess), and transformers
(`AutoModelForSequenceClassification` with one output: its regression head and MSE loss,
`DataCollatorWithPadding`, torch AdamW with the recipe of bench/finetune_recipe.py) trains
on the very rows bert-jax read (input_pipeline/tasks/glue.py) with each seed, truncating
pairs longest-first at the same length. Both are scored by the same scipy Pearson and
Spearman (bert_jax/evaluation/glue_metrics.py). Printed: each seed's figures and their
median, a side.

Usage: python bench/glue_minilm.py [--learning-rate 5e-5] [--seeds 0,1] [--epochs 1]
       [--max-seq-len 64] [--batch-size 32]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPOSITORY)

from bench.finetune_recipe import minilm_directory, torch_train  # noqa: E402
from bench.host import announce_host  # noqa: E402

STSB = os.path.join(REPOSITORY, "..", "shared", "data", "tasks", "stsb")
HEADER = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore"


def lay_out(directory: str, train_pairs: int = 0) -> str:
    """STS-B's SentEval files (genre, file, year, id, score, sentence1, sentence2[, ...]) as
    the GLUE download's STS-B/train.tsv and dev.tsv (the first `train_pairs` training pairs
    if not 0, for a quick try); returns the GLUE directory."""
    glue = os.path.join(directory, "glue")
    os.makedirs(os.path.join(glue, "STS-B"))
    for source, name in (("sts-train.tsv", "train.tsv"), ("sts-dev.tsv", "dev.tsv")):
        with open(os.path.join(STSB, source), encoding="utf-8") as file:
            rows = [line.split("\t") for line in file.read().splitlines() if line.strip()]
        if train_pairs and name == "train.tsv":
            rows = rows[:train_pairs]
        with open(os.path.join(glue, "STS-B", name), "w", encoding="utf-8") as file:
            file.write(HEADER + "\n")
            for index, (genre, filename, year, number, score, first, second, *_) in enumerate(
                    rows):
                file.write("\t".join([str(index), genre, filename, year, number, "none",
                                      "none", first, second, score]) + "\n")
    return glue


def bert_jax_glue(model: str, glue: str, workdir: str, args) -> tuple[dict, float]:
    """{seed: metrics} of `bert-jax glue --tasks stsb`, and its wall time."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "bert_jax.cli", "glue", "--model", model, "--data",
                    glue, "--workdir", workdir, "--tasks", "stsb", "--learning-rates",
                    str(args.learning_rate), "--seeds", args.seeds, "--epochs",
                    str(args.epochs), "--batch-size", str(args.batch_size), "--max-seq-len",
                    str(args.max_seq_len), "--no-progress"], check=True, cwd=REPOSITORY,
                   env=dict(os.environ, PYTHONPATH=REPOSITORY))
    seconds = time.perf_counter() - start
    runs = json.load(open(os.path.join(workdir, "glue_runs.json")))["tasks"]["stsb"]["runs"]
    return {run["seed"]: run["metrics"] for run in runs}, seconds


def transformers_run(model: str, glue: str, seed: int, args) -> dict:
    import torch
    import transformers

    from bert_jax.evaluation.glue_metrics import regression_metrics
    from input_pipeline.tasks import glue as glue_data

    torch.manual_seed(seed)
    task = glue_data.TASKS["stsb"]
    tokenizer = transformers.AutoTokenizer.from_pretrained(model)
    network = transformers.AutoModelForSequenceClassification.from_pretrained(model,
                                                                              num_labels=1)
    collator = transformers.DataCollatorWithPadding(tokenizer)

    def dataset(split):
        rows = glue_data.read_split(glue, task, split)
        encoded = tokenizer([row.texts[0] for row in rows], [row.texts[1] for row in rows],
                            truncation="longest_first", max_length=args.max_seq_len)
        return [dict(input_ids=ids, token_type_ids=types, attention_mask=mask,
                     labels=float(row.label))
                for ids, types, mask, row in zip(encoded["input_ids"], encoded["token_type_ids"],
                                                 encoded["attention_mask"], rows)]

    train, dev = dataset("train"), dataset(0)
    seconds = torch_train(network, train, collator, argparse.Namespace(
        batch_size=args.batch_size, seed=seed, epochs=args.epochs,
        learning_rate=args.learning_rate))
    scores = []
    with torch.no_grad():
        for begin in range(0, len(dev), 64):
            scores += network(**collator(dev[begin:begin + 64])).logits[:, 0].tolist()
    metrics = regression_metrics(scores, [row["labels"] for row in dev])
    return dict(metrics, seconds=seconds)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--learning-rate", type=float, default=5e-5)
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--max-seq-len", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--train-pairs", type=int, default=0,
                        help="train on the first N pairs only, for a quick try (default all)")
    args = parser.parse_args()
    announce_host()  # the CPU, its ISA, threads and load: figures carry their host
    import numpy as np

    model = minilm_directory()
    seeds = [int(seed) for seed in args.seeds.split(",")]
    with tempfile.TemporaryDirectory() as directory:
        glue = lay_out(directory, args.train_pairs)
        ours, our_seconds = bert_jax_glue(model, glue, os.path.join(directory, "w"), args)
        theirs = {seed: transformers_run(model, glue, seed, args) for seed in seeds}
    pairs = args.train_pairs or 5749
    print(f"STS-B dev (1,500 pairs), all-MiniLM-L6-v2, {args.epochs} epoch(s) of {pairs:,} pairs, "
          f"lr {args.learning_rate:g}, batch {args.batch_size}, {args.max_seq_len} tokens; "
          "Pearson / Spearman (percent)")
    for name, results in (("bert-jax glue", ours), ("transformers", theirs)):
        cells = [f"seed {seed}: {100 * results[seed]['pearson']:.2f} / "
                 f"{100 * results[seed]['spearman']:.2f}" for seed in seeds]
        median = [100 * float(np.median([results[seed][metric] for seed in seeds]))
                  for metric in ("pearson", "spearman")]
        print(f"  {name:14} {'   '.join(cells)}   median {median[0]:.2f} / {median[1]:.2f}")
    print(f"  wall time: bert-jax glue {our_seconds:.0f} s (the whole command: data, compiles, "
          f"{len(seeds)} runs, evaluation); transformers training "
          + ", ".join(f"{theirs[seed]['seconds']:.0f} s" for seed in seeds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
