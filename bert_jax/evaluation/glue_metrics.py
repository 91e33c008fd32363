"""Each GLUE task's metrics as the papers report them, from the predictions a run wrote.

    CoLA            Matthews correlation (`mcc`)
    SST-2, QNLI,    accuracy
    RTE, WNLI
    MRPC, QQP       F1 of the positive class (`1`: equivalent, duplicate) and accuracy
    STS-B           Pearson and Spearman correlation
    MNLI            accuracy on dev_matched and on dev_mismatched

scikit-learn computes the classification metrics and scipy the correlations, as fractions.
A task's score is the mean of its metrics (GLUE's own rule for the two-metric tasks, and
MNLI's m/mm); the suite's average is the mean of the task scores, WNLI left out as every
paper leaves it (BERT, RoBERTa, ModernBERT; BERT submitted the majority class for it).
Seeds are aggregated metric by metric (the median or the mean, as the recipe says).
"""

import numpy as np

METRICS = {"cola": ("mcc",), "sst2": ("accuracy",), "mrpc": ("f1", "accuracy"),
           "stsb": ("pearson", "spearman"), "qqp": ("f1", "accuracy"),
           "mnli": ("accuracy_matched", "accuracy_mismatched"), "qnli": ("accuracy",),
           "rte": ("accuracy",), "wnli": ("accuracy",)}
NOT_AVERAGED = ("wnli",)
POSITIVE_LABEL = "1"  # MRPC's and QQP's positive class, as the GLUE download spells it


def classification_metrics(task: str, predicted: list, gold: list) -> dict:
    """One dev set's metrics of `task` (one of each task's, MNLI's plain `accuracy`)."""
    from sklearn import metrics

    if task == "cola":
        return {"mcc": float(metrics.matthews_corrcoef(gold, predicted))}
    values = {"accuracy": float(metrics.accuracy_score(gold, predicted))}
    if task in ("mrpc", "qqp"):
        values = {"f1": float(metrics.f1_score(gold, predicted, pos_label=POSITIVE_LABEL)),
                  **values}
    return values


def regression_metrics(predicted, gold) -> dict:
    from scipy import stats

    predicted, gold = np.asarray(predicted, np.float64), np.asarray(gold, np.float64)
    return {"pearson": float(stats.pearsonr(predicted, gold)[0]),
            "spearman": float(stats.spearmanr(predicted, gold)[0])}


def dev_metrics(task: str, dev_sets: list[tuple[list, list]]) -> dict:
    """The task's metrics from (predicted, gold) of each of its dev sets (MNLI: two)."""
    if task == "stsb":
        return regression_metrics(*dev_sets[0])
    if task == "mnli":
        matched, mismatched = (classification_metrics(task, *pair) for pair in dev_sets)
        return {"accuracy_matched": matched["accuracy"],
                "accuracy_mismatched": mismatched["accuracy"]}
    return classification_metrics(task, *dev_sets[0])


def task_score(metrics: dict) -> float:
    return float(np.mean(list(metrics.values())))


def aggregate(per_seed: list[dict], how: str) -> dict:
    """Each metric's median or mean over the seeds' metric dicts."""
    reduce = np.median if how == "median" else np.mean
    return {name: float(reduce([values[name] for values in per_seed]))
            for name in per_seed[0]}


def average(table: dict) -> float | None:
    """The mean task score of the tasks in `table` ({task: metrics}), WNLI left out."""
    scores = [task_score(metrics) for task, metrics in table.items()
              if task not in NOT_AVERAGED]
    return float(np.mean(scores)) if scores else None
