"""The binary sentence-pair section of bench/finetune.py: entailment against not_entailment,
from files saved as Excel saves a TSV, in bert-jax (`finetune classify`, columns by index)
and transformers' BertForSequenceClassification.

Data: SNLI dev (`../shared/data/tasks/nli/snli_dev.jsonl`, 9,842 pairs), shuffled with the
seed; the first --train-examples pairs train, the next --dev-examples are the dev set
(disjoint). Labels: `entailment`, and `not_entailment` for neutral and contradiction. Both
files are written as Excel's "Text (Tab delimited)" with UTF-8 writes them: a byte-order
mark, a header row (`Gold label`, `Premise`, `Hypothesis`), CRLF line ends, a field quoted
only when it holds a quote, tab or newline. bert-jax reads them with
`--text-columns 1,2 --label-column 0` (the header is detected, the BOM dropped); the peer
reads the same files with Python's csv module (`utf-8-sig`, dialect excel-tab), as pandas
would. Both: the recipe of bench/finetune.py (AdamW, 10% warm-up then linear decay, clip 1,
max 128 tokens). Reported: training wall time, pairs/s, dev accuracy and the F1 of
`entailment` (scikit-learn's f1_score with that pos_label for the peer; bert-jax's `f1`,
whose positive label it names).
"""

import argparse
import csv
import json
import os
import random
import sys
import tempfile

NLI = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "..",
                   "shared", "data", "tasks", "nli")
HEADER = ("Gold label", "Premise", "Hypothesis")


def write_excel_tsv(path: str, rows) -> None:
    """`rows` of (label, premise, hypothesis) as Excel writes a UTF-8 tab-delimited file."""
    with open(path, "w", encoding="utf-8-sig", newline="") as file:
        writer = csv.writer(file, dialect="excel-tab")  # CRLF, minimal quoting
        writer.writerow(HEADER)
        writer.writerows(rows)


def excel_nli_files(directory: str, train_count: int, dev_count: int, seed: int):
    """(train path, dev path) of disjoint binary pairs drawn from SNLI dev."""
    with open(os.path.join(NLI, "snli_dev.jsonl"), encoding="utf-8") as file:
        pairs = [json.loads(line) for line in file if line.strip()]
    random.Random(seed).shuffle(pairs)
    rows = [("entailment" if pair["label"] == "entailment" else "not_entailment",
             pair["premise"], pair["hypothesis"]) for pair in pairs]
    train, dev = os.path.join(directory, "train.tsv"), os.path.join(directory, "dev.tsv")
    write_excel_tsv(train, rows[:train_count])
    write_excel_tsv(dev, rows[train_count:train_count + dev_count])
    return train, dev


def read_excel_tsv(path: str) -> list[tuple[str, str, str]]:
    with open(path, encoding="utf-8-sig", newline="") as file:
        return [tuple(row) for row in csv.reader(file, dialect="excel-tab")][1:]


def bert_jax_pairs(model: str, train: str, dev: str, args, workdir: str) -> dict:
    from bench.finetune_recipe import bert_jax_run
    from bert_jax.tasks.classification import ClassificationTask

    flags = argparse.Namespace(text_columns="1,2", label_column="0", header=None, train=train,
                               delimiter=None, skip_bad_rows=False, labels_as_written=False)
    task = ClassificationTask.from_arguments(flags, None)
    seconds, metrics, _ = bert_jax_run(task, model, train, dev, args, workdir)
    label, why = task.positive_label
    return dict(seconds=seconds, score=metrics["accuracy"], labels=task.label_names,
                detail=f" (F1 of {label!r} {metrics['f1']:.4f}; positive: {why})")


def torch_pairs(model_directory: str, train: str, dev: str, labels, args) -> dict:
    """transformers: BertForSequenceClassification from the same directory, AdamW."""
    import torch
    import transformers
    from sklearn.metrics import f1_score

    from bench.finetune_recipe import torch_train

    torch.manual_seed(args.seed)
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_directory)
    model = transformers.BertForSequenceClassification.from_pretrained(
        model_directory, num_labels=len(labels))
    collator = transformers.DataCollatorWithPadding(tokenizer)
    label_ids = {label: index for index, label in enumerate(labels)}

    def dataset(path):
        rows = read_excel_tsv(path)
        encoded = tokenizer([row[1] for row in rows], [row[2] for row in rows],
                            truncation=True, max_length=128)
        return [dict(input_ids=ids, token_type_ids=types, attention_mask=mask,
                     labels=label_ids[row[0]])
                for ids, types, mask, row in zip(encoded["input_ids"], encoded["token_type_ids"],
                                                 encoded["attention_mask"], rows)]

    train_rows, dev_rows = dataset(train), dataset(dev)
    seconds = torch_train(model, train_rows, collator, args)
    predicted = []
    with torch.no_grad():
        for begin in range(0, len(dev_rows), 64):
            predicted += model(**collator(dev_rows[begin:begin + 64])).logits.argmax(-1).tolist()
    gold = [row["labels"] for row in dev_rows]
    accuracy = sum(p == g for p, g in zip(predicted, gold)) / len(gold)
    f1 = f1_score(gold, predicted, pos_label=label_ids["entailment"])
    return dict(seconds=seconds, score=accuracy,
                detail=f" (F1 of 'entailment' {f1:.4f}; sklearn f1_score pos_label)")


def nli_pair_section(args) -> list[str]:
    from bench.finetune_recipe import comparison_lines, minilm_directory

    model = args.model or minilm_directory()
    dev_examples = args.dev_examples or 1190
    with tempfile.TemporaryDirectory() as directory:
        train, dev = excel_nli_files(directory, args.train_examples, dev_examples,
                                     args.seed)
        ours = bert_jax_pairs(model, train, dev, args, os.path.join(directory, "run"))
        again = None if args.single_bert_jax_run else bert_jax_pairs(
            model, train, dev, args, os.path.join(directory, "again"))
        theirs = torch_pairs(model, train, dev, ours["labels"], args)
        share = sum(row[0] == "entailment" for row in read_excel_tsv(dev)) / dev_examples
    title = (f"SNLI binary pairs (entailment / not_entailment), Excel TSVs with BOM and header: "
             f"{args.train_examples} training pairs (seed {args.seed}) x {args.epochs} epoch(s), "
             f"batch {args.batch_size}, lr {args.learning_rate}, max 128 tokens; dev "
             f"{dev_examples} held-out SNLI dev pairs ({100 * share:.1f}% entailment)")
    return comparison_lines(title, ours, again, theirs, args.train_examples * args.epochs,
                            "accuracy", unit="pairs")


if __name__ == "__main__":
    sys.exit("run through bench/finetune.py --sections nli_pair")
