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

What oneDNN costs: jaxlib 0.10.2 cannot write a program that holds oneDNN's products to JAX's
persistent compilation cache ("ToProto is not implemented for thunk kind: onednn-fusion"), so
every run of a command compiles its steps again (compilation_cache.py). Measured on the same
host, 2026-12-04: the README's fine-tuning of MiniLM ran 57.9 s and then 53.6 s with oneDNN,
57.3 s and then 30.3 s with XLA's default, at the same step rate (13.1k and 12.8-13.3k tokens/s:
a 384-wide model's products gain nothing); the pre-training step gained 1.03x at 256 wide, 1.05x
at 512 and 1.06x at BERT-Base's 768 (1.09x in an earlier process). So oneDNN is chosen only for
`pretrain` (COMMANDS), whose steps run for hours on one compile; fine-tuning, prediction and
embedding keep XLA's default and the cache, and `BERT_JAX_CPU_MATMUL=onednn` hands any command's
products to oneDNN (a long fine-tuning of a 768-wide model, or embedding a large corpus: 1.04x
against 0.94x sentence-transformers, docs/fine-tuning.md).

The choice is made once, before JAX's CPU backend starts (XLA reads XLA_FLAGS then), by
`choose(command)`: `bert-jax`'s commands that run a model and the CPU benches call it, and it
says on stderr what it chose. It leaves XLA's default where:
- the command is not one of COMMANDS, unless BERT_JAX_CPU_MATMUL=onednn;
- the CPU reports no AMX: the AVX-512 hosts without it that the team has measured (an Ice
  Lake Xeon, an AMD EPYC) were not measured with oneDNN, so they keep what they were
  measured with (BERT_JAX_CPU_MATMUL=onednn chooses it there too);
- an accelerator runs the steps (or JAX_PLATFORMS names another platform);
- jaxlib is not 0.10: the flags are that version's, and XLA ends the process on a flag it
  does not know;
- the user has chosen: XLA_FLAGS already names oneDNN, YNNPACK or XNNPACK, or
  BERT_JAX_CPU_MATMUL=xla (the opt-out).
Where oneDNN runs the products, JAX's warning that it cannot cache a program is replaced by
the announcement's words, said once.
`state()` says in one line what this process runs with, and why (the benches' host header).
"""

import importlib.metadata
import os
import sys
import warnings

from bert_jax.cpu_host import this_cpu
from bert_jax.errors import UserError
from bert_jax.training.distributed import (  # imports no JAX
    accelerator_present, accelerator_runs_steps)

CHOICE = "BERT_JAX_CPU_MATMUL"  # =xla keeps XLA's default library, =onednn hands it to oneDNN
CHOICES = ("xla", "onednn")
# The commands whose steps run long enough on one compile for oneDNN's speed to outweigh the
# compilation cache it costs (the module docstring).
COMMANDS = ("pretrain",)
# The XLA options, as a compile's `compiler_options` and as XLA_FLAGS; XLA_DEFAULT_OPTIONS
# compile one program with XLA's default library whatever XLA_FLAGS chose (the benches' A/B).
ONEDNN_OPTIONS = {"xla_cpu_use_onednn": True,
                  "xla_cpu_experimental_onednn_fusion_type": "LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT"}
XLA_DEFAULT_OPTIONS = {"xla_cpu_use_onednn": False}
ONEDNN_FLAGS = " ".join(f"--{name}={str(value).lower() if isinstance(value, bool) else value}"
                        for name, value in ONEDNN_OPTIONS.items())
MEASURED_JAXLIB = "0.10."
# JAX's warning for each program it cannot write to the persistent cache because oneDNN runs
# its products; ANNOUNCEMENT says the same once.
CACHE_WARNING = (r"Error writing persistent compilation cache entry .*"
                 r"thunk kind: onednn-fusion")
# The line `choose` writes when it chooses oneDNN.
ANNOUNCEMENT = (f"bert-jax: XLA's matrix products run in oneDNN (faster for long runs on CPUs "
                f"with AMX); jaxlib cannot keep them in the compilation cache, so each run "
                f"compiles its steps ({CHOICE}=xla keeps XLA's default)")
_LIBRARY_WORDS = ("onednn", "ynn", "xnn")  # in XLA_FLAGS: the user chose the library


def _jaxlib_version() -> str | None:
    try:
        return importlib.metadata.version("jaxlib")
    except importlib.metadata.PackageNotFoundError:
        return None


def _asked_for(environ) -> str | None:
    """The library BERT_JAX_CPU_MATMUL names, or None; an unknown value is an error."""
    value = environ.get(CHOICE, "")
    if value and value not in CHOICES:
        raise UserError(f"{CHOICE}={value}: expected one of {', '.join(CHOICES)} "
                        f"(or unset: oneDNN for {', '.join(COMMANDS)} on CPUs with AMX)")
    return value or None


def reason_to_leave_alone(environ, isa: list[str], jaxlib: str | None, accelerator: bool,
                          command: str) -> str | None:
    """Why XLA's default library should run `command`'s products, or None for oneDNN."""
    asked = _asked_for(environ)
    if asked == "xla":
        return f"{CHOICE}=xla"
    flags = environ.get("XLA_FLAGS", "")
    if ONEDNN_FLAGS in flags:
        return None
    if any(word in flags.lower() for word in _LIBRARY_WORDS):
        return "XLA_FLAGS chooses"
    if accelerator_runs_steps(environ, accelerator):
        return "an accelerator runs the steps"
    if jaxlib is None or not jaxlib.startswith(MEASURED_JAXLIB):
        return f"jaxlib {jaxlib}: measured with {MEASURED_JAXLIB}x only"
    if asked == "onednn":
        return None
    if command not in COMMANDS:
        return f"{command} keeps the compilation cache; {CHOICE}=onednn for oneDNN"
    if "amx_tile" not in isa:
        return "measured faster only on CPUs with AMX"
    return None


def _reason(environ, command: str) -> str | None:
    return reason_to_leave_alone(environ, this_cpu()[1], _jaxlib_version(),
                                 accelerator_present(), command)


def state(command: str, environ=os.environ) -> str:
    """One line: the library that runs `command`'s matrix products in this process (after
    `choose`), and why."""
    if ONEDNN_FLAGS in environ.get("XLA_FLAGS", ""):
        return f"matmul: oneDNN, one product at a time ({CHOICE}=xla runs XLA's default)"
    return f"matmul: XLA's default ({_reason(environ, command) or 'oneDNN not chosen yet'})"


def choose(command: str, environ=os.environ, stream=sys.stderr) -> None:
    """Adds ONEDNN_FLAGS to XLA_FLAGS where oneDNN was measured faster for `command` (a
    bert-jax command's name) and nothing else was chosen, saying so on `stream` once (a
    process re-executed with them says nothing); where oneDNN runs the products, JAX's
    warning for each program it cannot cache is not shown. Must run before JAX's CPU backend
    starts."""
    # Already chosen (a relaunched process) is known without reading the CPU's facts again.
    if ONEDNN_FLAGS not in environ.get("XLA_FLAGS", ""):
        if _reason(environ, command) is not None:
            return
        environ["XLA_FLAGS"] = f"{environ.get('XLA_FLAGS', '')} {ONEDNN_FLAGS}".strip()
        print(ANNOUNCEMENT, file=stream, flush=True)
    warnings.filterwarnings("ignore", message=CACHE_WARNING, category=UserWarning)
