"""`bert-jax glue` beside transformers' own fine-tuning of the same model, same recipe, same seeds.

The task's data from ../shared/data (STS-B: sts-train.tsv, sts-dev.tsv; SST-2: train.tsv,
dev.tsv) is laid out as the GLUE download lays it out (STS-B/train.tsv with its ten columns,
SST-2/train.tsv as `sentence<TAB>label`) in a temporary directory; `bert-jax glue` runs on it
as a user runs it (a subprocess, every learning rate and seed in one suite), and transformers
(`AutoModelForSequenceClassification`: STS-B with one output, its regression head and MSE
loss; SST-2 with two classes and cross-entropy; `DataCollatorWithPadding`, torch AdamW with
the recipe of bench/finetune_recipe.py) trains on the very rows bert-jax read
(input_pipeline/tasks/glue.py) with each learning rate and seed, truncating pairs
longest-first at the same length. Both are scored by the same scikit-learn/scipy metrics
(bert_jax/evaluation/glue_metrics.py) and aggregated as the recipe says (the median over
seeds; the task's figure is the learning rate whose median is best, as the BERT paper
selected it). Printed: each run's figures, each rate's median, the kept rate, a side.

Usage: python bench/glue_minilm.py [--task stsb|sst2] [--learning-rates 2e-5,3e-5,5e-5]
       [--seeds 0,1,2] [--epochs 3] [--max-seq-len 128] [--batch-size 32] [--train-pairs N]
       [--reference-processes N] [--workdir W]
"""

import argparse
import concurrent.futures
import json
import multiprocessing
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
from bench.host import announce_host, usable_cores  # noqa: E402
from bert_jax.storage import files  # noqa: E402

TASKS_DATA = os.path.join(REPOSITORY, "..", "shared", "data", "tasks")
STSB_HEADER = ("index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\t"
               "sentence2\tscore")
DEV_SIZE = {"stsb": "1,500 pairs", "sst2": "872 sentences"}


def _read_tsv(path: str) -> list[list[str]]:
    with open(path, encoding="utf-8") as file:
        return [line.split("\t") for line in file.read().splitlines() if line.strip()]


def lay_out(directory: str, task: str, train_pairs: int = 0) -> str:
    """The task's ../shared files as the GLUE download's <TASK>/train.tsv and dev.tsv (the
    first `train_pairs` training rows if not 0, for a quick try); returns the GLUE directory.

    STS-B's SentEval files are (genre, file, year, id, score, sentence1, sentence2[, ...]);
    SST-2's are (label, sentence) under a header, as the GLUE download's with the columns
    swapped."""
    glue = os.path.join(directory, "glue")
    folder = {"stsb": "STS-B", "sst2": "SST-2"}[task]
    os.makedirs(os.path.join(glue, folder), exist_ok=True)  # a continued bench: the same files
    sources = {"stsb": ("sts-train.tsv", "sts-dev.tsv"), "sst2": ("train.tsv", "dev.tsv")}[task]
    for source, name in zip(sources, ("train.tsv", "dev.tsv")):
        rows = _read_tsv(os.path.join(TASKS_DATA, task, source))
        if task == "sst2":
            rows = rows[1:]  # its header
        if train_pairs and name == "train.tsv":
            rows = rows[:train_pairs]
        with open(os.path.join(glue, folder, name), "w", encoding="utf-8") as file:
            if task == "sst2":
                file.write("sentence\tlabel\n")
                file.writelines(f"{sentence}\t{label}\n" for label, sentence in rows)
                continue
            file.write(STSB_HEADER + "\n")
            for index, (genre, filename, year, number, score, first, second, *_) in enumerate(
                    rows):
                file.write("\t".join([str(index), genre, filename, year, number, "none",
                                      "none", first, second, score]) + "\n")
    return glue


