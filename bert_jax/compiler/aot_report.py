"""Human-readable fit reports and time projections from `bert_jax.compiler.aot.CompileReport`s.

Also the original recipe (Devlin et al., 2019, appendix A.2): BERT-Large, 1,000,000 steps
of 256 sequences, the first 90% at length 128 and the last 10% at length 512; "training
of BERT-Large was performed on 16 Cloud TPUs (64 TPU chips total)", "each pretraining
took 4 days to complete".
"""

import dataclasses

from bert_jax.compiler import aot_collectives, aot_splash
from bert_jax.compiler.aot import COLLECTIVES, CompileReport, format_bytes

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
# The recipe on packed shards (create-data --pack, up to 3 instances a row) trains on the same
# instances in fewer rows: a phase takes its steps / (instances per row) steps of 256 rows.
# Instances per row are the data's: War and Peace with the bert-base-uncased vocabulary
# packs 78,741 instances into 73,267 rows at 128 tokens and 26,168 into 20,784 at 512
# (`bert-jax create-data --pack` prints them; num_instances / num_records of a manifest).
PACKED_OVERRIDES = ("--config.data.max_sequences_per_row=3",)
WAR_AND_PEACE_INSTANCES_PER_ROW = (78_741 / 73_267, 26_168 / 20_784)
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


def answer_line(report: CompileReport) -> str:
    """The answer first: "v4:2x2x1: fits, 12.3 GiB (38%) to spare per device; no step faster
    than 4.1 ms (roofline bound, compute)"."""
    if report.out_of_memory:
        return f"{report.topology}: {fit_line(report)}"
    terms = report.roofline_terms()
    return (f"{report.topology}: {fit_line(report)} per device; no step faster than "
            f"{report.roofline_seconds() * 1e3:.3g} ms (roofline bound, "
            f"{max(terms, key=terms.get)})")


def format_report(report: CompileReport, mfu: float, steps: int) -> str:
    """The fit report of one compilation, and its projected time for `steps` steps."""
    generation = report.generation
    mesh = " ".join(f"{name}={size}" for name, size in report.mesh_shape.items())
    step_seconds = report.step_seconds(mfu)
    compiled_flops = report.compiled_flops_per_device * report.num_devices
    header = [
        answer_line(report),
        f"train step on {report.topology}: {report.num_devices} devices = {report.num_chips} "
        f"{report.device_kind} chips ({report.devices_per_chip} device(s) per chip), mesh {mesh}",
        f"  batch {report.batch_size} x length {report.seq_len} "
        f"({report.max_predictions} predictions); {report.compile_cost}",
        *accumulation_lines(report),
    ]
    measured = [
        f"  memory per device: arguments {format_bytes(report.argument_bytes)}, "
        f"outputs {format_bytes(report.output_bytes)} (of which "
        f"{format_bytes(report.alias_bytes)} reuse donated arguments), "
        f"temporaries {format_bytes(report.temp_bytes)}, code {format_bytes(report.code_bytes)}",
        f"  peak {format_bytes(report.peak_bytes)} of {format_bytes(report.hbm_bytes_per_device)} "
        f"HBM per device: {fit_line(report)}",
        f"  FLOPs per step: {compiled_flops:.3e} compiled (XLA cost analysis, all devices), "
        f"{report.model_flops_per_step:.3e} model (matmuls, 3x forward)"
        + model_floor_note(report),
        *kernel_lines(report),
        f"  bytes accessed per device: {format_bytes(report.bytes_accessed_per_device)} "
        f"(XLA cost analysis: HBM reads and writes)",
        *bytes_table_lines(report),
        *collective_lines(report),
        roofline_line(report),
    ] if not report.out_of_memory else [
        f"  memory: {fit_line(report)}",
        f"  FLOPs per step: {report.model_flops_per_step:.3e} model (matmuls, 3x forward)",
    ]
    projection = (
        f"  MFU projection: at {mfu:.0%} MFU of {generation.peak_bf16_flops_per_chip / 1e12:.0f} "
        f"bf16 TFLOP/s per chip: {step_seconds * 1e3:.3g} ms/step, "
        f"{steps:,} steps in {step_seconds * steps / 3600:.3g} h"
        + (" (if it fitted)" if not report.fits else ""))
    return "\n".join(header + measured + [projection])


STATE_PURPOSES = ("finite check", "gradient clipping", "gradient norm", "optimizer update")


