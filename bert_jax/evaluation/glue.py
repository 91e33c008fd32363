"""The GLUE suite: every (task, learning rate, seed) fine-tuning run of a recipe, and the table.

`run_suite(...)` reads each task's data once (input_pipeline/tasks/glue.py, from the GLUE
download, tfds or Hugging Face files) into WORKDIR/data/TASK/*.jsonl, then fine-tunes with
`training.finetune.finetune` in WORKDIR/runs/TASK/lr{LR}-seed{SEED}/ (a run directory like
any `finetune`'s), scores the final model's dev predictions with `glue_metrics` and writes
them to that directory's glue_run.json. A run with glue_run.json is finished and never run
again; an interrupted one resumes from its last checkpoint (bit-identically), so rerunning
the command continues the suite where it stopped and gives the same table. MNLI runs first
when a recipe starts other tasks from it. WNLI is not fine-tuned: it is scored as the BERT
paper submitted it, the training set's majority class, and left out of the average.

WORKDIR/glue.json holds each task's aggregated metrics (fractions) and the average;
WORKDIR/glue_runs.json every run's figures, the learning rate kept per task and the recipe;
WORKDIR/glue.md the table (glue_table.py).
"""

import collections
import dataclasses
import json
import os

from bert_jax.errors import UserError
from bert_jax.evaluation import glue_metrics, glue_table
from bert_jax.interop import model_source
from bert_jax.storage import files, json_values
from bert_jax.tasks.classification import ClassificationTask, sorted_labels
from bert_jax.tasks.regression import RegressionTask
from bert_jax.tasks import task_from_info
from bert_jax.training import prediction
from bert_jax.training.finetune import EVAL_PREDICTIONS, finetune, load_finetuned
from bert_jax.training.finetune_settings import Settings
from input_pipeline.tasks import glue as glue_data

RUN_RESULT = "glue_run.json"
GLUE_JSON, GLUE_RUNS, GLUE_MD = "glue.json", "glue_runs.json", "glue.md"
SUITE = "glue_suite.json"  # the model, data and recipe of the runs in WORKDIR


@dataclasses.dataclass(frozen=True)
class Run:
    task: str
    learning_rate: float
    seed: int

    def directory(self, workdir: str) -> str:
        return files.join(workdir, "runs", self.task, f"lr{self.learning_rate:g}-seed{self.seed}")


class Stopped(Exception):
    """A run of the suite stopped by Ctrl-C or SIGTERM after saving its checkpoint (the trainer
    said where): the command exits with the signal's status, and run again, it continues."""

    def __init__(self, run: Run, exit_status: int):
        super().__init__(f"GLUE suite stopped in {run.task} lr {run.learning_rate:g} seed "
                         f"{run.seed}; the same command continues it")
        self.exit_status = exit_status


def check_tasks(text: str) -> list[str]:
    """`--tasks`: known names, each once, in the order given."""
    tasks = [name.strip() for name in text.split(",") if name.strip()]
    for name in tasks:
        glue_data.task(name)
    if not tasks or len(set(tasks)) != len(tasks):
        raise UserError(f"--tasks {text!r}: expected distinct names of {','.join(glue_data.TASKS)}")
    return tasks


def check_workdir(workdir: str, model: str, data: str, recipe) -> None:
    """A suite's directory holds one model's runs of one recipe on one data set: a rerun
    with another is refused (its table would mix them), else recorded for the next."""
    path = files.join(workdir, SUITE)
    record = dict(model=model, data=data, recipe=glue_table.recipe_record(recipe))
    if files.exists(path):
        before = json.loads(files.read_text(path))
        changed = [key for key in record if before.get(key) != json.loads(
            json_values.dumps(record[key]))]
        if changed:
            raise UserError(f"--workdir {workdir}: holds a suite of another "
                            f"{' and '.join(changed)} ({path}); use another --workdir")
        return
    files.makedirs(workdir)
    with files.atomic_write(path) as file:
        json_values.dump(record, file, indent=2)


def plan(recipe, tasks: list[str]) -> list[Run]:
    """Every run, MNLI's first when other tasks start from it."""
    ordered = sorted(tasks, key=lambda task: task != "mnli") if any(
        task in recipe.start_from_mnli for task in tasks) else list(tasks)
    runs = []
    for task in ordered:
        if task == "wnli":
            continue  # scored as the majority class, not fine-tuned
        for learning_rate in recipe.tasks[task].learning_rates:
            runs.extend(Run(task, learning_rate, seed) for seed in recipe.seeds)
    return runs


def prepare_data(data: str, task: str, workdir: str, tfds_data_dir: str | None):
    """(train path, dev paths) of `task` as JSONL under WORKDIR/data/, read once."""
    glue_task = glue_data.task(task)
    directory = files.join(workdir, "data", task)
    names = ["train"] + [os.path.splitext(name)[0] for name in glue_task.dev_files]
    paths = [files.join(directory, f"{name}.jsonl") for name in names]
    if not all(files.exists(path) for path in paths):
        files.makedirs(directory)
        for split, path in zip(["train", *range(len(glue_task.dev_files))], paths):
            glue_data.write_jsonl(glue_data.read_split(data, glue_task, split, tfds_data_dir),
                                  path)
    return paths[0], paths[1:]