def bert_jax_glue(model: str, glue: str, workdir: str, args) -> tuple[list, float]:
    """Every run of `bert-jax glue --tasks TASK` (learning rate, seed, metrics), and its wall
    time (a rerun on the same --workdir continues where the suite stopped)."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "bert_jax.cli", "glue", "--model", model, "--data",
                    glue, "--workdir", workdir, "--tasks", args.task, "--recipe", "bert",
                    "--learning-rates", args.learning_rates, "--seeds", args.seeds,
                    "--epochs", str(args.epochs), "--batch-size", str(args.batch_size),
                    "--max-seq-len", str(args.max_seq_len), "--no-progress"],
                   check=True, cwd=REPOSITORY, env=dict(os.environ, PYTHONPATH=REPOSITORY))
    seconds = time.perf_counter() - start
    runs = json.load(open(os.path.join(workdir, "glue_runs.json")))["tasks"][args.task]["runs"]
    return [dict(learning_rate=run["learning_rate"], seed=run["seed"], metrics=run["metrics"])
            for run in runs], seconds


def transformers_run(model: str, glue: str, learning_rate: float, seed: int, args,
                     checkpoint: str | None = None) -> dict:
    """transformers fine-tuning `model` at one (learning rate, seed), scored on dev; the
    training's state kept in `checkpoint` as it goes, and continued from it if present."""
    import torch
    import transformers

    from bert_jax.evaluation.glue_metrics import dev_metrics
    from input_pipeline.tasks import glue as glue_data

    torch.manual_seed(seed)
    task = glue_data.TASKS[args.task]
    tokenizer = transformers.AutoTokenizer.from_pretrained(model)
    network = transformers.AutoModelForSequenceClassification.from_pretrained(
        model, num_labels=len(task.class_names) or 1)
    collator = transformers.DataCollatorWithPadding(tokenizer)

    def label(row):
        return float(row.label) if task.regression else task.class_names.index(row.label)

    def dataset(split):
        rows = glue_data.read_split(glue, task, split)
        texts = [[row.texts[column] for row in rows] for column in range(len(rows[0].texts))]
        encoded = tokenizer(*texts, truncation="longest_first", max_length=args.max_seq_len)
        return [dict(input_ids=ids, token_type_ids=types, attention_mask=mask,
                     labels=label(row))
                for ids, types, mask, row in zip(encoded["input_ids"], encoded["token_type_ids"],
                                                 encoded["attention_mask"], rows)]

    train, dev = dataset("train"), dataset(0)
    seconds = torch_train(network, train, collator, argparse.Namespace(
        batch_size=args.batch_size, seed=seed, epochs=args.epochs,
        learning_rate=learning_rate), checkpoint=checkpoint)
    predicted = []
    with torch.no_grad():
        for begin in range(0, len(dev), 64):
            logits = network(**collator(dev[begin:begin + 64])).logits
            predicted += (logits[:, 0].tolist() if task.regression else
                          [task.class_names[index] for index in logits.argmax(-1).tolist()])
    gold = [row["labels"] if task.regression else task.class_names[row["labels"]]
            for row in dev]
    return dict(learning_rate=learning_rate, seed=seed,
                metrics=dev_metrics(args.task, [(predicted, gold)]), seconds=seconds)


def run_path(workdir: str, task: str, learning_rate: float, seed: int) -> str:
    """Where one transformers run's figures are kept (its checkpoint beside it as .pt)."""
    return os.path.join(workdir, f"transformers-{task}-lr{learning_rate:g}-seed{seed}.json")


def keep_run(model: str, glue: str, workdir: str, learning_rate: float, seed: int,
             args) -> None:
    """One transformers run, trained (or continued from its checkpoint) and kept as JSON."""
    path = run_path(workdir, args.task, learning_rate, seed)
    checkpoint = path.removesuffix(".json") + ".checkpoint.pt"
    result = transformers_run(model, glue, learning_rate, seed, args, checkpoint)
    with files.atomic_write(path) as file:
        json.dump(result, file)
    if os.path.exists(checkpoint):  # none if it trained in under 5 minutes
        os.remove(checkpoint)  # the run is kept; its training state is not


def _torch_threads(count: int) -> None:
    import torch

    torch.set_num_threads(count)


