"""The model card (README.md) `convert --to hf` writes beside a Hugging Face directory.

In the Hub's format: YAML metadata first (`library_name`, `pipeline_tag` from the
architecture, `base_model` when the run started from a Hub model, `tags`, and a
`model-index` with the GLUE results when there are some), then prose: what the model is,
what it was trained from and on with which recipe (the run's run_config.json, and
eval_results.json for a fine-tuned model), and the evaluation table (the GLUE suite's
glue.md table when the run has one). The run's files are looked for in the converted
directory and the directories above it (a fine-tuned run's best/, a GLUE suite's
runs/TASK/RUN/best), or in the GLUE work directory `convert --glue-run` names.
"""

import json
import re

from bert_jax.storage import files

_PIPELINES = (("ForSequenceClassification", "text-classification"),
              ("ForTokenClassification", "token-classification"),
              ("ForQuestionAnswering", "question-answering"),
              ("ForMaskedLM", "fill-mask"), ("ForPreTraining", "fill-mask"),
              ("Model", "feature-extraction"))
_METRIC_NAMES = {"mcc": "Matthews correlation", "accuracy": "Accuracy", "f1": "F1",
                 "pearson": "Pearson correlation", "spearman": "Spearman correlation",
                 "accuracy_matched": "Accuracy (matched)",
                 "accuracy_mismatched": "Accuracy (mismatched)"}
_LEVELS = 4  # runs/TASK/RUN/best -> the suite's directory


def find_up(directory: str, name: str) -> str | None:
    """`directory/name`, or the nearest one above it (at most `_LEVELS` up)."""
    for _ in range(_LEVELS + 1):
        path = files.join(directory, name)
        if files.exists(path):
            return path
        parent = files.dirname(directory.rstrip("/"))
        if not parent or parent == directory:
            return None
        directory = parent
    return None


def _read(path: str | None) -> dict | None:
    return json.loads(files.read_text(path)) if path else None


def _hub_name(name) -> bool:
    return isinstance(name, str) and re.fullmatch(r"[\w.-]+/[\w.-]+", name) is not None


def _yaml_scalar(value) -> str:
    return json.dumps(value) if isinstance(value, str) else str(value)


def _metadata(name: str, architecture: str, family: str, base: str | None,
              glue: dict | None) -> list[str]:
    pipeline = next(tag for suffix, tag in _PIPELINES if architecture.endswith(suffix))
    lines = ["---", "library_name: transformers", f"pipeline_tag: {pipeline}",
             "tags:", "- bert-jax", f"- {family}"]
    if _hub_name(base):
        lines.append(f"base_model: {base}")
    if glue:
        lines += ["model-index:", f"- name: {_yaml_scalar(name)}", "  results:"]
        for task, metrics in glue.items():
            if task in ("average", "wnli"):  # WNLI is the majority label, not the model's
                continue
            lines += ["  - task:", "      type: text-classification", "    dataset:",
                      f"      name: GLUE {task.upper()}", "      type: nyu-mll/glue",
                      f"      config: {task}", "      split: validation", "    metrics:"]
            lines += [line for metric, value in metrics.items() for line in (
                f"    - type: {metric}", f"      value: {value:.4f}",
                f"      name: {_METRIC_NAMES.get(metric, metric)}")]
    return lines + ["---"]


def _training(run_config: dict | None, results: dict | None) -> list[str]:
    if run_config is None:
        return ["No training run was found beside the converted weights."]
    optimizer = run_config["optimizer"]
    lines = [f"- started from: `{run_config.get('init_from') or 'random initialisation'}`",
             f"- training data: `{run_config['data'].get('train_files')}`",
             f"- {run_config['num_train_steps']} steps of batch {run_config['batch_size']}, "
             f"sequences of up to {run_config['data']['seq_len']} tokens, seed "
             f"{run_config['seed']}",
             f"- optimizer {optimizer['name']}: peak learning rate {optimizer['learning_rate']:g}"
             f", {optimizer['schedule']} schedule, {optimizer['warmup_steps']} warm-up steps, "
             f"betas ({optimizer['beta1']}, {optimizer['beta2']}), eps {optimizer['epsilon']:g}"
             f", weight decay {optimizer['weight_decay']:g}"]
    if results and results.get("final"):
        metrics = ", ".join(f"{name} {value:.4f}" for name, value in
                            results["final"]["metrics"].items())
        lines.append(f"- task `{results['task']}`, evaluated on `{results['settings']['eval']}`"
                     f" at step {results['final']['step']}: {metrics}")
    return lines


def model_card(name: str, source_directory: str, architecture: str, family: str,
               glue_run: str | None = None) -> str:
    """README.md's text for the weights converted from `source_directory`."""
    run_config = _read(find_up(source_directory, "run_config.json"))
    results = _read(find_up(source_directory, "eval_results.json"))
    glue_dir = glue_run or (files.dirname(path) if (path := find_up(
        source_directory, "glue.json")) else None)
    glue = _read(files.join(glue_dir, "glue.json")) if glue_dir else None
    base = run_config.get("init_from") if run_config else None
    lines = _metadata(name, architecture, family, base, glue)
    lines += ["", f"# {name}", "",
              f"A {family} model (`{architecture}`) trained with bert-jax and converted to "
              "the `transformers` layout by "
              f"`bert-jax convert --to hf` from `{source_directory}`.", "", "## Training", ""]
    lines += _training(run_config, results)
    if glue:
        table = files.read_text(files.join(glue_dir, "glue.md"))
        lines += ["", "## Evaluation: GLUE dev", "",
                  *table.split("\n## Every run")[0].splitlines()[2:]]
    return "\n".join(lines).rstrip() + "\n"


def writer(name: str, source_directory: str, family: str, glue_run: str | None = None):
    """`extra_files` for `model_writers.export_huggingface`: README.md, for the architecture
    the config.json written before it names."""
    def write(directory: str) -> None:
        architecture = json.loads(files.read_text(files.join(directory, "config.json")))[
            "architectures"][0]
        text = model_card(name, source_directory, architecture, family, glue_run)
        with open(files.join(directory, "README.md"), "w", encoding="utf-8") as file:
            file.write(text)
    return write
