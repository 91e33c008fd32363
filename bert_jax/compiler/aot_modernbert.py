"""ModernBERT's pre-training recipe projected on TPU pods from compiled stand-ins
(`bert-jax aot --config configs/modernbert_base.py --recipe modernbert`).

The recipe (bert_jax/run_config/modernbert_recipe.py, Warner et al., 2024): 1.7T tokens at
1,024 tokens a row, 4,608 rows a step after a batch warm-up from 768; then 250B and 50B
tokens at 8,192, 576 rows a step. Phase 3 runs phase 2's step (the same program: only the
learning rate differs), so two compiles per pod give all three phases. The paper's base
model took 191 hours on 8 H100s for about 2T tokens.

Each pod is 64 chips (v4-128, v5e-64, v5p-128): the recipe's 768-row micro-batch and its
576-row long step both divide evenly over 64, so every chip holds whole rows (72 a step in
phase 1, 9 in phase 2), which 256 chips could not. A pod is compiled as an 8-chip stand-in
holding the pod's rows per chip, in micro-batches of `rows` a chip (gradient accumulation:
72 / rows or 9 / rows of them a step), and its bound carried to the pod
(bert_jax.compiler.aot_pod). A phase's time is its tokens over the tokens a step takes at
the step's bound (or at an MFU): the warm-up's shorter steps run the same program fewer
times round, so a token costs what it costs in a full step (the update aside).

With `--topology T` the phases are compiled on T itself, the slice the user will train on,
at the recipe's whole step (4,608 and 576 rows, so T's chips must divide 576), and each
phase's time is T's own bound: the same table, with T's chips for the pod's.
"""

import dataclasses
import math

from bert_jax.compiler.aot import CompileReport
from bert_jax.compiler.aot_pod import pod_terms
from bert_jax.errors import UserError
from bert_jax.run_config import modernbert_recipe as recipe

STAND_IN_CHIPS = 8
POD_CHIPS = 64
# (pod, stand-in topology, chip config); each 8 chips, one device a chip.
TARGETS = (("v4-128", "v4:2x2x2", "megacore"), ("v5e-64", "v5e:2x4", None),
           ("v5p-128", "v5p:2x2x2", None))
# The paper (arXiv 2412.13663): ModernBERT-base in 191 hours on 8 H100s, ~2T tokens.
PAPER_HOURS, PAPER_GPUS = 191.0, 8
# Rows a chip per micro-batch, by (model size, pod), phase 1 then phase 2: counts that divide
# a chip's rows a step (72 and 9) and fitted when compiled (README, "ModernBERT before
# renting", with the HBM they left; not searched for the most: `--rows-per-chip` tries others).
DEFAULT_ROWS = {("base", "v4-128"): (12, 3), ("base", "v5e-64"): (6, 1),
                ("base", "v5p-128"): (12, 9), ("large", "v4-128"): (6, 1),
                ("large", "v5e-64"): (3, 1), ("large", "v5p-128"): (12, 3)}


@dataclasses.dataclass(frozen=True)
class Phase:
    name: str  # "1", "2" or "3": the config's argument
    tokens: float
    seq_len: int
    rows_per_step: int  # over the whole pod

    @property
    def rows_per_chip(self) -> int:
        return self.rows_per_step // POD_CHIPS

    @property
    def steps(self) -> float:
        return self.tokens / (self.rows_per_step * self.seq_len)


