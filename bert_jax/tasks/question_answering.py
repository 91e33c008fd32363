"""`finetune qa`: extractive question answering on SQuAD v1.1 / v2.0 JSON (span start and end).

Questions are cut into windows as the original `run_squad.py` does
(`input_pipeline/tasks/squad_windows.py`), the span head (`heads.BertForQuestionAnswering`)
scores every position as a start and as an end, the loss is the mean of the start and end
cross-entropies over the real (unpadded) positions, and the windows' logits become answers
through the original's n-best search (`squad_postprocess.py`), scored with the official
metrics (`squad_metrics.py`: `exact_match`/`f1` for v1.1; `exact`, `f1`, `HasAns_*`,
`NoAns_*`, `best_*` for v2.0, in points 0-100). The run's eval predictions are written as
the official scripts' inputs: predictions.json, nbest_predictions.json, null_odds.json (v2.0).
"""

import dataclasses
import os

import jax.numpy as jnp
import numpy as np

from bert_jax import losses
from bert_jax.errors import UserError
from bert_jax.models.families import family_of
from bert_jax.tasks import arguments
from bert_jax.tasks.arguments import QuestionAnsweringSettings  # the flags' defaults
from bert_jax.training.task import Examples, FineTuningTask
from input_pipeline.tasks import squad, squad_metrics, squad_postprocess, squad_windows

# The file the fine-tuning driver asks for; a QA run writes the official files instead.
_DRIVER_PREDICTIONS = "eval_predictions.jsonl"


@dataclasses.dataclass
class Gold:
    """What evaluation needs besides the logits: the questions and their windows."""
    questions: list
    windows: squad_windows.Windows
    version_2: bool


