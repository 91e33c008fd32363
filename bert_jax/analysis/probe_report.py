"""The probe's report: one JSON document with everything, and a Markdown summary of it."""

import numpy as np

from bert_jax.analysis.probe import DIRECTIONS, OFFSETS, ProbeResult
from bert_jax.analysis.statistics import NAMES, TITLES

PROCEDURE = (
    "Clark et al. (2019), section 4: the model reads each sentence's syntactic words (the "
    "treebank's, e.g. `do n't`), each split into word pieces, as `[CLS] pieces [SEP]`; "
    "each head predicts, for every word, the word it attends "
    "to most (dependent->head) or the word attending to it most (head->dependent); "
    "word-level attention sums the attention *to* a word's pieces and averages the rows "
    "*from* them; [CLS]/[SEP] are dropped without renormalising; a word's attention to "
    "itself is ignored; a nmod:poss word followed by 's or ' is scored by the clitic's "
    "prediction; baselines predict the word at a fixed offset (-3..+3, the root when "
    "falling off the start, the last word when falling off the end). Accuracy = correct / "
    "words with that relation. `root` gets no row (no head can predict the root) but its "
    "words count in `all`. Layers and heads are numbered from 1.")


def report_dict(result: ProbeResult, statistics: dict, settings: dict,
                min_count: int = 100) -> dict:
    """Everything in JSON-ready form: rows, the full accuracy arrays and the statistics."""
    rows = result.rows(min_count)
    return dict(
        procedure=PROCEDURE, settings=settings, directions=list(DIRECTIONS),
        offsets=list(OFFSETS), min_count=min_count, rows=rows,
        relations_beating_offset_by_10_points=sum(
            1 for row in rows if row["relation"] != "all" and row["margin"] >= 0.10),
        relations=[dict(relation=relation, count=int(count),
                        head_accuracy=np.round(result.head_accuracy[index], 5).tolist(),
                        offset_accuracy=np.round(result.offset_accuracy[index], 5).tolist())
                   for index, (relation, count) in enumerate(zip(result.relations,
                                                                  result.counts))],
        statistics={name: (np.round(value, 5).tolist() if isinstance(value, np.ndarray)
                           else float(value)) for name, value in statistics.items()})


def _percent(value: float) -> str:
    return f"{100 * value:.1f}"


def _statistics_table(statistics: dict) -> list[str]:
    lines = ["| head | " + " | ".join(TITLES[name] for name in NAMES) + " |",
             "|---|" + "---:|" * len(NAMES)]
    num_layers, num_heads = statistics["entropy"].shape
    for layer in range(num_layers):
        for head in range(num_heads):
            values = [f"{statistics[name][layer, head]:.2f}" if name == "entropy"
                      else _percent(statistics[name][layer, head]) for name in NAMES]
            lines.append(f"| {layer + 1}-{head + 1} | " + " | ".join(values) + " |")
    return lines


def report_markdown(report: dict, statistics: dict) -> str:
    """The Markdown summary: settings, the per-relation table, then the head statistics."""
    settings = report["settings"]
    lines = ["# Attention probe", ""]
    lines += [f"- {key}: {value}" for key, value in settings.items()]
    lines += ["", PROCEDURE, "",
              f"Relations with at least {report['min_count']} words (UD names), accuracy in %:",
              "", "| relation | count | best head | direction | accuracy | best offset | "
              "accuracy | head - offset |", "|---|---:|---|---|---:|---:|---:|---:|"]
    for row in report["rows"]:
        head, offset = row["best_head"], row["best_offset"]
        lines.append(f"| {row['relation']} | {row['count']} | {head['layer']}-{head['head']} | "
                     f"{head['direction']} | {_percent(head['accuracy'])} | "
                     f"{offset['offset']:+d} | {_percent(offset['accuracy'])} | "
                     f"{100 * row['margin']:+.1f} |")
    beating = report["relations_beating_offset_by_10_points"]
    total = sum(1 for row in report["rows"] if row["relation"] != "all")
    lines += ["", f"{beating} of {total} relations have a head that beats the relation's best "
              "offset baseline by 10 points or more.", "",
              "## Head statistics (Clark et al. 2019, section 3)", "",
              "Mean over every attending token (word pieces, [CLS] and [SEP] included); "
              f"uniform attention would have an entropy of {statistics['uniform_entropy']:.2f} "
              "nats. Shares in %.", ""]
    lines += _statistics_table(statistics)
    return "\n".join(lines) + "\n"
