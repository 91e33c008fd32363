"""A published pre-training recipe of ModernBERT's architecture as one phased run config
(tasks/phases.py): each phase's token budget, masking rate, learning-rate shape, RoPE base
and data mixture, as the recipe's own training files set them (run_config/mmbert_recipe.py,
run_config/ettin_recipe.py cite theirs).

The recipes ran each phase as its own Composer run (`reset_time`): a phase's learning rate
warms up, holds, or decays over that phase from its own peak to `final_ratio` x the peak
(Composer's alpha_f). Here a phase is a phase of one run in one work directory: the step
count and the optimizer state carry on, and the phase's schedule counts from the step it
starts at (optimizer.schedule_start_step).

Steps from tokens: every step is 4,608 rows of 1,024 tokens (4.72M tokens) as the files'
global batch of 4,608 sequences is in phase 1; a long phase packs the same tokens into
rows of its length (576 of 8,192), as run_config/modernbert_recipe.py does for ModernBERT's.
Phase 1's batch warms up from 768 rows to 4,608 over `batch_warmup_tokens`, 768 being a
whole number of the files' per-device micro-batches (their device count is not published).
Each source's shards are read from `NAME_LENGTH` (create-data --objective mlm
--max-seq-len LENGTH --output-dir NAME_LENGTH) under `data.sources_root`.
"""

import dataclasses
import math

from bert_jax.errors import UserError
from bert_jax.run_config import base_config, pod_config

PHASE_1_ROW = 1024
BATCH_ROWS = 4608  # the files' global batch: 4.72M tokens a step at 1,024 a row
START_ROWS = 768  # phase 1's batch warm-up starts here (ModernBERT's), the accumulation unit


@dataclasses.dataclass(frozen=True)
class Phase:
    name: str
    tokens: float
    seq_len: int
    masking_rate: float
    learning_rate: float  # this phase's peak
    rope_theta: float  # global and local layers alike in these recipes
    sources: tuple[str, ...]  # the sources this phase reads
    mixture_tau: float = 0.0  # > 0: p_i proportional to rows_i^tau over the sources
    warmup_tokens: float = 0.0  # the learning rate's warm-up from 0
    decay_shape: str = ""  # "": the peak held after the warm-up; else a decay over the phase
    final_ratio: float = 0.0  # the decay ends at this x the peak (Composer's alpha_f)
    batch_warmup_tokens: float = 0.0  # the batch grows from START_ROWS over these


@dataclasses.dataclass(frozen=True)
class Recipe:
    name: str
    model_preset: str
    phases: tuple[Phase, ...]
    beta2: float
    epsilon: float
    weight_decay: float
    batch_rows: int = BATCH_ROWS  # rows of phase_1_row tokens a step
    phase_1_row: int = PHASE_1_ROW  # tokens a row that fix the tokens a step
    start_rows: int = START_ROWS
    demo: bool = False  # a laptop run: base_config (float32, CPU intervals), not pod_config

    def phase_names(self) -> tuple[str, ...]:
        return tuple(phase.name for phase in self.phases)


def _rows(recipe: Recipe, phase: Phase) -> int:
    """Rows a step at the phase's length: the same tokens a step in every phase."""
    step_tokens = recipe.batch_rows * recipe.phase_1_row
    rows, left = divmod(step_tokens, phase.seq_len)
    if left or (phase.batch_warmup_tokens and rows % recipe.start_rows):
        raise ValueError(f"{recipe.name} phase {phase.name}: {phase.seq_len} tokens a row do "
                         f"not divide a step's {step_tokens} tokens into whole micro-batches")
    return rows


def token_steps(tokens: float, step_tokens: int, batch_warmup_tokens: float = 0.0,
                start_tokens: int = 0) -> tuple[int, int]:
    """(optimizer steps that train `tokens` at `step_tokens` a step, of them the batch
    warm-up's). The warm-up grows linearly over `batch_warmup_tokens` from one micro-batch
    of `start_tokens` to a whole step, so a warm-up step holds (1 + step_tokens /
    start_tokens) / 2 micro-batches on average (modernbert_recipe's phase 1 too)."""
    if not batch_warmup_tokens:
        return math.ceil(tokens / step_tokens), 0
    micro_batches = step_tokens // start_tokens
    warmup = math.ceil(batch_warmup_tokens / (start_tokens * (1 + micro_batches) / 2))
    steady = math.ceil((tokens - batch_warmup_tokens) / step_tokens)
    return warmup + steady, warmup


def phase_steps(recipe: Recipe, phase: Phase) -> tuple[int, int]:
    """(optimizer steps of the phase, of them the batch warm-up's, from start_rows a step)."""
    return token_steps(phase.tokens, _rows(recipe, phase) * phase.seq_len,
                       phase.batch_warmup_tokens, recipe.start_rows * phase.seq_len)