def bytes_table_lines(report: CompileReport) -> list[str]:
    """Where the bytes accessed go, by purpose (bert_jax.compiler.aot_bytes), with the corrected HBM
    count beside XLA's, then the first-principles count."""
    table = report.bytes_by_purpose
    if not table:
        return []
    mib = 2**20
    lines = ["  bytes per device by purpose, MiB (XLA's way: every op's operands and result; "
             "HBM: without on-chip buffers and async-copy bookkeeping):",
             f"    {'purpose':<30}{'ops':>6}{'forward':>10}{'backward':>10}{'step':>10}"
             f"{'total':>10}{'share':>7}{'HBM':>10}"]
    counted = sum(row["forward"] + row["backward"] + row["step"] for row in table.values())
    for purpose, row in table.items():
        total = row["forward"] + row["backward"] + row["step"]
        if not row["ops"]:
            continue
        lines.append(f"    {purpose:<30}{row['ops']:>6}{row['forward'] / mib:>10.1f}"
                     f"{row['backward'] / mib:>10.1f}{row['step'] / mib:>10.1f}"
                     f"{total / mib:>10.1f}{total / max(counted, 1):>7.1%}"
                     f"{row['hbm'] / mib:>10.1f}")
    xla = report.bytes_accessed_per_device
    share = f"{counted / xla if xla else 0:>7.1%}" if report.micro_batches == 1 else f"{'':>7}"
    lines.append(f"    {'total':<30}{sum(r['ops'] for r in table.values()):>6}"
                 f"{'':>30}{counted / mib:>10.1f}{share}"
                 f"{report.hbm_traffic_per_device / mib:>10.1f}  ("
                 + (f"share: of XLA's {xla / mib:.1f} MiB)" if report.micro_batches == 1 else
                    f"XLA's {xla / mib:.1f} MiB holds the accumulation loop's body once)"))
    step = sum(row["hbm"] for purpose, row in table.items() if purpose in STATE_PURPOSES)
    params = report.parameter_bytes_per_device
    if params:
        lines.append(f"  the step's own ops (gradient norm, clipping, update, finite check) move "
                     f"{format_bytes(step)} of HBM: {step / params:.1f}x the parameters' "
                     f"{format_bytes(params)} (read p, g, m, v and write p, m, v: 7x)")
    principles = report.first_principles_bytes
    lines.append(f"  first principles, per device: {format_bytes(sum(principles.values()))} = "
                 + "; ".join(f"{name} {format_bytes(value)}" for name, value in principles.items()))
    return lines


def accumulation_lines(report: CompileReport) -> list[str]:
    """What a step of gradient accumulation is, and how its loop is counted."""
    if report.micro_batches <= 1:
        return []
    rows = report.batch_size // report.micro_batches
    return [f"  gradient accumulation: {report.micro_batches} micro-batches of {rows} rows "
            f"({rows / report.num_chips:g} a chip) in a loop; XLA's FLOPs and bytes "
            f"accessed count its body once, the bytes table, the collectives and the bound "
            f"{report.micro_batches} times (a batch warm-up's shorter steps run the same "
            f"program fewer times round)"]


def model_floor_note(report: CompileReport) -> str:
    """Where XLA's FLOPs (with the kernels') fall short of the model's, the roofline's compute
    term uses the model's; says so and the likeliest reason."""
    if report.compute_flops_per_device == (report.compiled_flops_per_device
                                           + report.kernel_flops_per_device):
        return ""
    loops = ("gradient accumulation's micro-batches" if report.micro_batches > 1
             else "libtpu's windowed matmuls under FSDP")
    return ("; the compute term uses the model's: XLA counts a loop's body once, and this "
            f"program runs matmuls in loops ({loops})")


def kernel_lines(report: CompileReport) -> list[str]:
    """Which attention the program holds, each layer's splash mask as its compiled grid
    says, and how the kernels' FLOPs and bytes are counted."""
    line = f"  attention: {report.attention}"
    if not report.kernel_flops_per_device:
        return [line + " (all its FLOPs in XLA's cost analysis)"]
    source = ("their compiled grids (the attention core on whole blocks" if report.splash_masks
              else "bert_jax.compiler.flops (the attention core")
    lines = [line + f"; its kernels' {report.kernel_flops_per_device * report.num_devices:.3e}"
             f" FLOPs per step from {source}, 3x forward), which XLA's "
             f"cost analysis does not see inside a Pallas call; everything else from XLA's"]
    if report.splash_masks:
        lines.append("  splash masks, read from the compiled kernels: "
                     + aot_splash.describe(report.splash_masks, report.window or None))
    if report.kernel_bytes_per_device:
        lines.append(f"  the splash grids stream {format_bytes(report.kernel_bytes_per_device)}"
                     f" per device from HBM beyond reading each array once (a block of keys and"
                     f" values, or queries and output gradients, per visit): in the memory term")
    return lines


