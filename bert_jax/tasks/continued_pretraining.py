"""Continued pre-training: a released model and your raw text to a continued model, one call.

    from bert_jax.tasks.continued_pretraining import continue_pretraining
    results = continue_pretraining("answerdotai/ModernBERT-base", ["my.txt"], "runs/mine",
                                   tokens=100_000_000)
    results["evaluations"]  # [{"step", "mlm_loss", "mlm_accuracy", ...}] held out

`bert-jax pretrain --model M --text FILE ... --workdir W` is this call. What it does:

1. The model (a transformers directory, a Hub name, a bert-jax model or training work
   directory; BERT or ModernBERT family) brings its architecture (every model.* field) and
   tokenizer; its family picks the recipe, a shipped config (RECIPES) whose keys
   `--config.KEY=VALUE` still override.
2. The text becomes masked-LM-only packed shards of that tokenizer in W/data, with a
   held-out split (input_pipeline/text_shards.py), made once: a rerun reuses them.
3. The run is sized from --steps, or --tokens (steps of batch_size x seq_len tokens), or
   one pass over the training shards: warm-up WARMUP_FRACTION of the steps, a
   warmup-stable-decay schedule's decay DECAY_FRACTION, EVALUATIONS evaluations and
   checkpoints over the run (and one before it), each on the whole held-out split up to
   the recipe's eval.num_batches. Keys the user set are left as set.
4. The trainer runs it (resuming from W's last checkpoint when there is one), and every
   held-out evaluation of the run, resumed or not, is written to W/eval_results.json
   (the evaluator keeps them in its checkpoints).

The shards are made on this machine: on several hosts, make them with `create-data` and
run `pretrain --config ... --config.init_from=M` instead.
"""

import math

import jax
import ml_collections

from bert_jax.errors import UserError
from bert_jax.interop import model_source
from bert_jax.models.families import FAMILIES, config_to_dict, family_of
from bert_jax.run_config import (apply_overrides, checkpoint_suite, flatten, load_run_config,
                                 parse_overrides)
from bert_jax.run_config.objective import check_objective
from bert_jax.run_config.ranges import check_ranges, check_sections
from bert_jax.storage import files, json_values
from bert_jax.tasks import pretraining_data
from bert_jax.training import trainer, workdir as workdir_lib
from bert_jax.training.train_step import model_config_of
from bert_jax.training.evaluation import TermEvaluator
from input_pipeline.text_shards import prepare_text_shards

# family -> its shipped recipe, configs/<family>_continue.py (bert, modernbert, eurobert)
RECIPES = {name: f"{name}_continue" for name in FAMILIES}
DATA = "data"  # the shards' directory in the work directory
EVAL_RESULTS = "eval_results.json"
WARMUP_FRACTION = 0.05  # of the steps: the learning rate's linear warm-up
DECAY_FRACTION = 0.2  # of the steps: a wsd schedule's decay to 0
EVALUATIONS = 5  # held-out evaluations (and checkpoints) over the run, besides step 0
DEFAULT_SEQ_LEN = 128  # for a --config that leaves data.seq_len to the shards


def recipe_config(source, config: str | None = None, overrides=()):
    """(the locked run config for continuing `source` (a ModelSource), the override keys).

    The recipe of the model's family (or `config`, which must be of that family), with the
    model's architecture and vocabulary, then `overrides` (--config.KEY=VALUE)."""
    model_config = source.config()
    family = family_of(model_config).name
    spec = config or RECIPES[family]
    run_config = load_run_config(spec)
    if run_config.model.get("family", "bert") != family:
        raise UserError(f"--config {spec}: a {run_config.model.get('family', 'bert')} "
                        f"config, but {source.name} is a {family} model; use "
                        f"{RECIPES[family]} or another {family} config")
    with run_config.unlocked():
        run_config.model = ml_collections.ConfigDict(config_to_dict(model_config))
    # Recorded as one name wherever the command runs: a rerun must start from the same model.
    run_config.init_from = workdir_lib.model_name(source.name)
    run_config.data.vocab_path = source.vocab_path or ""
    run_config.data.demo_dir = ""
    seq_len = run_config.data.seq_len or DEFAULT_SEQ_LEN
    run_config.data.seq_len = min(seq_len, model_config.max_positions)
    pairs = parse_overrides(list(overrides))
    apply_overrides(run_config, pairs, source=spec)
    check_ranges(flatten(run_config), source=spec)
    check_sections(run_config, source=spec)
    check_objective(run_config, source=spec)
    if checkpoint_suite.tasks(run_config):  # it would keep checkpoints for a suite never run
        raise UserError(f"{spec}: checkpoint_suite.tasks runs with `pretrain --config`; after "
                        "--model M --text, run bert-jax glue --every-checkpoint on the workdir")
    return run_config, {key for key, _ in pairs}


