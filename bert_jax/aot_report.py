"""Human-readable fit reports and time projections from `bert_jax.aot.CompileReport`s.

Also the original recipe (Devlin et al., 2019, appendix A.2): BERT-Large, 1,000,000 steps
of 256 sequences, the first 90% at length 128 and the last 10% at length 512; "training
of BERT-Large was performed on 16 Cloud TPUs (64 TPU chips total)", "each pretraining
took 4 days to complete".
"""

import dataclasses

from bert_jax.aot import COLLECTIVES, CompileReport, format_bytes

DEFAULT_MFU = 0.5
ORIGINAL_DAYS = 4.0  # the paper's BERT-Large pre-training time on 64 TPU chips
ORIGINAL_CHIPS = 64


@dataclasses.dataclass(frozen=True)
class RecipePhase:
    name: str
    steps: int
    overrides: tuple[str, ...]  # --config.key=value applied on top of the user's config


# max_predictions 20 at 128 and 80 at 512, as the original's create_pretraining_data runs.
ORIGINAL_RECIPE = (
    RecipePhase("phase 1: 900,000 steps at length 128", 900_000,
                ("--config.batch_size=256", "--config.data.seq_len=128",
                 "--config.data.max_predictions=20", "--config.num_train_steps=900000",
                 "--config.schedule_steps=1000000")),
    RecipePhase("phase 2: 100,000 steps at length 512", 100_000,
                ("--config.batch_size=256", "--config.data.seq_len=512",
                 "--config.data.max_predictions=80", "--config.num_train_steps=1000000",
                 "--config.schedule_steps=1000000")),
)
# The slices the recipe is projected on: (name, libtpu topology, chip config).
RECIPE_TARGETS = (("v3-64", "v3:4x8", None), ("v4-64", "v4:4x4x2", "megacore"),
                  ("v5e-256", "v5e:16x16", None))


def fit_line(report: CompileReport) -> str:
    """"fits, 12.3 GiB (38%) to spare" or "does NOT fit: 4.1 GiB (26%) over"."""
    if report.out_of_memory:
        return f"does NOT fit: the TPU compiler refused it: {report.out_of_memory}"
    hbm, peak = report.hbm_bytes_per_device, report.peak_bytes
    if peak <= hbm:
        return f"fits, {format_bytes(hbm - peak)} ({(hbm - peak) / hbm:.0%}) to spare"
    return f"does NOT fit: {format_bytes(peak - hbm)} ({(peak - hbm) / hbm:.0%}) over"


def format_report(report: CompileReport, mfu: float, steps: int) -> str:
    """The fit report of one compilation, and its projected time for `steps` steps."""
    generation = report.generation
    mesh = " ".join(f"{name}={size}" for name, size in report.mesh_shape.items())
    step_seconds = report.step_seconds(mfu)
    compiled_flops = report.compiled_flops_per_device * report.num_devices
    collectives = ", ".join(f"{name} {report.collectives.get(name, 0)}" for name in COLLECTIVES)
    header = [
        f"train step on {report.topology}: {report.num_devices} devices = {report.num_chips} "
        f"{report.device_kind} chips ({report.devices_per_chip} device(s) per chip), mesh {mesh}",
        f"  batch {report.batch_size} x length {report.seq_len} "
        f"({report.max_predictions} predictions); compiled in {report.compile_seconds:.1f} s",
    ]
    measured = [
        f"  memory per device: arguments {format_bytes(report.argument_bytes)}, "
        f"outputs {format_bytes(report.output_bytes)} (of which "
        f"{format_bytes(report.alias_bytes)} reuse donated arguments), "
        f"temporaries {format_bytes(report.temp_bytes)}, code {format_bytes(report.code_bytes)}",
        f"  peak {format_bytes(report.peak_bytes)} of {format_bytes(report.hbm_bytes_per_device)} "
        f"HBM per device: {fit_line(report)}",
        f"  FLOPs per step: {compiled_flops:.3e} compiled (XLA cost analysis, all devices), "
        f"{report.model_flops_per_step:.3e} model (matmuls, 3x forward)",
        f"  collectives in the HLO: {collectives}",
    ] if not report.out_of_memory else [
        f"  memory: {fit_line(report)}",
        f"  FLOPs per step: {report.model_flops_per_step:.3e} model (matmuls, 3x forward)",
    ]
    projection = (
        f"  projected at {mfu:.0%} MFU of {generation.peak_bf16_flops_per_chip / 1e12:.0f} "
        f"bf16 TFLOP/s per chip: {step_seconds * 1e3:.3g} ms/step, "
        f"{steps:,} steps in {step_seconds * steps / 3600:.3g} h"
        + (" (if it fitted)" if not report.fits else ""))
    return "\n".join(header + measured + [projection])


def recipe_days(reports: list[CompileReport], mfu: float) -> float:
    """Projected days of the whole recipe, one report per phase in ORIGINAL_RECIPE order."""
    seconds = sum(report.step_seconds(mfu) * phase.steps
                  for report, phase in zip(reports, ORIGINAL_RECIPE))
    return seconds / 86400


def format_recipe_summary(results: dict[str, list[CompileReport]], mfu: float) -> str:
    """One line per slice: projected days for the recipe next to the original's 4 days."""
    lines = [f"original recipe (BERT-Large, 1M steps x 256 sequences, 90% at 128 / 10% at "
             f"512), projected at {mfu:.0%} MFU:",
             f"  {'slice':<9}{'chips':>6}{'fits':>6}{'days':>8}   vs the original's "
             f"{ORIGINAL_DAYS:g} days on {ORIGINAL_CHIPS} TPU chips"]
    for name, reports in results.items():
        fits = all(report.fits for report in reports)
        days = recipe_days(reports, mfu)
        lines.append(f"  {name:<9}{reports[0].num_chips:>6}{'yes' if fits else 'NO':>6}"
                     f"{days:>8.2f}   {ORIGINAL_DAYS / days:.1f}x the original's speed")
    return "\n".join(lines)


def report_to_json(report: CompileReport, mfu: float) -> dict:
    """The report's fields plus the derived numbers, for `--json`."""
    values = dataclasses.asdict(report)
    values.update(num_chips=report.num_chips, peak_bytes=report.peak_bytes,
                  hbm_bytes_per_device=report.hbm_bytes_per_device,
                  fits=report.fits, mfu=mfu,
                  step_seconds=report.step_seconds(mfu))
    return values