def transformers_runs(model: str, glue: str, workdir: str, args) -> list:
    """Every (learning rate, seed) of the grid in transformers, each kept in `workdir` as it
    finishes so that a rerun repeats none, and a run stopped midway continues from its last
    checkpoint (saved every 5 minutes; bench/finetune_recipe.torch_train).

    With `args.reference_processes` N > 1 the unfinished runs share N processes, each on
    1/N of the cores' torch threads: MiniLM's batches of 32 short sentences use two threads
    poorly (2 cores, AMX Xeon: one 2-thread process 1.69-1.84 steps/s, two 1-thread
    processes side by side 2.12 in all)."""
    os.makedirs(workdir, exist_ok=True)
    grid = [(learning_rate, seed) for learning_rate in _numbers(args.learning_rates, float)
            for seed in _numbers(args.seeds, int)]
    unfinished = [(learning_rate, seed) for learning_rate, seed in grid
                  if not os.path.exists(run_path(workdir, args.task, learning_rate, seed))]
    processes = min(args.reference_processes, len(unfinished))
    if processes > 1:
        threads = max(1, usable_cores() // processes)
        with concurrent.futures.ProcessPoolExecutor(
                processes, mp_context=multiprocessing.get_context("spawn"),
                initializer=_torch_threads, initargs=(threads,)) as pool:
            for future in [pool.submit(keep_run, model, glue, workdir, learning_rate, seed, args)
                           for learning_rate, seed in unfinished]:
                future.result()  # a run's failure is raised here
    else:
        for learning_rate, seed in unfinished:
            keep_run(model, glue, workdir, learning_rate, seed, args)
    return [json.load(open(run_path(workdir, args.task, learning_rate, seed)))
            for learning_rate, seed in grid]


def _numbers(text: str, kind) -> list:
    return [kind(value) for value in text.split(",")]


def table(name: str, runs: list, args) -> list[str]:
    """One side's lines: each learning rate's seeds and median, then the kept rate's figure
    (chosen as `bert-jax glue` chooses it)."""
    from bert_jax.evaluation.glue import kept_learning_rate
    from bert_jax.evaluation.glue_metrics import aggregate
    from bert_jax.evaluation.glue_recipes import recipe

    bert = recipe("bert")  # the median over seeds
    lines, medians = [f"  {name}"], {}
    for learning_rate in _numbers(args.learning_rates, float):
        rate_runs = [run for run in runs if run["learning_rate"] == learning_rate]
        medians[learning_rate] = aggregate([run["metrics"] for run in rate_runs], bert.aggregate)
        cells = "   ".join(f"seed {run['seed']}: {_percent(run['metrics'])}"
                           for run in rate_runs)
        lines.append(f"    lr {learning_rate:<6g} {cells}   median "
                     f"{_percent(medians[learning_rate])}")
    kept = kept_learning_rate(bert, runs)
    lines.append(f"    kept lr {kept:g}: {_percent(medians[kept])}")
    return lines


def _percent(metrics: dict) -> str:
    return " / ".join(f"{100 * value:.2f}" for value in metrics.values())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", choices=("stsb", "sst2"), default="stsb")
    parser.add_argument("--learning-rates", default="2e-5,3e-5,5e-5")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--max-seq-len", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--train-pairs", type=int, default=0,
                        help="train on the first N rows only, for a quick try (default all)")
    parser.add_argument("--reference-processes", type=int, default=1,
                        help="run transformers' unfinished runs in N processes side by side, "
                             "each with 1/N of the cores' torch threads (default 1); each "
                             "run's seconds are then its wall time beside the others")
    parser.add_argument("--workdir", default=None,
                        help="keep every run here, and continue a stopped bench from it "
                             "(default: a temporary directory)")
    args = parser.parse_args()
    announce_host("glue")  # the CPU, its ISA, threads and load: figures carry their host

    model = minilm_directory()
    with tempfile.TemporaryDirectory() as directory:
        workdir = args.workdir or directory
        # In --workdir when given: `bert-jax glue` continues a suite only on the same data path.
        glue = lay_out(workdir, args.task, args.train_pairs)
        ours, our_seconds = bert_jax_glue(model, glue, os.path.join(workdir, "bert-jax"), args)
        start = time.perf_counter()
        theirs = transformers_runs(model, glue, os.path.join(workdir, "transformers"), args)
        their_seconds = time.perf_counter() - start
    metric_names = " / ".join(ours[0]["metrics"])
    print(f"{args.task} dev ({DEV_SIZE[args.task]}), all-MiniLM-L6-v2, {args.epochs} epoch(s)"
          f"{f' of {args.train_pairs:,} rows' if args.train_pairs else ''}, batch "
          f"{args.batch_size}, {args.max_seq_len} tokens; {metric_names} (percent)")
    for line in table("bert-jax glue", ours, args) + table("transformers", theirs, args):
        print(line)
    print(f"  wall time: bert-jax glue {our_seconds:.0f} s (the whole command: data, compiles, "
          f"{len(ours)} runs, evaluation); transformers {their_seconds:.0f} s (each "
          "run's training, this time or when it ran: " + ", ".join(
              f"{run['seconds']:.0f}" for run in theirs) + " s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
