"""What this machine's CPU is: its model name and the instruction-set extensions that decide
which kernels XLA's and torch's CPU libraries run, read from /proc/cpuinfo. The benches print
them at their top (bench/host.py) and `cpu_matmul` chooses XLA's matrix-product library by
them."""

import platform

# The extensions that decide which kernels run: AVX2 and AVX-512 widths, the VNNI and BF16
# dot products, AMX tiles (oneDNN's bf16/int8 matmuls on Sapphire Rapids and later).
ISA_FLAGS = ("avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx_vnni",
             "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8")


def cpu_facts(cpuinfo: str) -> tuple[str, list[str]]:
    """(model name, the ISA_FLAGS it has, in ISA_FLAGS order) from /proc/cpuinfo's text."""
    model, flags = "unknown CPU", set()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name" and model == "unknown CPU":
            model = value.strip()
        elif key.strip() == "flags" and not flags:
            flags = set(value.split())
    return model, [flag for flag in ISA_FLAGS if flag in flags]


def this_cpu() -> tuple[str, list[str]]:
    """`cpu_facts` of this machine; off Linux, the platform module's name and no extensions."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            return cpu_facts(cpuinfo.read())
    except OSError:
        return platform.processor() or "unknown CPU", []
