"""GLUE fine-tuning recipes as the papers ran them, by name (`bert-jax glue --recipe NAME`).

A recipe gives each task its learning-rate grid, epochs, batch size and weight decay, and the
suite its seeds, how seeds are aggregated (the median or the mean), the warm-up share, the
longest input, Adam's beta2 and epsilon, and which tasks start from the MNLI run (their
encoder; the head is fresh). The learning rate kept for a task is the one whose aggregate
task score is best on dev, as the BERT paper selected it. Sources (../shared
REFERENCES-evaluation.md, section 2):

  bert              Devlin et al. 2019, section 4.1 and A.3: every task lr in {2e-5, 3e-5,
                    5e-5}, 3 epochs, batch 32, AdamW with weight decay 0.01, 10% warm-up then
                    linear decay, 128 tokens; three seeds, the median (RoBERTa's
                    aggregation: the BERT paper's small-task restarts were best-of).
  modernbert-base   Warner et al. 2024 Table 6 (lr / weight decay / epochs per task), batch 64
  modernbert-large  for all (maintainer, ModernBERT issue #196), 10% warm-up then linear decay
                    to 0 (generate_eval_config.py), betas (0.9, 0.98), eps 1e-6 (glue_jobs.py's
                    DecoupledAdamW), 256 tokens, seeds 1618, 42, 6033 (the first three of
                    generate_eval_config.py's), the mean (glue.py); RTE, MRPC and STS-B from
                    the MNLI checkpoint (the paper, E.1). Composer's DecoupledAdamW decays by
                    wd x lr_t / lr_peak per step, optax's adamw by lr_t x wd: the table's wd
                    is divided by the task's peak lr, which makes the two the same.
"""

import dataclasses

from bert_jax.errors import UserError


@dataclasses.dataclass(frozen=True)
class TaskRecipe:
    learning_rates: tuple[float, ...]
    epochs: int
    batch_size: int
    weight_decay: float = 0.01  # as optax's adamw takes it (times the learning rate)
    decoupled: bool = False  # weight_decay is Composer's DecoupledAdamW's (not times lr)

    def optax_weight_decay(self, learning_rate: float) -> float:
        return self.weight_decay / learning_rate if self.decoupled else self.weight_decay


@dataclasses.dataclass(frozen=True)
class Recipe:
    name: str
    source: str  # where its numbers come from
    tasks: dict  # task name -> TaskRecipe
    seeds: tuple[int, ...]
    aggregate: str  # 'median' or 'mean' over seeds
    max_seq_len: int
    warmup_fraction: float = 0.1
    beta2: float = 0.999
    epsilon: float = 1e-6
    start_from_mnli: frozenset = frozenset()

    def overridden(self, learning_rates=None, seeds=None, epochs=None, batch_size=None,
                   max_seq_len=None) -> "Recipe":
        """The recipe with the flags given (not None) in place of its values, for every task."""
        changes = {name: value for name, value in (("learning_rates", learning_rates),
                                                   ("epochs", epochs),
                                                   ("batch_size", batch_size))
                   if value is not None}
        tasks = {name: dataclasses.replace(task, **changes) for name, task in self.tasks.items()}
        return dataclasses.replace(self, tasks=tasks, seeds=tuple(seeds or self.seeds),
                                   max_seq_len=max_seq_len or self.max_seq_len)


_GLUE_TASKS = ("cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte", "wnli")


def _bert() -> Recipe:
    task = TaskRecipe((2e-5, 3e-5, 5e-5), epochs=3, batch_size=32)
    return Recipe("bert", "Devlin et al. 2019, section 4.1 and appendix A.3",
                  {name: task for name in _GLUE_TASKS}, seeds=(0, 1, 2), aggregate="median",
                  max_seq_len=128)


# ModernBERT Table 6: task -> (lr, weight decay, epochs), base then large.
_MODERNBERT_TABLE = {
    "base": {"cola": (8e-5, 1e-6, 5), "mnli": (5e-5, 5e-6, 1), "mrpc": (5e-5, 5e-6, 10),
             "qnli": (8e-5, 5e-6, 2), "qqp": (5e-5, 5e-6, 10), "rte": (5e-5, 1e-5, 3),
             "sst2": (8e-5, 1e-5, 2), "stsb": (8e-5, 5e-6, 10)},
    "large": {"cola": (3e-5, 8e-6, 5), "mnli": (3e-5, 1e-5, 1), "mrpc": (8e-5, 5e-6, 2),
              "qnli": (3e-5, 5e-6, 2), "qqp": (5e-5, 8e-6, 2), "rte": (5e-5, 8e-6, 3),
              "sst2": (1e-5, 1e-6, 3), "stsb": (8e-5, 1e-5, 10)},
}


def _modernbert(size: str) -> Recipe:
    tasks = {name: TaskRecipe((lr,), epochs, 64, weight_decay, decoupled=True)
             for name, (lr, weight_decay, epochs) in _MODERNBERT_TABLE[size].items()}
    tasks["wnli"] = tasks["rte"]  # not in the table (WNLI is never fine-tuned: see glue.py)
    return Recipe(f"modernbert-{size}", "Warner et al. 2024, appendix E.1 Table 6; "
                  "AnswerDotAI/ModernBERT glue.py, generate_eval_config.py, issue #196",
                  tasks, seeds=(1618, 42, 6033), aggregate="mean", max_seq_len=256,
                  beta2=0.98, start_from_mnli=frozenset({"rte", "mrpc", "stsb"}))


RECIPES = {"bert": _bert, "modernbert-base": lambda: _modernbert("base"),
           "modernbert-large": lambda: _modernbert("large")}


def recipe(name: str) -> Recipe:
    if name not in RECIPES:
        raise UserError(f"--recipe {name!r}: expected one of {', '.join(RECIPES)}")
    return RECIPES[name]()
