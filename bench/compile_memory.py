"""What `aot`'s compiles take in memory, against the size of the program compiled, and whether
`bert_jax/compiler/compile_memory.py`'s lower bounds hold under every one.

Each case runs `bert-jax aot ... --json` in its own process (one compile a process, so one
compile's peak is not another's), with the memory check off and the fit search off, and
reads from the report the lowered program's operations, the process's resident memory when
the compile began and its peak over the compile. The compile's own memory is the difference.
It then prints, for each platform, each case's memory against its bound (LOWER_BOUNDS) and
the least-squares line through the cases, to show how far the program's size is from
predicting the memory, and exits non-zero where a case lies under its bound.

Usage: python bench/compile_memory.py                 # every case (about 15 minutes on 2 cores)
       python bench/compile_memory.py --cases demo    # the cases whose name contains "demo"
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench.host import announce_host  # noqa: E402

GIB = 1024**3
SCAN = "--config.precision.scan_layers=True"
H100_SHAPE = ("--config.batch_size=32", "--config.data.seq_len=512",
              "--config.data.max_predictions=20")

# (name, platform, config, topology, overrides): the README's and the docs' compiles, both
# families, unrolled and scanned, from a 2-layer model to BERT-Large.
CASES = (
    ("demo v5e:2x2", "tpu", "configs/demo.py", "v5e:2x2", ()),
    ("demo scanned v5e:2x2", "tpu", "configs/demo.py", "v5e:2x2", (SCAN,)),
    ("modernbert_demo v5e:2x2", "tpu", "configs/modernbert_demo.py", "v5e:2x2", ()),
    ("eurobert_demo v5e:2x2", "tpu", "configs/eurobert_demo.py", "v5e:2x2", ()),
    ("bert_base v5e:2x2", "tpu", "configs/bert_base.py", "v5e:2x2", ()),
    ("bert_large scanned v5e:2x2", "tpu", "configs/bert_large.py", "v5e:2x2", (SCAN,)),
    ("bert_large v5e:2x2 (the fit recipe)", "tpu", "configs/bert_large.py", "v5e:2x2", ()),
    ("modernbert_base v5e:2x2", "tpu", "configs/modernbert_base.py", "v5e:2x2",
     ("--config.grad_accum_steps=192",)),
    ("demo h100", "gpu", "configs/demo.py", "h100", ()),
    ("bert_base h100 32 x 512", "gpu", "configs/bert_base.py", "h100", H100_SHAPE),
)


def measure(config: str, topology: str, overrides: tuple) -> dict:
    """One compile in its own `bert-jax aot` process: its report's fields."""
    with tempfile.TemporaryDirectory(prefix="bert-jax-compile-memory-") as directory:
        report_path = os.path.join(directory, "report.json")
        command = [sys.executable, "-m", "bert_jax.cli", "aot", "--config", config,
                   "--topology", topology, "--no-search-fit", "--no-memory-check",
                   "--json", report_path, *overrides]
        # As a user runs `aot`: with glibc's default malloc, not the settings this bench's
        # process may run with (bert_jax/cpu_memory.py), which keep freed memory resident.
        environment = {key: value for key, value in os.environ.items()
                       if key != "GLIBC_TUNABLES"}
        run = subprocess.run(command, capture_output=True, text=True, env=environment)
        if run.returncode not in (0, 2) or not os.path.exists(report_path):
            raise SystemExit(f"{' '.join(command)} failed ({run.returncode}):\n{run.stderr[-3000:]}")
        with open(report_path) as file:
            return json.load(file)["reports"][0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", default="", help="run only the cases whose name contains this")
    args = parser.parse_args()
    announce_host()
    import numpy

    from bert_jax.compiler.compile_memory import LOWER_BOUNDS

    measured = {}
    for name, platform, config, topology, overrides in CASES:
        if args.cases not in name:
            continue
        report = measure(config, topology, overrides)
        own = report["compile_peak_resident_bytes"] - report["resident_before_compile_bytes"]
        measured.setdefault(platform, []).append((name, report["program_operations"], own))
        print(f"{name}: {report['program_operations']:,} operations; compiled in "
              f"{report['compile_seconds']:.1f} s, peak resident "
              f"{report['compile_peak_resident_bytes'] / GIB:.2f} GiB, "
              f"{own / GIB:.2f} GiB over the {report['resident_before_compile_bytes'] / GIB:.2f} "
              f"GiB held before", flush=True)
    broken = 0
    for platform, cases in measured.items():
        bound = LOWER_BOUNDS[platform]
        # The least-squares line (flat through a single case).
        slope, intercept = (numpy.polyfit([operations for _, operations, _ in cases],
                                          [own for _, _, own in cases], 1)
                            if len(cases) > 1 else (0.0, cases[0][2]))
        print(f"\n{platform}: lower bound {bound.fixed_bytes / GIB:.2f} GiB + "
              f"{bound.per_operation_bytes:,.0f} bytes an operation beyond "
              f"{bound.free_operations:,}; least squares {intercept / GIB:.2f} GiB + "
              f"{slope:,.0f} bytes an operation")
        for name, operations, own in cases:
            least = bound.bytes(operations)
            broken += own < least
            print(f"  {name:40s} {operations:>9,} ops  measured {own / GIB:5.2f} GiB  bound "
                  f"{least / GIB:5.2f} ({own / least:.2f}x{'' if own >= least else ': UNDER'})"
                  f"  least squares {(intercept + slope * operations) / GIB:5.2f}")
    if broken:
        raise SystemExit(f"{broken} compile(s) took less than their lower bound: lower it")


if __name__ == "__main__":
    main()