PHASES = tuple(Phase(name, recipe.TOKENS[name], length, rows) for name, length, rows in (
    ("1", recipe.PHASE_1_ROW, recipe.BATCH_ROWS),
    ("2", recipe.LONG_ROW, recipe.BATCH_ROWS * recipe.PHASE_1_ROW // recipe.LONG_ROW),
    ("3", recipe.LONG_ROW, recipe.BATCH_ROWS * recipe.PHASE_1_ROW // recipe.LONG_ROW)))
COMPILED_PHASES = PHASES[:2]  # phase 3 runs phase 2's program
# Chip counts that hold whole rows in every phase's step: the divisors of 576.
DIVIDING_CHIPS = tuple(chips for chips in range(1, math.gcd(*(
    phase.rows_per_step for phase in PHASES)) + 1) if all(
    phase.rows_per_step % chips == 0 for phase in PHASES))


def check_slice(topology: str, chips: int, devices: int) -> None:
    """UserError unless every phase's rows a step split into whole rows over `topology`'s
    chips (and devices, where a chip is two)."""
    if all(phase.rows_per_step % devices == 0 for phase in PHASES):
        return
    steps = " and ".join(f"{phase.rows_per_step:,}" for phase in COMPILED_PHASES)
    parts = f"{chips} chips" + (f" ({devices} devices)" if devices != chips else "")
    raise UserError(f"--topology {topology}: {parts} do not split the recipe's steps of {steps} "
                    f"rows into whole rows a chip; chip counts that do: "
                    + ", ".join(map(str, DIVIDING_CHIPS)))


def default_rows(size: str | None, topology: str) -> tuple[int, int] | None:
    """The rows a chip per micro-batch that fitted the stand-in of `topology`'s generation
    (DEFAULT_ROWS), a first guess for a search on it; None for another generation or model."""
    generation = topology.split(":")[0]
    return next((DEFAULT_ROWS[size, pod] for pod, stand_in, _ in TARGETS
                 if stand_in.split(":")[0] == generation and (size, pod) in DEFAULT_ROWS), None)


def phase_overrides(phase: Phase, rows: int) -> tuple[str, ...]:
    """The stand-in's overrides of a phase's config: the pod's rows a chip in micro-batches
    of `rows` a chip; phase 1's warm-up starts at the pod's 768 rows' share."""
    if phase.rows_per_chip % rows:
        raise ValueError(f"{rows} rows a chip do not divide phase {phase.name}'s "
                         f"{phase.rows_per_chip}")
    overrides = (f"--config.batch_size={phase.rows_per_chip * STAND_IN_CHIPS}",
                 f"--config.grad_accum_steps={phase.rows_per_chip // rows}")
    if phase.name == "1":
        start = recipe.MICRO_BATCH_ROWS // POD_CHIPS * STAND_IN_CHIPS
        overrides += (f"--config.batch_warmup.start_batch_size={start}",)
    return overrides


def slice_terms(report: CompileReport, chips: int) -> dict:
    """The roofline terms on `chips` chips: the report's own where it was compiled on them,
    else its stand-in's carried there (bert_jax.compiler.aot_pod)."""
    if chips == report.num_chips:
        return report.roofline_terms()
    return pod_terms(report, chips)


def micro_batch_rows(report: CompileReport) -> int:
    """Rows a chip per micro-batch."""
    return report.batch_size // report.micro_batches // report.num_chips


def phase_seconds(report: CompileReport, phase: Phase, mfu: float | None,
                  chips: int = POD_CHIPS) -> float:
    """Seconds of `phase` on `chips` chips (the pod's by default): its steps at their
    roofline bound (mfu None) or at `mfu` of their peak."""
    if mfu is None:
        step = max(slice_terms(report, chips).values())
    else:
        step = report.step_seconds(mfu)  # the model's FLOPs a chip: the same on the pod
    return phase.steps * step


def summary_rows(reports: dict[str, list[CompileReport]], mfu: float,
                 chips: dict[str, int] | None = None) -> list[dict]:
    """One row per (pod, phase) and one total per pod: rows a chip, fit, the pod's bound and
    its terms, days and chip-hours at the bound and at `mfu`. `chips`: each pod's chips
    (default: POD_CHIPS each; a slice compiled on itself has its own)."""
    rows = []
    for pod, compiled in reports.items():
        pod_chips = (chips or {}).get(pod, POD_CHIPS)
        totals = {"bound": 0.0, "mfu": 0.0}
        for phase in PHASES:
            report = compiled[min(int(phase.name), 2) - 1]
            terms = slice_terms(report, pod_chips)
            seconds = {"bound": phase_seconds(report, phase, None, pod_chips),
                       "mfu": phase_seconds(report, phase, mfu, pod_chips)}
            totals = {key: totals[key] + value for key, value in seconds.items()}
            rows.append(dict(pod=pod, phase=phase.name, report=report, terms=terms,
                             seconds=seconds, chips=pod_chips))
        rows.append(dict(pod=pod, phase="total", seconds=totals, chips=pod_chips,
                         fits=all(report.fits for report in compiled)))
    return rows


def answer_line(model: str, rows: list[dict], mfu: float) -> str:
    """"ModernBERT-base: fits v4-128, v5e-64, v5p-128; fastest v5p-128: ..." from the totals."""
    totals = [row for row in rows if row["phase"] == "total"]
    fitting = [row for row in totals if row["fits"]]
    fits = ", ".join(row["pod"] for row in fitting) or "none of the pods"
    missing = [row["pod"] for row in totals if not row["fits"]]
    line = f"ModernBERT-{model}, 2.0T tokens: fits {fits}" + (
        f" (NOT {', '.join(missing)})" if missing else "")
    if not fitting:
        return line
    best = min(fitting, key=lambda row: row["seconds"]["bound"])
    bound, at_mfu = best["seconds"]["bound"], best["seconds"]["mfu"]
    fastest = f"; fastest {best['pod']}:" if len(totals) > 1 else ","
    return (f"{line}{fastest} no sooner than {bound / 86400:.2f} days "
            f"({bound / 3600 * best['chips']:,.0f} chip-hours), {at_mfu / 86400:.2f} days at "
            f"{mfu:.0%} MFU; the paper: {PAPER_HOURS / 24:.1f} days on {PAPER_GPUS} H100s")


def _rows_text(row: dict) -> str:
    """"12 x 6 of 1024": rows a chip per micro-batch, micro-batches, tokens a row."""
    report = row["report"]
    return f"{micro_batch_rows(report)} x {report.micro_batches} of {report.seq_len}"


def format_summary(model: str, reports: dict[str, list[CompileReport]], mfu: float,
                   chips: dict[str, int] | None = None) -> str:
    """The answer line, the projection table, then the paper's figure beside it. `chips`
    (summary_rows): slices compiled on themselves, named by their topology, for the pods'
    stand-ins."""
    rows = summary_rows(reports, mfu, chips)
    where = (f"on {POD_CHIPS}-chip pods (each compiled as an {STAND_IN_CHIPS}-chip stand-in at "
             "the pod's rows a chip)") if chips is None else "on " + ", ".join(
        f"{name} ({count} chips, compiled on it)" for name, count in chips.items())
    width = max(9, *(len(name) + 1 for name in reports))  # the pods' names fit 9
    # "12 x 6 of 1024" on a pod; a small slice's step is many more micro-batches.
    rows_width = max(16, *(len(_rows_text(row)) + 1 for row in rows if "report" in row))
    lines = [answer_line(model, rows, mfu),
             f"ModernBERT-{model}, the paper's recipe {where}: days and chip-hours "
             f"at the roofline bound (no faster) and at {mfu:.0%} MFU",
             f"  {'pod' if chips is None else 'slice':<{width}}{'phase':<7}{'tokens':>7}"
             f"{'rows a chip':>{rows_width}}{'peak HBM':>11}{'fits':>5}"
             f"{'bound ms/step (compute/memory/ICI)':>38}{'days':>7}{'chip-h':>9}"
             f"{'days@MFU':>9}{'chip-h':>9}"]
    for row in rows:
        bound, at_mfu = row["seconds"]["bound"], row["seconds"]["mfu"]
        hours = (bound / 3600 * row["chips"], at_mfu / 3600 * row["chips"])
        days = f"{bound / 86400:>7.2f}{hours[0]:>9,.0f}{at_mfu / 86400:>9.2f}{hours[1]:>9,.0f}"
        if row["phase"] == "total":
            total = sum(phase.tokens for phase in PHASES) / 1e12
            lines.append(f"  {row['pod']:<{width}}{'total':<7}{f'{total:.1f}T':>7}"
                         f"{'':>{rows_width}}"
                         f"{'':>11}{'yes' if row['fits'] else 'NO':>5}{'':>38}{days}")
            continue
        report, terms = row["report"], row["terms"]
        phase = PHASES[int(row["phase"]) - 1]
        split = "/".join(f"{terms.get(key, 0) * 1e3:.0f}"
                         for key in ("compute", "memory", "interconnect"))
        bound_ms = f"{max(terms.values()) * 1e3:,.0f} ({split})"
        lines.append(f"  {row['pod']:<{width}}{row['phase']:<7}{phase.tokens / 1e9:>6,.0f}B"
                     f"{_rows_text(row):>{rows_width}}"
                     f"{report.peak_bytes / 2**30:>9.2f} G{'yes' if report.fits else 'NO':>5}"
                     f"{bound_ms:>38}{days}")
    paper = PAPER_HOURS * PAPER_GPUS
    lines.append(f"  the paper: ModernBERT-base in {PAPER_HOURS:g} hours on {PAPER_GPUS} H100s "
                 f"({paper:,.0f} GPU-hours, {PAPER_HOURS / 24:.1f} days) for ~2T tokens")
    return "\n".join(lines)
