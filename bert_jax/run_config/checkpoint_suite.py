"""`checkpoint_suite.*`: a small GLUE suite a pre-training config names, run at its checkpoints.

The design, and why:
  - The trainer never stops to fine-tune. It keeps the checkpoints the suite needs from
    `checkpoint.keep`'s deletion instead (orbax's `keep_period`: every step that is a
    multiple of checkpoint.every_steps x checkpoint_suite.every), and `pretrain` runs the
    suite over them once training has finished. Fine-tuning inside the loop would stop the
    step clock (tokens/s, the ETA, MFU), hold the pre-training state in memory beside the
    fine-tuning one, and put a second run's failures inside the first; after the loop it is
    the suite `bert-jax glue --every-checkpoint` runs, with nothing of its own.
  - The suite is that command's: `glue_steps.run_over_steps` into WORKDIR/glue/ (steps/STEP/
    per checkpoint, glue_steps.json, glue_steps.md, glue_TASK.png), each step a suite
    directory that a rerun continues, so a resumed or repeated `pretrain` repeats no finished
    (task, learning rate, seed) run.
  - The kept checkpoints stay after the suite: they are the steps its table is about, and
    `glue --every-checkpoint` can score them again with another recipe. Each is a whole
    checkpoint (parameters and optimizer state), so `every` sets the disk it takes.
A task name or recipe that does not exist fails when the config is built (`check_section`),
a split the suite could not read (a missing file, a header without the task's columns, a
bad label) before training starts (`check_data` reads them all).
"""

from bert_jax.errors import UserError
from bert_jax.evaluation import glue_recipes
from input_pipeline.tasks import glue as glue_data

SECTION = "checkpoint_suite"


def tasks(config) -> list[str]:
    """The suite's tasks in the order given; [] when the config names none (or has no such
    section, as a fine-tuning config)."""
    section = config.get(SECTION)
    if section is None:
        return []
    return [name.strip() for name in section.tasks.split(",") if name.strip()]


def keep_period(config) -> int | None:
    """Steps whose checkpoints checkpoint.keep must not delete; None without a suite."""
    if not tasks(config):
        return None
    return config.checkpoint.every_steps * config.checkpoint_suite.every


def recipe(config):
    """The named recipe with the section's non-default values in its place."""
    section = config.checkpoint_suite
    return glue_recipes.recipe(section.recipe).overridden(
        tuple(section.learning_rates) or None, tuple(section.seeds) or None,
        section.epochs or None, section.batch_size or None, section.max_seq_len or None)


def check_section(config, source: str) -> None:
    """Task names, the recipe and the value types, with no file read (--print-config and
    aot load the config too)."""
    names = tasks(config)
    if not names:
        return
    section = config.checkpoint_suite
    for name in names:
        if name not in glue_data.TASKS:
            raise UserError(f"{source}: {SECTION}.tasks: unknown GLUE task {name!r}; expected "
                            f"some of {','.join(glue_data.TASKS)}")
    if len(set(names)) != len(names):
        raise UserError(f"{source}: {SECTION}.tasks {section.tasks!r}: a task named twice")
    if not section.data:
        raise UserError(f"{source}: {SECTION}.data: expected the GLUE directory the tasks "
                        f"{section.tasks} are read from")
    if section.recipe not in glue_recipes.RECIPES:
        raise UserError(f"{source}: {SECTION}.recipe {section.recipe!r}: expected one of "
                        f"{', '.join(glue_recipes.RECIPES)}")
    for key, kind in (("learning_rates", (int, float)), ("seeds", int)):
        values = section[key]
        if not all(isinstance(value, kind) and not isinstance(value, bool) and value >= 0
                   for value in values):
            raise UserError(f"{source}: {SECTION}.{key}: expected a tuple of non-negative "
                            f"numbers such as (1e-4,) or (0, 1), got {values!r}")


def check_data(config, source: str) -> None:
    """Every split the suite will read, read once before training starts: a missing file, a
    header without the task's columns or a bad label cell ends the command then, not after
    the hours of pre-training the suite waits for."""
    data = config.checkpoint_suite.data if tasks(config) else None
    for name in tasks(config):
        glue_task = glue_data.task(name)
        for split in ("train", *range(len(glue_task.dev_files))):
            try:
                glue_data.read_split(data, glue_task, split)
            except UserError as error:
                raise UserError(f"{source}: {SECTION}.data: {error}") from None
