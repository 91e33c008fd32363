"""The README's mesh tables: BERT-Base and BERT-Large, phases 1 and 2, on v4-64 and v5e-256,
each mesh layout compiled by `bert-jax aot` and compared by the roofline bound with the
corrected HBM bytes (bert_jax/compiler/aot_bytes.py).

A 32- or 256-chip compile of BERT-Large takes half an hour or more here, so each pod is
compiled as an 8-chip stand-in holding the pod's sequences per chip (256 sequences a step:
8 a chip on v4-64 = `v4:2x2x2 --chip-config megacore` at batch 64; 1 a chip on v5e-256 =
`v5e:2x4` at batch 8). At the same sequences per chip the compute term holds from 8 chips to
the pod; a collective over n chips sends (n - 1) / n of its operand (2 (n - 1) / n for an
all-reduce), so data parallel's and FSDP's interconnect terms grow by (31/32) / (7/8) on v4-64
and (255/256) / (7/8) on v5e-256, and mixed's all-reduces (data=2 at 8 chips, data=8 or 64 on
the pod; FSDP stays within a 4-chip host) by (7/8) / (1/2) or (63/64) / (1/2). Data parallel's
and mixed's memory terms hold (each chip updates the same share of the parameters); in FSDP's
the update's bytes (finite check, gradient norm, clipping, AdamW) fall from 1/8 of the
parameters' to 1/32 or 1/256, the rest holds. The compute term is never below the model's
matmul FLOPs per chip (bert_jax.compiler.aot: XLA counts libtpu's windowed-matmul loops once).

    python bench/mesh_tables.py --out runs/mesh-tables            # compiles what is missing, then prints
    python bench/mesh_tables.py --out runs/mesh-tables --no-compile  # prints what is there

Each compile writes OUT/NAME.json (`aot --json`) and OUT/NAME.txt (its report); a rerun
skips the names already written, so the sweep can be stopped and resumed.
"""

import argparse
import json
import os
import subprocess
import sys

from bert_jax.compiler import aot_pod, aot_report
from bert_jax.compiler.aot import CompileReport

GIB, MIB = 2**30, 2**20
# name -> (topology arguments, batch at the pod's sequences per chip, chips in the pod)
SLICES = {
    "v4-64": (("--topology", "v4:2x2x2", "--chip-config", "megacore"), 64, 32),
    "v5e-256": (("--topology", "v5e:2x4"), 8, 256),
}
PHASES = {1: (), 2: ("--config.data.seq_len=512", "--config.data.max_predictions=80")}
STAND_IN_CHIPS = 8
# data parallel, FSDP and mixed (FSDP within a 4-chip host): `aot --compare-meshes`'s layouts
LAYOUTS = aot_report.mesh_layouts(STAND_IN_CHIPS, devices_per_host=4)


def name_of(model: str, phase: int, slice_name: str, layout: str) -> str:
    return f"{model}_p{phase}_{slice_name.split('-')[0]}_{layout}"


def compile_one(out: str, model: str, phase: int, slice_name: str, layout: str) -> None:
    name = name_of(model, phase, slice_name, layout)
    if os.path.exists(os.path.join(out, name + ".json")):
        return
    topology, batch, _ = SLICES[slice_name]
    command = [sys.executable, "-m", "bert_jax.cli", "aot", "--config", f"configs/bert_{model}.py",
               *topology, f"--config.batch_size={batch}", *PHASES[phase], *LAYOUTS[layout],
               "--json", os.path.join(out, name + ".json")]
    print(f"compiling {name} ...", flush=True)
    with open(os.path.join(out, name + ".txt"), "w", encoding="utf-8") as log:
        subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, check=True)


def _bytes(value: float) -> str:
    return f"{value / GIB:.2f} GiB" if value >= GIB else f"{value / MIB:.1f} MiB"


def table(out: str, model: str, phase: int) -> list[str]:
    lines = ["| slice (compiled as) | layout | peak HBM per chip | XLA's bytes per chip "
             "(table names) | corrected HBM bytes | collective bytes per chip | 8-chip bound: "
             "compute / memory / ICI, ms | pod bound, ms |",
             "|---|---|---|---|---|---|---|---|"]
    for slice_name, (_, batch, pod_chips) in SLICES.items():
        best, rows = None, []
        for layout in LAYOUTS:
            path = os.path.join(out, name_of(model, phase, slice_name, layout) + ".json")
            if not os.path.exists(path):
                rows.append((layout, None, None))
                continue
            with open(path, encoding="utf-8") as file:
                # derived again by the current bert_jax.compiler.aot, not read from the file
                report = aot_report.report_from_json(json.load(file)["reports"][0])
            bound = max(aot_pod.pod_terms(report, pod_chips).values())
            rows.append((layout, report, bound))
            if report.fits and (best is None or bound < best[1]):
                best = (layout, bound)
        for index, (layout, report, bound) in enumerate(rows):
            where = (f"{slice_name} ({batch // STAND_IN_CHIPS} a chip)" if index == 0 else "")
            if report is None:
                lines.append(f"| {where} | {layout} | not compiled | | | | | |")
                continue
            named = sum(sum(row[key] for key in ("forward", "backward", "step"))
                        for row in report.bytes_by_purpose.values())
            terms = report.roofline_terms()
            mark = "**" if best and layout == best[0] else ""
            lines.append(
                f"| {where} | {mark}{layout}{mark} "
                f"({' '.join(f'{k}={v}' for k, v in report.mesh_shape.items() if v > 1)}) "
                f"| {_bytes(report.peak_bytes)}{'' if report.fits else ' (does not fit)'} "
                f"| {_bytes(report.bytes_accessed_per_device)} "
                f"({100 * named / report.bytes_accessed_per_device:.0f}%) "
                f"| {_bytes(report.hbm_traffic_per_device)} "
                f"| {_bytes(report.collective_bytes_per_device)} "
                f"| {terms['compute'] * 1e3:.2f} / {terms['memory'] * 1e3:.2f} / "
                f"{terms['interconnect'] * 1e3:.2f} | {mark}{bound * 1e3:.2f}{mark} |")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="directory for each compile's JSON and report")
    parser.add_argument("--models", default="large,base", help="comma-separated: large, base")
    parser.add_argument("--phases", default="1,2", help="comma-separated: 1 (128 tokens), 2 (512)")
    parser.add_argument("--no-compile", action="store_true", help="print what OUT holds")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    models, phases = args.models.split(","), [int(phase) for phase in args.phases.split(",")]
    if not args.no_compile:
        for model in models:
            for phase in phases:
                for layout in LAYOUTS:
                    for slice_name in SLICES:
                        compile_one(args.out, model, phase, slice_name, layout)
    for model in models:
        for phase in phases:
            print(f"\nBERT-{model.capitalize()}, phase {phase} (256 x {128 if phase == 1 else 512})")
            print("\n".join(table(args.out, model, phase)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