def collective_lines(report: CompileReport) -> list[str]:
    """One line per collective kind in the program: count, bytes sent per device, and what the
    mesh layout needs it for; then any the layout does not call for (a sharding bug)."""
    present = [kind for kind in COLLECTIVES if report.collectives.get(kind)]
    if not present:
        return ["  collectives: none (one device, or nothing to communicate)"]
    lines = ["  collectives in the compiled step (count, bytes sent per device, why):"]
    for kind in present:
        lines.append(f"    {kind:<19}{report.collectives[kind]:>5}"
                     f"{format_bytes(report.collective_bytes.get(kind, 0.0)):>11}  "
                     f"{aot_collectives.why(kind, report.mesh_shape)}")
    lines += [f"    NOT called for by the mesh layout: {line}"
              for line in report.unexplained_collectives]
    return lines


def roofline_line(report: CompileReport) -> str:
    """"roofline bound: 12.3 ms/step (compute 12.3 ms, memory 4.0 ms, interconnect 1.1 ms)"."""
    generation, terms = report.generation, report.roofline_terms()
    count = "corrected" if report.hbm_traffic_per_device else "XLA's"
    rates = {"compute": f"{generation.peak_bf16_flops_per_chip / 1e12:.0f} TFLOP/s",
             "memory": f"{generation.hbm_bytes_per_second_per_chip / 1e9:.0f} GB/s HBM "
                       f"({count} bytes)",
             "interconnect": f"{generation.interconnect_bytes_per_second_per_chip / 1e9:.0f} "
                             f"GB/s ICI"}
    parts = ", ".join(f"{name} {seconds * 1e3:.3g} ms at {rates[name]}"
                      for name, seconds in terms.items())
    bound = max(terms, key=terms.get)
    return (f"  roofline bound: {report.roofline_seconds() * 1e3:.3g} ms/step, {bound}-bound "
            f"({parts} per chip)")


def mesh_layouts(num_devices: int, devices_per_host: int) -> dict[str, tuple[str, ...]]:
    """The layouts `--compare-meshes` compiles, as mesh overrides: pure data parallel, FSDP
    over every device, and mixed (FSDP within a host, data parallel across hosts)."""
    layouts = {"data": ("--config.mesh.data=-1", "--config.mesh.fsdp=1"),
               "fsdp": ("--config.mesh.data=1", "--config.mesh.fsdp=-1")}
    if 1 < devices_per_host < num_devices:
        layouts["mixed"] = ("--config.mesh.data=-1", f"--config.mesh.fsdp={devices_per_host}")
    return {name: (*overrides, "--config.mesh.tensor=1") for name, overrides in layouts.items()}


def fastest(reports: dict[str, CompileReport]) -> str | None:
    """The layout with the lowest roofline bound among those that fit (None if none does)."""
    fitting = {name: report.roofline_seconds() for name, report in reports.items()
               if report.fits}
    return min(fitting, key=fitting.get) if fitting else None


def format_mesh_table(reports: dict[str, CompileReport]) -> str:
    """One line per layout: fit, peak memory, and the roofline terms; the fastest named."""
    lines = [f"  {'layout':<7}{'mesh':<22}{'fits':>5}{'peak':>11}{'compute':>10}{'memory':>10}"
             f"{'network':>10}{'bound':>10}  (ms per step, roofline terms)"]
    for name, report in reports.items():
        mesh = " ".join(f"{axis}={size}" for axis, size in report.mesh_shape.items())
        terms = report.roofline_terms() if not report.out_of_memory else {}
        columns = "".join(f"{terms[term] * 1e3:>10.2f}" if term in terms else f"{'-':>10}"
                          for term in ("compute", "memory", "interconnect"))
        bound = f"{max(terms.values()) * 1e3:>10.2f}" if terms else f"{'-':>10}"
        lines.append(f"  {name:<7}{mesh:<22}{'yes' if report.fits else 'NO':>5}"
                     f"{format_bytes(report.peak_bytes):>11}{columns}{bound}")
    best = fastest(reports)
    lines.append(f"  fastest by the roofline bound: {best}" if best else "  no layout fits")
    return "\n".join(lines)


