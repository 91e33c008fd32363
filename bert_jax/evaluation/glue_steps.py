"""The GLUE suite over a pre-training run's saved checkpoints: a table per step and, per task,
a PNG of its score against the step and the tokens seen.

`run_over_steps(...)` runs `glue.run_suite` on RUN/checkpoints/STEP for every chosen step
(`glue --every-checkpoint N`: every Nth finished one and the last, `chosen_steps`; a
pre-training config's checkpoint_suite: the steps kept for it, `suite_steps`) into
WORKDIR/steps/STEP/ (each a suite directory of its own, resumed as any), then writes
WORKDIR/glue_steps.json ({step: {"tokens_seen", task: metrics, ..., "average"}}),
WORKDIR/glue_steps.md (one row per step) and WORKDIR/glue_TASK.png. Tokens
seen are the run's batch size x sequence length x step (run_config.json): the token
positions trained on, padding included, which is what a packed run's count is too.
"""

import io
import json

from matplotlib.figure import Figure

from bert_jax.errors import UserError
from bert_jax.evaluation import glue, glue_table
from bert_jax.interop import source_kinds
from bert_jax.run_config import checkpoint_suite
from bert_jax.storage import files, json_values

STEPS_JSON, STEPS_MD = "glue_steps.json", "glue_steps.md"
SUITE_DIRECTORY = "glue"  # RUN/glue/: the suite a pre-training config names


def chosen_steps(run: str, every: int) -> list[int]:
    """Every `every`th finished checkpoint of `run`, counting from the first, and the last."""
    if not files.exists(files.join(run, "model_config.json")) or not files.isdir(
            files.join(run, source_kinds.CHECKPOINTS)):
        raise UserError(f"--model {run}: --every-checkpoint needs a pre-training run directory "
                        "(model_config.json and checkpoints/)")
    steps = source_kinds.finished_steps(run)
    if not steps:
        raise UserError(f"{run}/checkpoints: no finished checkpoint yet")
    return sorted(set(steps[::every]) | {steps[-1]})


def tokens_per_step(run: str) -> int | None:
    path = files.join(run, "run_config.json")
    if not files.exists(path):
        return None
    config = json.loads(files.read_text(path))
    return int(config["batch_size"]) * int(config["data"]["seq_len"])


def figure(task: str, rows: dict, per_step: int | None) -> Figure:
    """`task`'s metrics (percent) against the step; tokens seen (`per_step` a step) on a
    second axis."""
    steps = sorted(rows)
    plot = Figure(figsize=(6, 3.6))
    axis = plot.add_subplot()
    for metric in rows[steps[0]][task]:
        axis.plot(steps, [100 * rows[step][task][metric] for step in steps], marker="o",
                  label=metric)
    axis.set_xlabel("pre-training step")
    axis.set_ylabel("dev score (percent)")
    axis.set_title(f"GLUE {glue_table.HEADINGS[task]} by checkpoint")
    axis.legend(loc="best")
    if per_step:
        top = axis.secondary_xaxis("top", functions=(lambda step: step * per_step,
                                                     lambda count: count / per_step))
        top.set_xlabel("tokens seen")
    axis.grid(alpha=0.3)
    return plot


def markdown(rows: dict, tasks: list[str]) -> str:
    headings = ["step", "tokens seen", *(glue_table.HEADINGS[task] for task in tasks),
                "average"]
    lines = ["| " + " | ".join(headings) + " |", "|" + "---|" * len(headings)]
    for step in sorted(rows):
        cells = glue_table.run_row(str(step), rows[step], tasks)
        tokens = rows[step].get("tokens_seen")
        cells.insert(1, "" if tokens is None else f"{tokens:,}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def suite_steps(run: str, period: int) -> list[int]:
    """The finished checkpoints a pre-training config's suite scores: every multiple of
    `period` (kept for it from checkpoint.keep's deletion) and the last."""
    steps = source_kinds.finished_steps(run)
    return [step for step in steps if step % period == 0 or step == steps[-1]]


def run_over_steps(run: str, data: str, workdir: str, tasks: list[str], recipe,
                   steps: list[int], log=print, **suite) -> dict:
    """The suite at each of `steps` (checkpoints of `run`); `suite` goes to `glue.run_suite`."""
    per_step = tokens_per_step(run)
    rows = {}
    for step in steps:
        log(f"GLUE at step {step} of {run}")
        table = glue.run_suite(files.join(run, source_kinds.CHECKPOINTS, str(step)), data,
                               files.join(workdir, "steps", str(step)), tasks, recipe,
                               log=log, **suite)
        rows[step] = dict(tokens_seen=None if per_step is None else per_step * step, **table)
    with files.atomic_write(files.join(workdir, STEPS_JSON)) as file:
        json_values.dump({str(step): row for step, row in rows.items()}, file, indent=2)
    files.write_text(files.join(workdir, STEPS_MD), markdown(rows, tasks))
    for task in tasks:
        image = io.BytesIO()  # then written whole, local or gs://
        figure(task, rows, per_step).savefig(image, format="png", dpi=110, bbox_inches="tight")
        with files.atomic_write(files.join(workdir, f"glue_{task}.png"), "wb") as file:
            file.write(image.getvalue())
    return rows


def run_config_suite(run_config, run: str, show_progress: bool = True, log=print) -> dict:
    """The suite `run_config` names (checkpoint_suite.*) over the checkpoints of `run` kept
    for it, into RUN/glue/ as `glue --every-checkpoint` writes a suite; {} without one."""
    tasks = checkpoint_suite.tasks(run_config)
    if not tasks:
        return {}
    steps = suite_steps(run, checkpoint_suite.keep_period(run_config))
    return run_over_steps(run, run_config.checkpoint_suite.data,
                          files.join(run, SUITE_DIRECTORY), tasks,
                          checkpoint_suite.recipe(run_config), steps,
                          show_progress=show_progress, log=log)
