"""A tiny made-up GLUE download: the nine tasks' files in the exact layout the GLUE download
script writes (`bert-jax examples DIR` writes one into DIR/glue; the tests read it).

Each task keeps its download's own shape: CoLA without a header (source, label, the original
label, sentence), SST-2's `sentence label`, MRPC's byte-order mark and `Quality #1 ID #2 ID
#1 String #2 String`, STS-B's ten columns ending in `score`, QQP's `is_duplicate`, MNLI's
parses and `gold_label` with dev_matched.tsv and dev_mismatched.tsv, QNLI's `question
sentence`, RTE's and WNLI's `sentence1 sentence2`. The texts are the film-review sentences
of example_files.py (made up for this project): a pair's label is whether its two verdicts
agree (MNLI: entailment when they agree and rate alike, neutral when they agree only,
contradiction otherwise), STS-B's score how close their ratings are, so every task is
learnable and none is copied from anywhere.
"""

import codecs
import random

from bert_jax.storage import files
from input_pipeline.example_files import sentiment_rows

DESCRIPTION = ("a made-up GLUE download: CoLA/, SST-2/, MRPC/, STS-B/, QQP/, MNLI/, QNLI/, "
               "RTE/, WNLI/ in its exact layout, 64 training and 32 dev rows a task "
               "(bert-jax glue)")

# task directory -> (header or None, the dev files)
LAYOUT = {
    "CoLA": (None, ("dev.tsv",)),
    "SST-2": ("sentence\tlabel", ("dev.tsv",)),
    "MRPC": ("Quality\t#1 ID\t#2 ID\t#1 String\t#2 String", ("dev.tsv",)),
    "STS-B": ("index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\t"
              "sentence2\tscore", ("dev.tsv",)),
    "QQP": ("id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate", ("dev.tsv",)),
    "MNLI": ("index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\t"
             "sentence1_parse\tsentence2_parse\tsentence1\tsentence2\t{labels}\tgold_label",
             ("dev_matched.tsv", "dev_mismatched.tsv")),
    "QNLI": ("index\tquestion\tsentence\tlabel", ("dev.tsv",)),
    "RTE": ("index\tsentence1\tsentence2\tlabel", ("dev.tsv",)),
    "WNLI": ("index\tsentence1\tsentence2\tlabel", ("dev.tsv",)),
}


def similarity_score(first, second) -> float:
    """STS-B's 0..5 score of two sentiment rows: how close their ratings (1..5) are."""
    return 5.0 - 1.25 * abs(first[2] - second[2])


def pair_label(directory: str, first, second) -> str:
    (_, label_a, stars_a), (_, label_b, stars_b) = first, second
    agree = label_a == label_b
    if directory == "MNLI":
        return ("entailment" if stars_a == stars_b else "neutral") if agree else "contradiction"
    if directory in ("QNLI", "RTE"):
        return "entailment" if agree else "not_entailment"
    return "1" if agree else "0"


def _cells(directory: str, index: int, first, second, dev: bool) -> list:
    """One row of `directory`'s file: the single-sentence tasks read `first` only."""
    text_a, text_b = first[0], second[0]
    if directory == "CoLA":
        acceptable = first[1] == "pos"
        return ["gj04", int(acceptable), "" if acceptable else "*", text_a]
    if directory == "SST-2":
        return [text_a, int(first[1] == "pos")]
    label = pair_label(directory, first, second)
    if directory == "MRPC":
        return [label, 1000 + 2 * index, 1001 + 2 * index, text_a, text_b]
    if directory == "STS-B":
        score = similarity_score(first, second)
        return [index, "main-forums", "made-up", "2026", index, "none", "none", text_a, text_b,
                f"{score:.3f}"]
    if directory == "QQP":
        return [index, 2 * index, 2 * index + 1, text_a.replace(".", "?"),
                text_b.replace(".", "?"), label]
    if directory == "MNLI":
        parses = [f"( {text_a} )", f"( {text_b} )", f"(ROOT {text_a})", f"(ROOT {text_b})"]
        return [index, index, f"{index}e", "fiction", *parses, text_a, text_b,
                *[label] * (5 if dev else 1), label]
    if directory == "QNLI":
        return [index, f"Was it true that {text_a[:-1].lower()}?", text_b, label]
    return [index, text_a, text_b, label]


def _file_text(directory: str, rows: list, dev: bool) -> str:
    header = LAYOUT[directory][0]
    if header and "{labels}" in header:  # MNLI: label1 in train, label1..label5 in dev
        header = header.format(labels="\t".join(f"label{n}" for n in range(1, 6 if dev else 2)))
    cells = [_cells(directory, index, first, second, dev)
             for index, (first, second) in enumerate(zip(rows[0::2], rows[1::2]))]
    text = "".join("\t".join(map(str, row)) + "\n" for row in cells)
    text = f"{header}\n{text}" if header else text
    return codecs.BOM_UTF8.decode("utf-8") + text if directory == "MRPC" else text


def write_glue_layout(directory: str, seed: int = 0, train_rows: int = 64,
                      dev_rows: int = 32) -> list[str]:
    """Writes every task's train.tsv and dev files under `directory`; returns their paths."""
    written = []
    for number, (task, (_, dev_files)) in enumerate(LAYOUT.items()):
        rng = random.Random(seed * 100 + number)
        splits = {"train.tsv": sentiment_rows(2 * train_rows, rng, False)}
        splits.update({name: sentiment_rows(2 * dev_rows, rng, True) for name in dev_files})
        files.makedirs(files.join(directory, task))
        for name, rows in splits.items():
            path = files.join(directory, task, name)
            files.write_text(path, _file_text(task, rows, dev=name != "train.tsv"))
            written.append(path)
    return written