class QuestionAnsweringTask(FineTuningTask):
    name = "qa"
    terms = {"span_loss": "num_windows", "start_accuracy": "num_windows",
             "end_accuracy": "num_windows"}
    objective = ("span_loss",)
    logged = ("loss", "start_accuracy", "end_accuracy", "grad_norm", "learning_rate")
    evaluated = ("loss", "start_accuracy", "end_accuracy")
    best_metric, greater_is_better = "f1", True

    def __init__(self, settings: QuestionAnsweringSettings = QuestionAnsweringSettings()):
        self.options = settings

    # -- the seam -------------------------------------------------------------------------

    def settings(self):
        return dataclasses.asdict(self.options)

    def head(self) -> dict:
        return dict(architecture="BertForQuestionAnswering")

    def build_model(self, model_config, precision):
        return family_of(model_config).question_answering(model_config, precision)

    def batch_schema(self):
        tokens = lambda batch, seq_len: (batch, seq_len)  # noqa: E731
        per_window = lambda batch, seq_len: (batch,)  # noqa: E731
        return {"input_ids": (np.int32, tokens), "segment_ids": (np.int32, tokens),
                "input_mask": (np.int32, tokens), "start_positions": (np.int32, per_window),
                "end_positions": (np.int32, per_window), "weights": (np.float32, per_window)}

    def model_inputs(self, batch):
        return batch["input_ids"], batch["segment_ids"], batch["input_mask"]

    def counts(self, batch):
        return {"num_windows": jnp.sum(batch["weights"].astype(jnp.float32))}

    def sums(self, outputs, batch):
        start_logits, end_logits = _masked(outputs, batch["input_mask"])  # (B, T) each
        start, end, weights = (batch["start_positions"], batch["end_positions"],
                               batch["weights"].astype(jnp.float32))
        span_loss = 0.5 * (losses.cross_entropy(start_logits, start)
                           + losses.cross_entropy(end_logits, end))  # (B,)
        hit = lambda logits, gold: (jnp.argmax(logits, -1) == gold).astype(jnp.float32)  # noqa: E731
        return {"span_loss": jnp.sum(span_loss * weights),
                "start_accuracy": jnp.sum(hit(start_logits, start) * weights),
                "end_accuracy": jnp.sum(hit(end_logits, end) * weights)}

    def predictions(self, outputs, batch):
        start_logits, end_logits = _masked(outputs, batch["input_mask"], xp=np)
        return {"start_logits": np.asarray(start_logits, np.float32),
                "end_logits": np.asarray(end_logits, np.float32)}

    def evaluate(self, predictions, gold: Gold):
        answers, _, null_odds = self.answers(predictions, gold)
        return squad_metrics.evaluate(gold.questions, answers, gold.version_2,
                                      null_odds if gold.version_2 else None)

    tuned_setting_names = ("null_threshold",)

    def tuned_settings(self, metrics):
        """v2.0: the null threshold the official script finds best for F1 on the evaluation
        file (`best_f1_thresh`), which `predict` and `evaluate` then use."""
        if "best_f1_thresh" not in metrics:
            return {}
        return {"null_threshold": float(metrics["best_f1_thresh"])}

    # -- the commands ---------------------------------------------------------------------

    @classmethod
    def add_arguments(cls, parser):
        arguments.question_answering(parser)

    @classmethod
    def from_arguments(cls, args, tokenizer):
        version_2 = squad.read_squad(args.train).version_2
        return cls(QuestionAnsweringSettings(
            doc_stride=args.doc_stride, max_query_len=args.max_query_len, n_best=args.n_best,
            max_answer_len=args.max_answer_len, null_threshold=args.null_threshold,
            version_2=version_2))

    @classmethod
    def from_settings(cls, settings):
        known = {field.name for field in dataclasses.fields(QuestionAnsweringSettings)}
        return cls(QuestionAnsweringSettings(**{key: value for key, value in settings.items()
                                                if key in known}))

    def read_examples(self, path, tokenizer, max_seq_len, with_labels=True):
        """Every window of every question; windows of an answerable question whose answers
        could not be located (misplaced answer_start, warned) carry no weight in the loss."""
        return self._examples(path, squad.read_squad(path, require_answers=with_labels),
                              tokenizer, max_seq_len)

    def examples_from_inputs(self, inputs, tokenizer, max_seq_len):
        """Each input a {"question", "context"} dict (an "id" is optional), checked as the
        questions of a SQuAD file are."""
        paragraphs = []
        for number, value in enumerate(inputs, start=1):
            if not isinstance(value, dict) or not {"question", "context"} <= set(value):
                raise UserError(f"input {number}: expected a dict with 'question' and "
                                f"'context', got {value!r}")
            qa = dict(id=value.get("id", str(number)), question=value["question"])
            paragraphs.append(dict(context=value["context"], qas=[qa]))
        document = dict(data=[dict(paragraphs=paragraphs)])
        return self._examples("input", squad.parse_squad(document, "input", False), tokenizer,
                              max_seq_len)

    def _examples(self, path, data, tokenizer, max_seq_len):
        windows = squad_windows.make_windows(data.questions, tokenizer, max_seq_len,
                                             self.options.doc_stride,
                                             self.options.max_query_len)
        located = np.array([question.is_impossible or bool(question.answer_spans)
                            for question in data.questions], bool)
        weights = located[windows.question_index].astype(np.float32) if len(windows) else \
            np.zeros(0, np.float32)
        features = dict(windows.model_inputs(), weights=weights)
        gold = Gold(data.questions, windows, self.options.version_2 or data.version_2)
        return Examples(path, features, gold, list(windows.question_index))

    def answers(self, predictions, gold: Gold):
        """(predictions, n-best lists, null odds) by question id from the windows' logits."""
        shape = gold.windows.input_ids.shape
        start, end = np.full(shape, -np.inf, np.float32), np.full(shape, -np.inf, np.float32)
        for row, (start_row, end_row) in enumerate(zip(predictions["start_logits"],
                                                       predictions["end_logits"])):
            start[row, :len(start_row)], end[row, :len(end_row)] = start_row, end_row
        options = self.options
        return squad_postprocess.postprocess(
            gold.questions, gold.windows, start, end, gold.version_2, options.n_best,
            options.max_answer_len, options.null_threshold)

    def num_inputs(self, examples):
        return len(examples.gold.questions)  # examples.rows are the questions' windows

    def prediction_values(self, examples, predictions):
        """The answer text per question ("" for no answer), as predictions.json has it."""
        answers = self.answers(predictions, examples.gold)[0]
        return [answers[question.question_id] for question in examples.gold.questions]

    def write_predictions(self, path, examples, predictions):
        """predictions.json at `path` (in a run's directory for its eval predictions), with
        nbest_predictions.json and, for v2.0, null_odds.json beside it."""
        answers, nbest, null_odds = self.answers(predictions, examples.gold)
        directory = os.path.dirname(os.path.abspath(path))
        if os.path.basename(path) == _DRIVER_PREDICTIONS:
            path = os.path.join(directory, "predictions.json")
        squad_postprocess.write_predictions(directory, answers, nbest,
                                            null_odds if examples.gold.version_2 else {},
                                            predictions_name=os.path.basename(path))


def with_null_threshold(task, null_threshold: float | None, model: str):
    """`predict` / `evaluate --null-threshold`: the task answering "" above `null_threshold`
    instead of the threshold its run recorded (None: the recorded one)."""
    if null_threshold is None:
        return task
    if not isinstance(task, QuestionAnsweringTask):
        raise UserError(f"--null-threshold is for question answering (qa) models; {model} "
                        f"was fine-tuned for {task.name!r}")
    return QuestionAnsweringTask(dataclasses.replace(task.options, null_threshold=null_threshold))


def _masked(outputs, input_mask, xp=jnp):
    """Start and end logits with padding positions at a large negative value."""
    start_logits, end_logits = outputs
    padding = input_mask[:, :start_logits.shape[1]] == 0
    floor = xp.asarray(-1e9, start_logits.dtype)
    return xp.where(padding, floor, start_logits), xp.where(padding, floor, end_logits)


TASK = QuestionAnsweringTask