def _read_jsonl(path: str) -> list[dict]:
    return [json.loads(line) for line in files.read_text(path).splitlines() if line.strip()]


def _task_for(task: str, train_path: str):
    glue_task = glue_data.task(task)
    spec = glue_data.jsonl_columns(glue_task)
    if glue_task.regression:
        return RegressionTask(["LABEL_0"], spec)
    return ClassificationTask(sorted_labels(row["label"] for row in _read_jsonl(train_path)),
                              spec)


def _overrides(recipe, run: Run, extra) -> list[str]:
    task_recipe = recipe.tasks[run.task]
    return [f"--config.finetune.warmup_fraction={recipe.warmup_fraction}",
            f"--config.optimizer.beta2={recipe.beta2}",
            f"--config.optimizer.epsilon={recipe.epsilon}",
            f"--config.optimizer.weight_decay="
            f"{task_recipe.optax_weight_decay(run.learning_rate)}", *extra]


def _predictions(path: str, regression: bool) -> list:
    return [row["label"] if regression else str(row["label"]) for row in _read_jsonl(path)]


def _gold(path: str, regression: bool) -> list:
    return [float(row["label"]) if regression else row["label"] for row in _read_jsonl(path)]


def run_one(run: Run, model, recipe, data_paths, workdir: str, overrides=(),
            show_progress: bool = True, log=print) -> dict:
    """Fine-tunes one run (or resumes it), scores its final model on every dev set, and
    writes RUN/glue_run.json; returns its content."""
    train_path, dev_paths = data_paths
    directory = run.directory(workdir)
    task_recipe = recipe.tasks[run.task]
    settings = Settings(epochs=task_recipe.epochs, learning_rate=run.learning_rate,
                        batch_size=task_recipe.batch_size, max_seq_len=recipe.max_seq_len,
                        seed=run.seed)
    task = _task_for(run.task, train_path)
    trained = finetune(task, model, train_path, dev_paths[0], directory, settings,
                       _overrides(recipe, run, overrides), show_progress=show_progress, log=log)
    if "exit_status" in trained:  # no final model and no predictions yet
        raise Stopped(run, trained["exit_status"])
    prediction_paths = [files.join(directory, EVAL_PREDICTIONS)]
    for index, dev_path in enumerate(dev_paths[1:], start=1):  # MNLI mismatched
        path = files.join(directory, f"eval_predictions_{index}.jsonl")
        predict_file(directory, dev_path, path, task_recipe.batch_size * 2, show_progress)
        prediction_paths.append(path)
    regression = task.name == "regress"
    metrics = glue_metrics.dev_metrics(run.task, [
        (_predictions(predicted, regression), _gold(dev, regression))
        for predicted, dev in zip(prediction_paths, dev_paths)])
    result = dict(dataclasses.asdict(run), metrics=metrics,
                  started_from=getattr(model, "name", str(model)),
                  predictions=[os.path.basename(path) for path in prediction_paths],
                  dev=list(dev_paths))
    with files.atomic_write(files.join(directory, RUN_RESULT)) as file:
        json_values.dump(result, file, indent=2)
    return result


def predict_file(model, data_path: str, output_path: str, batch_size: int,
                 progress: bool) -> None:
    """`model`'s predictions for `data_path`, written as a run writes its own."""
    finetuned = load_finetuned(model, batch_size, task_from_info)
    task, examples, predictions = prediction.predict_inputs(
        finetuned, lambda task, tokenizer, length: task.read_examples(data_path, tokenizer,
                                                                      length),
        batch_size, progress=progress)
    task.write_predictions(output_path, examples, predictions)


def majority_wnli(data_paths, workdir: str) -> dict:
    """WNLI as the BERT paper submitted it: the training set's most frequent label."""
    train_path, dev_paths = data_paths
    counts = collections.Counter(row["label"] for row in _read_jsonl(train_path))
    label = sorted(counts, key=lambda name: (-counts[name], name))[0]
    gold = _gold(dev_paths[0], regression=False)
    metrics = glue_metrics.dev_metrics("wnli", [([label] * len(gold), gold)])
    return dict(task="wnli", learning_rate=None, seed=None, metrics=metrics,
                started_from=f"the training set's majority label {label!r}")


def finished(run: Run, workdir: str) -> dict | None:
    path = files.join(run.directory(workdir), RUN_RESULT)
    return json.loads(files.read_text(path)) if files.exists(path) else None


