"""The `bert-jax aot` report of a GPU target: the answer first, then the kernel census.

A GPU runs a step's kernels one after another on one stream (collectives on another), so
no step is faster than the sum, over its kernels, of each kernel's FLOPs at the card's peak
or its bytes at the card's bandwidth, whichever is longer (the datasheet bound, summed here
per kind, which is lower still). The rates one H100 reached on this step's kernels make a
second, closer bound. BERT-Base bf16 32 x 512, profiled on an H100 80GB HBM3 (issue 43:
../shared/measurements/h100/call6_prof2_fixed_base512.log, the code of main at 42b13ae with
attention_kernels_measurement.patch) and compiled by this census for the same card, ran
its cuBLAS matmuls at 707 TFLOP/s (8.44 TFLOP in 11.93 ms, 71% of the datasheet's 989),
cuDNN's fused attention at 254 TFLOP/s (1.08 TFLOP as counted here in 4.26 ms) and its
elementwise and reduction kernels at 2.42 TB/s (39.49 GB as counted here in 8.58 + 7.72
ms, 72% of 3.35 TB/s). The census counted 1,758 kernels, 1,782 with the 24 helper kernels
of cuDNN's backward calls it does not see, against the profile's 1,862 (-4%). Other cards
are held to the same fractions of their own datasheets. Both are bounds on the kernels
the compiler made, not predictions: launch gaps, cuDNN's helper kernels and anything
slower than those rates add to them.
"""

from bert_jax.compiler import aot_hlo, gpu_census
from bert_jax.compiler.aot import CompileReport, format_bytes
from bert_jax.compiler.aot_report import collective_lines, fit_line
from bert_jax.models.layers import banded_attention

# The H100's measured rates as fractions of its datasheet (module docstring).
MEASURED_MATMUL = 707e12 / 989.4e12
MEASURED_MEMORY_BOUND = 39.49e9 / 16.30e-3 / 3352.32e9
MEASURED_CUDNN = 254e12 / 989.4e12
JAX_MEMORY_FRACTION = 0.75  # jax preallocates 75% of a GPU's memory unless told otherwise


def kind_seconds(report: CompileReport, measured: bool) -> dict[str, float]:
    """Seconds each kernel kind needs at least: at the datasheet's peaks, or (`measured`) at
    the H100's measured rates for matmuls, cuDNN attention and memory-bound kernels (a
    Pallas kernel, never timed, at the datasheet's either way)."""
    card = report.generation
    flops_rate, bytes_rate = card.peak_bf16_flops_per_chip, card.hbm_bytes_per_second_per_chip
    seconds = {}
    for kind, row in report.kernels_by_kind.items():
        if kind == gpu_census.COLLECTIVES:
            continue  # on their own stream: the interconnect term
        flops_share = {gpu_census.MATMUL: MEASURED_MATMUL,
                       gpu_census.CUDNN: MEASURED_CUDNN}.get(kind, 1.0) if measured else 1.0
        bytes_share = MEASURED_MEMORY_BOUND if measured and kind in gpu_census.MEMORY_BOUND else 1.0
        seconds[kind] = max(row["flops"] / (flops_rate * flops_share),
                            row["bytes"] / (bytes_rate * bytes_share))
    return seconds


def interconnect_seconds(report: CompileReport) -> float:
    return (report.collective_bytes_per_device
            / report.generation.interconnect_bytes_per_second_per_chip)


def bound_seconds(report: CompileReport, measured: bool) -> float:
    """No step is faster: the kernels' sum, or the collectives on their own stream."""
    return max(sum(kind_seconds(report, measured).values()), interconnect_seconds(report))


def answer_line(report: CompileReport) -> str:
    """"train step on 1 x NVIDIA H100 80GB HBM3: fits, 70.1 GiB (88%) to spare per GPU; no
    step faster than 31.2 ms at the H100's measured rates (20.1 ms at the datasheet's)"."""
    return (f"train step on {report.num_devices} x {report.device_kind}: "
            f"{fit_line(report)} per GPU; no step faster than "
            f"{bound_seconds(report, True) * 1e3:.3g} ms at an H100's measured rates "
            f"({bound_seconds(report, False) * 1e3:.3g} ms at the datasheet's)")