def recipe_days(reports: list[CompileReport], mfu: float | None,
                instances_per_row: tuple[float, ...] = (1.0, 1.0)) -> float:
    """Days of the whole recipe, one report per phase in ORIGINAL_RECIPE order: projected at
    `mfu`, or at the roofline bound (the fastest the compiled steps can run) for None. Packed
    rows of `instances_per_row` (per phase) need that many times fewer steps."""
    seconds = sum((report.roofline_seconds() if mfu is None else report.step_seconds(mfu))
                  * phase.steps / per_row
                  for report, phase, per_row in zip(reports, ORIGINAL_RECIPE, instances_per_row))
    return seconds / 86400


def format_recipe_summary(results: dict[str, list[CompileReport]], mfu: float) -> str:
    """One line per slice: days for the recipe at the roofline bound and at `mfu`, next to
    the original's 4 days."""
    lines = [f"original recipe (BERT-Large, 1M steps x 256 sequences, 90% at 128 / 10% at "
             f"512): days at the roofline bound (no faster) and projected at {mfu:.0%} MFU",
             f"  {'slice':<9}{'chips':>6}{'fits':>6}{'bound':>8}{'MFU':>8}   vs the original's "
             f"{ORIGINAL_DAYS:g} days on {ORIGINAL_CHIPS} TPU chips"]
    for name, reports in results.items():
        fits = all(report.fits for report in reports)
        bound, days = recipe_days(reports, None), recipe_days(reports, mfu)
        lines.append(f"  {name:<9}{reports[0].num_chips:>6}{'yes' if fits else 'NO':>6}"
                     f"{bound:>8.2f}{days:>8.2f}   {ORIGINAL_DAYS / days:.1f}x the original's "
                     f"speed at {mfu:.0%} MFU")
    return "\n".join(lines)


def format_packed_summary(results: dict[str, list[CompileReport]],
                          packed: dict[str, list[CompileReport]], mfu: float,
                          instances_per_row: tuple[float, ...]) -> str:
    """Unpacked and packed days side by side, one line per slice: the same instances, the
    packed phases in steps / instances per row of their own compiled step."""
    per_row = ", ".join(f"{phase.name.split(':')[0]} {value:.3f}"
                        for phase, value in zip(ORIGINAL_RECIPE, instances_per_row))
    lines = [f"packed rows (create-data --pack, 3 a row; instances per row: {per_row}): days "
             f"for the same instances at the roofline bound and at {mfu:.0%} MFU",
             f"  {'slice':<9}{'unpacked':>17}{'packed':>17}{'speed-up':>10}",
             f"  {'':<9}{'bound':>8}{'MFU':>9}{'bound':>8}{'MFU':>9}"]
    for name, reports in results.items():
        unpacked = recipe_days(reports, None), recipe_days(reports, mfu)
        fits = all(report.fits for report in packed[name])
        days = (recipe_days(packed[name], None, instances_per_row),
                recipe_days(packed[name], mfu, instances_per_row))
        lines.append(f"  {name:<9}{unpacked[0]:>8.2f}{unpacked[1]:>9.2f}{days[0]:>8.2f}"
                     f"{days[1]:>9.2f}{unpacked[1] / days[1]:>9.2f}x"
                     + ("" if fits else "   (packed does NOT fit)"))
    return "\n".join(lines)


def report_from_json(values: dict) -> CompileReport:
    """The CompileReport a `--json` report was written from (its derived numbers dropped, to
    be derived again by the current code)."""
    fields = {field.name for field in dataclasses.fields(CompileReport)}
    report = {name: value for name, value in values.items() if name in fields}
    report["unexplained_collectives"] = tuple(report.get("unexplained_collectives", ()))
    return CompileReport(**report)


def report_to_json(report: CompileReport, mfu: float) -> dict:
    """The report's fields plus the derived numbers, for `--json`."""
    values = dataclasses.asdict(report)
    values.update(num_chips=report.num_chips, peak_bytes=report.peak_bytes,
                  hbm_bytes_per_device=report.hbm_bytes_per_device,
                  fits=report.fits, mfu=mfu,
                  step_seconds=report.step_seconds(mfu),
                  roofline_terms=report.roofline_terms(),
                  roofline_seconds=report.roofline_seconds())
    return values