def _starting_model(run: Run, recipe, results: dict, source, workdir: str, tasks):
    """The pre-trained model, or for a task the recipe starts from MNLI, the MNLI run of the
    same seed at MNLI's kept learning rate (its final weights; the head is fresh)."""
    if run.task not in recipe.start_from_mnli or "mnli" not in tasks:
        return source
    mnli = {other: result for other, result in results.items() if other.task == "mnli"}
    kept = kept_learning_rate(recipe, list(mnli.values()))
    return model_source.resolve(Run("mnli", kept, run.seed).directory(workdir))


def kept_learning_rate(recipe, results: list[dict]) -> float:
    """The learning rate whose seeds' aggregate task score is best (the first of a tie)."""
    by_rate = collections.defaultdict(list)
    for result in results:
        by_rate[result["learning_rate"]].append(result["metrics"])
    return max(by_rate, key=lambda rate: glue_metrics.task_score(
        glue_metrics.aggregate(by_rate[rate], recipe.aggregate)))


def summarise(recipe, tasks, results: dict, wnli: dict | None) -> tuple[dict, dict]:
    """(glue.json's content, each task's kept rate and per-rate, per-seed figures)."""
    table, details = {}, {}
    for task in tasks:
        if task == "wnli":
            table[task], details[task] = wnli["metrics"], dict(runs=[wnli])
            continue
        runs = [result for run, result in results.items() if run.task == task]
        kept = kept_learning_rate(recipe, runs)
        by_rate = {rate: [result for result in runs if result["learning_rate"] == rate]
                   for rate in recipe.tasks[task].learning_rates}
        aggregates = {f"{rate:g}": glue_metrics.aggregate(
            [result["metrics"] for result in rate_runs], recipe.aggregate)
            for rate, rate_runs in by_rate.items()}
        table[task] = aggregates[f"{kept:g}"]
        details[task] = dict(learning_rate=kept, aggregate=recipe.aggregate,
                             by_learning_rate=aggregates, runs=runs)
    table["average"] = glue_metrics.average({task: table[task] for task in tasks})
    return table, details


def _drop_checkpoints(run: Run, workdir: str, recipe, tasks) -> None:
    """A finished run keeps its results and predictions; its weights (a checkpoint and
    best/, hundreds of MB each) only where another task starts from them (MNLI)."""
    if run.task == "mnli" and recipe.start_from_mnli & set(tasks):
        return
    for name in ("checkpoints", "best"):
        path = files.join(run.directory(workdir), name)
        if files.exists(path):
            files.rmtree(path)


def run_suite(model, data: str, workdir: str, tasks: list[str], recipe, overrides=(),
              tfds_data_dir: str | None = None, keep_checkpoints: bool = False,
              compare=(), compare_runs=(), show_progress: bool = True, log=print) -> dict:
    """Runs (or continues) the suite; writes glue.json, glue_runs.json and glue.md (with the
    reference rows `compare` names and the rows of the suites in `compare_runs`); returns
    glue.json's content."""
    from tqdm import tqdm

    source = model_source.resolve(model)
    check_workdir(workdir, source.name, data, recipe)
    data_paths = {task: prepare_data(data, task, workdir, tfds_data_dir) for task in tasks}
    runs = plan(recipe, tasks)
    results = {run: finished(run, workdir) for run in runs}
    sizes = {task: len(_read_jsonl(paths[0])) for task, paths in data_paths.items()}
    work = {run: sizes[run.task] * recipe.tasks[run.task].epochs for run in runs}
    done = sum(work[run] for run, result in results.items() if result)
    log(f"GLUE: {len(runs)} runs ({sum(1 for result in results.values() if result)} "
        f"finished before) of recipe {recipe.name}, tasks {','.join(tasks)}")
    with tqdm(total=sum(work.values()), initial=done, unit="example", desc="GLUE suite",
              disable=not show_progress, dynamic_ncols=True) as bar:
        for run in runs:
            if results[run] is None:
                start = _starting_model(run, recipe, results, source, workdir, tasks)
                results[run] = run_one(run, start, recipe, data_paths[run.task], workdir,
                                       overrides, show_progress, log)
                bar.update(work[run])
                log(f"{run.task} lr {run.learning_rate:g} seed {run.seed}: " + ", ".join(
                    f"{name} {value:.4f}" for name, value in results[run]["metrics"].items()))
            if not keep_checkpoints:
                _drop_checkpoints(run, workdir, recipe, tasks)
    wnli = majority_wnli(data_paths["wnli"], workdir) if "wnli" in tasks else None
    table, details = summarise(recipe, tasks, results, wnli)
    runs_record = dict(model=source.name, data=data, recipe=glue_table.recipe_record(recipe),
                       tasks=details)
    with files.atomic_write(files.join(workdir, GLUE_RUNS)) as file:
        json_values.dump(runs_record, file, indent=2)
    with files.atomic_write(files.join(workdir, GLUE_JSON)) as file:
        json_values.dump(table, file, indent=2)
    files.write_text(files.join(workdir, GLUE_MD), glue_table.markdown(
        source.name, table, runs_record, tasks, compare, compare_runs))
    return table
