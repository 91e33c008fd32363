"""The GLUE table as the papers print it (percent, one decimal; F1/acc, Pearson/Spearman,
MNLI m/mm), with reference rows (`glue_references`) and other runs' rows beside it, and the
per-run figures under it: what `bert-jax glue` prints and writes to WORKDIR/glue.md.
"""

import dataclasses
import json

from bert_jax.errors import UserError
from bert_jax.evaluation import glue_references
from bert_jax.storage import files

HEADINGS = {"cola": "CoLA (MCC)", "sst2": "SST-2", "mrpc": "MRPC (F1/acc)",
            "stsb": "STS-B (P/S)", "qqp": "QQP (F1/acc)", "mnli": "MNLI (m/mm)",
            "qnli": "QNLI", "rte": "RTE", "wnli": "WNLI"}


def recipe_record(recipe) -> dict:
    """The recipe as JSON values (glue_runs.json)."""
    record = dataclasses.asdict(recipe)
    record["start_from_mnli"] = sorted(recipe.start_from_mnli)
    return record


def _percent(values) -> str:
    return "/".join(f"{100 * value:.1f}" for value in values)


def run_row(label: str, table: dict, tasks: list[str]) -> list[str]:
    """A run's cells: each task's metrics in percent, then the average."""
    cells = [_percent(table[task].values()) if task in table else "" for task in tasks]
    average = table.get("average")
    return [label, *cells, "" if average is None else f"{100 * average:.1f}"]


def reference_row(name: str, tasks: list[str]) -> list[str]:
    reference = glue_references.reference(name)
    figures = dict(zip(glue_references.COLUMNS, reference.scores))
    cells = ["/".join(f"{value:g}" for value in figures[task]) if task in figures else ""
             for task in tasks]
    return [f"{reference.label} (published)", *cells,
            "" if reference.average is None else f"{reference.average:g}"]


def _markdown(rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(row) + " |" for row in rows]
    lines.insert(1, "|" + "---|" * len(rows[0]))
    return "\n".join(lines)


def read_run(workdir: str, flag: str = "--compare-run") -> dict:
    """Another suite's glue.json (`--compare-run`, `convert --glue-run`)."""
    path = files.join(workdir, "glue.json")
    if not files.exists(path):
        raise UserError(f"{flag} {workdir}: no glue.json there (run bert-jax glue "
                        "with that --workdir first)")
    return json.loads(files.read_text(path))


def summary_table(label: str, table: dict, tasks: list[str], compare=(),
                  compare_runs=()) -> str:
    """The comparison table: this run, then each other run, then each reference row."""
    headings = ["model", *(HEADINGS[task] for task in tasks), "average"]
    rows = [headings, run_row(label, table, tasks)]
    rows += [run_row(workdir, read_run(workdir), tasks) for workdir in compare_runs]
    rows += [reference_row(name, tasks) for name in compare]
    return _markdown(rows)


def markdown(label: str, table: dict, runs_record: dict, tasks: list[str], compare=(),
             compare_runs=()) -> str:
    """glue.md: the table, how it was aggregated, the references' sources, every run."""
    recipe = runs_record["recipe"]
    parts = [f"# GLUE dev: {label}", "",
             summary_table(label, table, tasks, compare, compare_runs), "",
             f"Recipe `{recipe['name']}` ({recipe['source']}): the {recipe['aggregate']} over "
             f"seeds {', '.join(map(str, recipe['seeds']))} of each metric, at the learning "
             "rate whose aggregate is best; a task's score is the mean of its metrics, the "
             "average the mean of the task scores"
             + (" (WNLI left out: the training set's majority label)." if "wnli" in tasks
                else ".")]
    for name in compare:
        reference = glue_references.reference(name)
        parts.append(f"- {reference.label}: {reference.source}; aggregation: "
                     f"{reference.aggregation}.")
    parts += ["", "## Every run", "", _runs_table(runs_record, tasks)]
    return "\n".join(parts) + "\n"


def _runs_table(runs_record: dict, tasks: list[str]) -> str:
    rows = [["task", "learning rate", "seed", "metrics (percent)", "started from"]]
    for task in tasks:
        details = runs_record["tasks"][task]
        for run in details["runs"]:
            kept = " (kept)" if run["learning_rate"] == details.get("learning_rate") else ""
            metrics = ", ".join(f"{name} {100 * value:.2f}"
                                for name, value in run["metrics"].items())
            rate = "" if run["learning_rate"] is None else f"{run['learning_rate']:g}{kept}"
            rows.append([task, rate, "" if run["seed"] is None else str(run["seed"]), metrics,
                         str(run["started_from"])])
    return _markdown(rows)