def census_lines(report: CompileReport) -> list[str]:
    """The kernels by kind: count, bytes, FLOPs and each kind's time at both rates."""
    datasheet, measured = kind_seconds(report, False), kind_seconds(report, True)
    table = report.kernels_by_kind
    lines = [f"  kernels a step: {sum(row['kernels'] for row in table.values()):,} (bytes: "
             "every kernel's operands and results; an operand read through slices or "
             "gathers counts what they take)",
             f"    {'kind':<13}{'kernels':>8}{'GB':>9}{'TFLOP':>9}{'datasheet ms':>14}"
             f"{'measured-rate ms':>18}"]
    for kind, row in table.items():
        if not row["kernels"]:
            continue
        times = (f"{datasheet[kind] * 1e3:>14.2f}{measured[kind] * 1e3:>18.2f}"
                 if kind in datasheet else f"{'(own stream)':>14}")
        lines.append(f"    {kind:<13}{row['kernels']:>8}{row['bytes'] / 1e9:>9.2f}"
                     f"{row['flops'] / 1e12:>9.3f}{times}")
    memory_bound = sum(table[kind]["bytes"] for kind in gpu_census.MEMORY_BOUND)
    lines.append(f"    {'total':<13}{sum(r['kernels'] for r in table.values()):>8}"
                 f"{sum(r['bytes'] for r in table.values()) / 1e9:>9.2f}"
                 f"{sum(r['flops'] for r in table.values()) / 1e12:>9.3f}"
                 f"{sum(datasheet.values()) * 1e3:>14.2f}{sum(measured.values()) * 1e3:>18.2f}")
    lines.append(f"    elementwise + reduction: {memory_bound / 1e9:.2f} GB a step")
    layers = report.kernels_by_layer
    if layers:
        middle = sorted(layers, key=int)[len(layers) // 2]
        in_layers = sum(row["kernels"] for row in layers.values())
        lines.append(f"    an encoder layer (layer {middle} of {len(layers)}): "
                     f"{layers[middle]['kernels']} kernels, "
                     f"{layers[middle]['memory_bound'] / 1e9:.2f} GB elementwise + reduction; "
                     f"outside the layers' scopes (embeddings, heads, loss, gradient norm, "
                     f"update): {sum(r['kernels'] for r in table.values()) - in_layers} kernels")
    return lines


def purpose_lines(report: CompileReport) -> list[str]:
    """Kernels and bytes by what they are for (aot_bytes' scopes), memory-bound bytes apart."""
    lines = ["  bytes by purpose, GB a step (memory-bound: elementwise and reduction kernels):",
             f"    {'purpose':<30}{'kernels':>8}{'forward':>9}{'backward':>9}{'step':>8}"
             f"{'total':>8}{'memory-bound':>14}"]
    for purpose, row in report.kernels_by_purpose.items():
        total = row["forward"] + row["backward"] + row["step"]
        lines.append(f"    {purpose:<30}{row['kernels']:>8}{row['forward'] / 1e9:>9.2f}"
                     f"{row['backward'] / 1e9:>9.2f}{row['step'] / 1e9:>8.2f}"
                     f"{total / 1e9:>8.2f}{row['memory_bound'] / 1e9:>14.2f}")
    return lines


def memory_line(report: CompileReport) -> str:
    pool = JAX_MEMORY_FRACTION * report.hbm_bytes_per_device
    note = ("" if report.peak_bytes <= pool else
            f"; more than jax's default pool ({JAX_MEMORY_FRACTION:.0%}, "
            f"{format_bytes(pool)}): set XLA_PYTHON_CLIENT_MEM_FRACTION")
    return (f"  memory per GPU: arguments {format_bytes(report.argument_bytes)}, outputs "
            f"{format_bytes(report.output_bytes)} (of which {format_bytes(report.alias_bytes)} "
            f"reuse donated arguments), temporaries {format_bytes(report.temp_bytes)}: peak "
            f"{format_bytes(report.peak_bytes)} of {format_bytes(report.hbm_bytes_per_device)}"
            + note)


def attention_text(report: CompileReport) -> str:
    """The attention the program holds and, where cuDNN runs only some of the layers (a
    windowed model's global ones: cuDNN's window is one-sided), how many and what the others
    run."""
    calls = report.kernels_by_kind.get(gpu_census.CUDNN, {}).get("kernels", 0)
    on_cudnn = calls // (2 * report.micro_batches)  # forward and backward, each micro-batch
    if report.attention != aot_hlo.CUDNN or not 0 < on_cudnn < report.num_layers:
        return report.attention
    banded = banded_attention.band_block(report.seq_len, report.window or None, "gpu",
                                         report.attention_bands or report.band_kernel)
    others = ("the Pallas band kernel" if banded and report.band_kernel
              else "XLA's attention in bands" if banded else "XLA's attention")
    return f"{report.attention} in {on_cudnn} of {report.num_layers} layers, {others} in the others"


def format_gpu_report(report: CompileReport, mfu: float, steps: int) -> str:
    """The answer line, then memory, FLOPs, the census, bytes by purpose and the bound."""
    card = report.generation
    mesh = " ".join(f"{name}={size}" for name, size in report.mesh_shape.items())
    matmul, cudnn = (report.kernels_by_kind[kind] for kind in (gpu_census.MATMUL,
                                                                gpu_census.CUDNN))
    pallas = report.kernels_by_kind.get(gpu_census.PALLAS, {"kernels": 0})
    step_seconds = report.step_seconds(mfu)
    return "\n".join([
        answer_line(report),
        f"  batch {report.batch_size} x length {report.seq_len} ({report.max_predictions} "
        f"predictions), mesh {mesh}; {report.compile_cost}; attention: "
        f"{attention_text(report)}",
        memory_line(report),
        f"  FLOPs per step: {report.model_flops_per_step:.3e} model (matmuls, 3x forward); "
        f"per GPU compiled: matmuls {matmul['flops']:.3e} in {matmul['kernels']} calls, cuDNN "
        f"attention {cudnn['flops']:.3e} in {cudnn['kernels']} calls (its backward recomputes "
        f"the scores)" + (f", Pallas kernels {pallas['flops']:.3e} in {pallas['kernels']} calls"
                          if pallas["kernels"] else ""),
        *census_lines(report),
        *purpose_lines(report),
        *collective_lines(report),
        f"  bound: the kernels one after another, {bound_seconds(report, True) * 1e3:.2f} ms "
        f"at an H100's measured rates scaled to this card (matmuls {MEASURED_MATMUL:.0%} of "
        f"{card.peak_bf16_flops_per_chip / 1e12:.0f} TFLOP/s, elementwise and reductions "
        f"{MEASURED_MEMORY_BOUND:.0%} of {card.hbm_bytes_per_second_per_chip / 1e9:.0f} GB/s, "
        f"cuDNN {MEASURED_CUDNN:.0%}), {bound_seconds(report, False) * 1e3:.2f} ms at the "
        f"datasheet's" + (f"; collectives {interconnect_seconds(report) * 1e3:.2f} ms at "
                          f"{card.interconnect_bytes_per_second_per_chip / 1e9:.0f} GB/s one way"
                          if report.collective_bytes_per_device else "")
        + ". Bounds, not predictions",
        f"  MFU projection: at {mfu:.0%} MFU of {card.peak_bf16_flops_per_chip / 1e12:.0f} "
        f"bf16 TFLOP/s per GPU: {step_seconds * 1e3:.3g} ms/step, {steps:,} steps in "
        f"{step_seconds * steps / 3600:.3g} h"])
