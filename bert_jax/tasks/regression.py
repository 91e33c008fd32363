"""`finetune regress`: one text or a pair -> a real number (e.g. STS-B similarity), MSE loss.

The model is the classification one with a single output, as Hugging Face's
`BertForSequenceClassification` with `problem_type="regression"`; Pearson and Spearman
correlations come from scipy.
"""

import numpy as np

from bert_jax import losses
from bert_jax.errors import UserError
from bert_jax.tasks.classification import SentenceTask
from input_pipeline.tasks import columns


_FLOAT32_MAX = float(np.finfo(np.float32).max)


class RegressionTask(SentenceTask):
    name = "regress"
    terms = {"mse": "num_examples"}
    objective = ("mse",)
    logged = ("loss", "grad_norm", "learning_rate")
    evaluated = ("loss",)
    best_metric, greater_is_better = "pearson", True
    label_dtype = np.float32
    problem_type = "regression"
    numeric_labels = True
    head_names = {"classifier": "regression head"}  # a one-output classifier, as in HF

    @classmethod
    def from_arguments(cls, args, tokenizer):
        """Reads the training file once for the columns it records (`columns.read_table`)."""
        spec = columns.read_table(args.train, cls.spec_from_arguments(args),
                                  numeric_labels=True)[1]
        return cls(["LABEL_0"], spec)

    @classmethod
    def from_settings(cls, settings):
        return cls(["LABEL_0"], columns.ColumnSpec.from_dict(settings.get("columns", {})))

    def label_value(self, label: str, path: str, line: int) -> float:
        try:
            value = float(label)
        except ValueError:
            value = float("nan")
        if not np.isfinite(value):
            raise UserError(f"{path}:{line}: regression target {label!r} is not a finite number")
        if abs(value) > _FLOAT32_MAX:  # trained in float32, where it would be inf
            raise UserError(f"{path}:{line}: regression target {label!r} is beyond float32's "
                            f"range (at most {_FLOAT32_MAX:.4g} in magnitude), in which the "
                            "model is trained; rescale the targets")
        return value

    def sums(self, outputs, batch):
        return {"mse": losses.regression_sums(outputs, batch["labels"], batch["weights"])["loss"]}

    def predictions(self, outputs, batch):
        return {"score": np.asarray(outputs, np.float64)[:, 0]}

    def prediction_records(self, predictions):
        return [dict(label=round(float(score), 6)) for score in predictions["score"]]

    def prediction_values(self, examples, predictions):
        """The predicted number per input (the `label` of each written record)."""
        return [record["label"] for record in self.prediction_records(predictions)]

    def evaluate(self, predictions, gold):
        """pearson and spearman (scipy), and mse, of the scores against the targets."""
        from scipy import stats

        scores, gold = np.asarray(predictions["score"]), np.asarray(gold, np.float64)
        return {"pearson": float(stats.pearsonr(scores, gold)[0]),
                "spearman": float(stats.spearmanr(scores, gold)[0]),
                "mse": float(np.mean((scores - gold) ** 2))}


TASK = RegressionTask