def run_length(run_config, shards: dict, steps: int | None, tokens: int | None) -> dict:
    """{key: value} of the run's length and intervals (module docstring, step 3)."""
    if steps is not None and tokens is not None:
        raise UserError("give --steps or --tokens, not both")
    tokens_per_step = run_config.batch_size * run_config.data.seq_len
    if tokens is not None:
        steps = math.ceil(tokens / tokens_per_step)
    elif steps is None:  # one pass over the training rows
        steps = math.ceil(shards["train_rows"] / run_config.batch_size)
    if steps < 1:
        raise UserError(f"--steps / --tokens: the run needs at least one step, got {steps}")
    every = max(1, math.ceil(steps / EVALUATIONS))
    eval_batches = math.ceil(shards["eval_rows"] / run_config.eval.batch_size)
    # schedule_steps: the schedule's length whatever num_train_steps says, so a run stopped
    # early by --config.num_train_steps=K and continued is the run never stopped.
    values = {"num_train_steps": steps, "schedule_steps": steps,
              "optimizer.warmup_steps": max(1, round(steps * WARMUP_FRACTION)),
              "eval.every_steps": every, "checkpoint.every_steps": every,
              "eval.num_batches": max(1, min(run_config.eval.num_batches, eval_batches)),
              "log_every_steps": max(1, min(run_config.log_every_steps, every))}
    if run_config.optimizer.schedule == "wsd":
        values["optimizer.decay_steps"] = min(round(steps * DECAY_FRACTION),
                                              steps - values["optimizer.warmup_steps"])
    return values


def _apply(run_config, values: dict, overridden: set) -> None:
    """Sets each of `values` the user did not set, and checks the result's ranges."""
    for key, value in values.items():
        if key not in overridden:
            *parents, leaf = key.split(".")
            node = run_config
            for parent in parents:
                node = node[parent]
            node[leaf] = value
    check_ranges(flatten(run_config), source="the sized run")


def continue_pretraining(model, texts: list[str], workdir: str, *, steps: int | None = None,
                         tokens: int | None = None, config: str | None = None,
                         overrides=(), input_format: str = "bert",
                         show_progress: bool = True, log=print) -> dict:
    """Continues pre-training `model` (a path, Hub name or ModelSource) on `texts` in
    `workdir`; returns eval_results.json's content (see the module docstring)."""
    if jax.process_count() > 1:
        raise UserError("pretrain --text makes its shards on one machine; on several hosts "
                        "make them with create-data and run pretrain --config NAME "
                        "--config.init_from=MODEL")
    source = model_source.resolve(model)
    run_config, overridden = recipe_config(source, config, overrides)
    # A work directory of another run is refused before any shard is written into it.
    workdir_lib.check_run(workdir, model_config_of(run_config), run_config.init_from)
    shards = prepare_text_shards(
        files.join(workdir, DATA), texts, source.vocab_path, source.tokenizer(),
        seq_len=run_config.data.seq_len, seed=run_config.seed, input_format=input_format,
        show_progress=show_progress, log=log)
    run_config.data.train_files = shards["train_files"]
    run_config.data.eval_files = shards["eval_files"]
    _apply(run_config, run_length(run_config, shards, steps, tokens), overridden)
    pretraining = pretraining_data.prepare_run(run_config, log, source=source)
    evaluator = TermEvaluator(run_config.eval, pretraining.dataset_factory)
    log(f"continuing {source.name} ({run_config.model.family}) for "
        f"{run_config.num_train_steps} steps of {run_config.batch_size} x "
        f"{run_config.data.seq_len} tokens on {shards['train_rows']} rows "
        f"({shards['eval_rows']} held out)")
    result = trainer.train(run_config, workdir, task=pretraining.task,
                           dataset_factory=pretraining.dataset_factory,
                           init_weights=pretraining.init_weights, evaluator=evaluator,
                           show_progress=show_progress, log=log)
    results = dict(model=source.name, text=list(texts), step=result["step"],
                   num_train_steps=run_config.num_train_steps,
                   tokens_per_step=run_config.batch_size * run_config.data.seq_len,
                   train_rows=shards["train_rows"], eval_rows=shards["eval_rows"],
                   evaluations=evaluator.history,
                   export=f"bert-jax convert {workdir} OUT --to hf",
                   preempted=result["preempted"],
                   exit_status=result.get("exit_status", 0))
    if jax.process_index() == 0:
        with files.atomic_write(files.join(workdir, EVAL_RESULTS)) as file:
            json_values.dump(results, file, indent=2)
    return results