def phase_ends(recipe: Recipe) -> dict[str, int]:
    """{phase: the step it ends at}: the steps of the phases before it and its own."""
    ends, step = {}, 0
    for phase in recipe.phases:
        step += phase_steps(recipe, phase)[0]
        ends[phase.name] = step
    return ends


def phase_config(recipe: Recipe, name: str, sources_root: str = ""):
    """The run config of `recipe`'s phase `name`."""
    names = recipe.phase_names()
    if name not in names:
        raise UserError(f"{recipe.name}: no phase {name!r}; its phases are {', '.join(names)}")
    index = names.index(name)
    phase = recipe.phases[index]
    ends = phase_ends(recipe)
    steps, batch_warmup_steps = phase_steps(recipe, phase)
    config = (base_config if recipe.demo else pod_config)(recipe.model_preset)
    config.objective = "mlm"
    config.num_train_steps = ends[name]  # the step this phase ends at
    config.data.seq_len = phase.seq_len
    config.data.masking_rate = phase.masking_rate
    config.data.mixture_tau = phase.mixture_tau
    config.data.sources_root = sources_root
    for source in phase.sources:
        config.data.sources[source] = dict(files=f"{source}_{phase.seq_len}")
    config.model.global_rope_theta = config.model.local_rope_theta = phase.rope_theta
    config.batch_size = _rows(recipe, phase)
    if phase.batch_warmup_tokens:
        config.grad_accum_steps = config.batch_size // recipe.start_rows
        config.batch_warmup.steps = batch_warmup_steps
        config.batch_warmup.start_batch_size = recipe.start_rows
    optimizer = config.optimizer
    optimizer.name, optimizer.learning_rate = "stable_adamw", phase.learning_rate
    optimizer.beta1, optimizer.beta2 = 0.9, recipe.beta2
    optimizer.epsilon, optimizer.weight_decay = recipe.epsilon, recipe.weight_decay
    optimizer.decouple_learning_rate = True  # Composer's decoupled_stableadamw
    optimizer.clip_norm = 0.0  # StableAdamW clips each tensor's update itself
    optimizer.schedule = "wsd"
    optimizer.schedule_start_step = ends[names[index - 1]] if index else 0
    optimizer.warmup_steps = _warmup_steps(phase, steps, batch_warmup_steps)
    optimizer.decay_steps = steps if phase.decay_shape else 0
    optimizer.decay_shape = phase.decay_shape or "1-sqrt"  # unused without decay_steps
    optimizer.final_learning_rate_ratio = phase.final_ratio
    return config


def _warmup_steps(phase: Phase, steps: int, batch_warmup_steps: int) -> int:
    """The learning-rate warm-up's steps: its tokens' share of the batch warm-up's steps
    (modernbert_recipe's reckoning), or of the phase's when there is no batch warm-up."""
    if not phase.warmup_tokens:
        return 0
    if phase.batch_warmup_tokens:
        return math.ceil(batch_warmup_steps * phase.warmup_tokens / phase.batch_warmup_tokens)
    return math.ceil(steps * phase.warmup_tokens / phase.tokens)


# Laptop size: 32 rows of 64 tokens a step, then 16 of 128; 40, 20 and 20 steps (10 of batch
# warm-up from 8 rows, 4 of learning-rate warm-up): the keywords of a recipe's phases.
DEMO_SCALE = dict(pretrain=74_240, extension=40_960, decay=40_960, short=64, long=128,
                  warmup_tokens=5_120, batch_warmup_tokens=12_800)


def full_and_demo(name: str, demo_name: str, make_phases, full_scale: dict,
                  **optimizer) -> tuple[Recipe, Recipe]:
    """A recipe at its published size (ModernBERT-base's widths) and at laptop size (a
    tiny ModernBERT), its phases from `make_phases(**scale)`: each phase's tokens
    (pretrain, extension, decay), the row lengths (short, long) and phase 1's warm-ups."""
    return (Recipe(name, "modernbert-base", make_phases(**full_scale), **optimizer),
            Recipe(demo_name, "modernbert-tiny", make_phases(**DEMO_SCALE), **optimizer,
                   batch_rows=32, phase_1_row=64, start_rows=8, demo=True))


def demo_config(recipe: Recipe, name: str):
    """A laptop-size phase: shards under shards/, the docs' word-piece vocabulary, and a
    checkpoint and a log line every 10 steps."""
    config = phase_config(recipe, name, sources_root="shards")
    config.data.vocab_path = "vocab/vocab.txt"
    config.checkpoint.every_steps = 10
    config.log_every_steps = 10
    return config
