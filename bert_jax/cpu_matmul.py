"""On a CPU host, which library runs XLA's matrix products: oneDNN on the CPUs where it was
measured faster, XLA's default (YNNPACK) elsewhere.

jaxlib 0.10.2's CPU compiler hands float32 matrix products to YNNPACK. On a 2-core Xeon with
AVX-512 and AMX (issue 52's host class), YNNPACK reached about 273 GFLOP/s over ModernBERT's
train step where torch's oneDNN reached 338; handing XLA's products to oneDNN instead ran
bert-jax's ModernBERT forward 1.15-1.16x and train step 1.07-1.09x faster, and BERT-Base's
pre-training step 1.09x, side by side in one process, with the same masked-LM losses
(docs/modernbert.md, "The matrix products' library on a CPU", has the bench lines). The
products stay float32: AMX's tiles multiply bf16 and int8, which a float32 product does not
use (oneDNN's AVX-512 kernels run it); AMX marks the host class measured.

oneDNN can take XLA's products one at a time (`LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT`) or as
graphs of products and their elementwise neighbours (`LIBRARY_FUSION_TYPE_DOT`). jaxlib
0.10.2's graph form fails to compile any program where one product feeds another or two
products are added ("partition compile failed"; a layer's backward pass has both), so
products go one at a time.

The choice is made once, before JAX's CPU backend starts (XLA reads XLA_FLAGS then), by
`choose()`: `bert-jax`'s commands that run a model and the CPU benches call it, and it says on
stderr what it chose. It leaves XLA's default where:
- the CPU reports no AMX: the AVX-512 hosts without it that the team has measured (an Ice
  Lake Xeon, an AMD EPYC) were not measured with oneDNN, so they keep what they were
  measured with;
- an accelerator runs the steps (or JAX_PLATFORMS names another platform);
- jaxlib is not 0.10: the flags are that version's, and XLA ends the process on a flag it
  does not know;
- the user has chosen: XLA_FLAGS already names oneDNN, YNNPACK or XNNPACK, or
  BERT_JAX_CPU_MATMUL=xla (the opt-out).
`state()` says in one line what this process runs with, and why (the benches' host header).
"""

import importlib.metadata
import os
import sys

from bert_jax.cpu_host import this_cpu
from bert_jax.training.distributed import (  # imports no JAX
    accelerator_present, accelerator_runs_steps)

OPT_OUT = "BERT_JAX_CPU_MATMUL"  # =xla keeps XLA's default library
# The XLA options, as a compile's `compiler_options` and as XLA_FLAGS; XLA_DEFAULT_OPTIONS
# compile one program with XLA's default library whatever XLA_FLAGS chose (the benches' A/B).
ONEDNN_OPTIONS = {"xla_cpu_use_onednn": True,
                  "xla_cpu_experimental_onednn_fusion_type": "LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT"}
XLA_DEFAULT_OPTIONS = {"xla_cpu_use_onednn": False}
ONEDNN_FLAGS = " ".join(f"--{name}={str(value).lower() if isinstance(value, bool) else value}"
                        for name, value in ONEDNN_OPTIONS.items())
MEASURED_JAXLIB = "0.10."
# The line `choose` writes when it chooses oneDNN.
ANNOUNCEMENT = (f"bert-jax: this CPU has AMX, so XLA's matrix products run in oneDNN "
                f"({OPT_OUT}=xla keeps XLA's default)")
_LIBRARY_WORDS = ("onednn", "ynn", "xnn")  # in XLA_FLAGS: the user chose the library


def _jaxlib_version() -> str | None:
    try:
        return importlib.metadata.version("jaxlib")
    except importlib.metadata.PackageNotFoundError:
        return None


def reason_to_leave_alone(environ, isa: list[str], jaxlib: str | None,
                          accelerator: bool) -> str | None:
    """Why XLA's default library should run this process's products, or None for oneDNN."""
    if environ.get(OPT_OUT, "") == "xla":
        return f"{OPT_OUT}=xla"
    flags = environ.get("XLA_FLAGS", "")
    if ONEDNN_FLAGS in flags:
        return None
    if any(word in flags.lower() for word in _LIBRARY_WORDS):
        return "XLA_FLAGS chooses"
    if accelerator_runs_steps(environ, accelerator):
        return "an accelerator runs the steps"
    if "amx_tile" not in isa:
        return "measured faster only on CPUs with AMX"
    if jaxlib is None or not jaxlib.startswith(MEASURED_JAXLIB):
        return f"jaxlib {jaxlib}: measured with {MEASURED_JAXLIB}x only"
    return None


def _reason(environ) -> str | None:
    return reason_to_leave_alone(environ, this_cpu()[1], _jaxlib_version(),
                                 accelerator_present())


def state(environ=os.environ) -> str:
    """One line: the library that runs this process's matrix products, and why."""
    reason = _reason(environ)
    if reason is None and ONEDNN_FLAGS in environ.get("XLA_FLAGS", ""):
        return f"matmul: oneDNN, one product at a time ({OPT_OUT}=xla runs XLA's default)"
    return f"matmul: XLA's default ({reason or 'oneDNN not chosen yet'})"


def choose(environ=os.environ, stream=sys.stderr) -> None:
    """Adds ONEDNN_FLAGS to XLA_FLAGS where oneDNN was measured faster and nothing else was
    chosen, saying so on `stream` once (a process re-executed with them says nothing). Must
    run before JAX's CPU backend starts."""
    # Already chosen (a relaunched process) is known without reading the CPU's facts again.
    if ONEDNN_FLAGS in environ.get("XLA_FLAGS", "") or _reason(environ) is not None:
        return
    environ["XLA_FLAGS"] = f"{environ.get('XLA_FLAGS', '')} {ONEDNN_FLAGS}".strip()
    print(ANNOUNCEMENT, file=stream, flush=True)
