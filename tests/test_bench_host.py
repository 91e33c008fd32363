"""Every CPU bench names its host (issue 52): the CPU model and ISA read right from
/proc/cpuinfo, and each bench's main() announces them before its figures."""

import ast
import os
import sys

REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPOSITORY)
from bench.host import host_lines  # noqa: E402
from bert_jax.cpu_host import cpu_facts  # noqa: E402

# Compile-only benches: they time no CPU work, so the host does not qualify their figures.
COMPILE_ONLY = {"mesh_tables.py", "roofline_calibration.py"}

CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz
flags\t\t: fpu sse2 avx avx2 fma avx512f avx512bw avx512vl avx512_vnni amx_tile amx_bf16

processor\t: 1
model name\t: a second core's name is not read
flags\t\t: fpu
"""


def test_cpu_facts_reads_the_first_cores_model_and_the_listed_extensions():
    model, isa = cpu_facts(CPUINFO)
    assert model == "Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz"
    # In ISA_FLAGS order; avx (not listed) and the extensions this CPU lacks are left out.
    assert isa == ["avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
                   "amx_tile", "amx_bf16"]


def test_host_lines_name_cores_settings_and_load(monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_use_onednn=true")
    text = "\n".join(host_lines())
    assert f"of {os.cpu_count()} cores" in text
    assert "XLA_FLAGS=--xla_cpu_use_onednn=true" in text
    assert "load average before" in text
    assert "malloc: " in text  # the allocator's setting changes a step's time (cpu_memory)
    assert "matmul: " in text  # so does the matrix products' library (cpu_matmul)


def test_every_cpu_bench_announces_its_host_after_parsing_arguments():
    bench = os.path.join(REPOSITORY, "bench")
    missing = []
    for name in sorted(os.listdir(bench)):
        if not name.endswith(".py") or name in COMPILE_ONLY:
            continue
        tree = ast.parse(open(os.path.join(bench, name), encoding="utf-8").read())
        mains = [node for node in tree.body
                 if isinstance(node, ast.FunctionDef) and node.name == "main"]
        if not mains:
            continue
        calls = [node.func.id for node in ast.walk(mains[0])
                 if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)]
        if "announce_host" not in calls:
            missing.append(name)
    assert not missing, f"benches that do not print their host: {missing}"
