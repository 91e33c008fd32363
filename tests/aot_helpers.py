"""`bert-jax aot` run in a subprocess for the AOT tests, and the abstract TPU mesh that
`aot` traces under, for tests that trace a layer's TPU form in the test process.

libtpu initialisation in the test process would meet the eight simulated CPU devices of
conftest and, on a shared host, libtpu's process lock; a subprocess has neither.
"""

import importlib.util
import json
import os
import subprocess
import sys

import jax
import pytest

from bert_jax import sharding

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def compile_report(directory, config_text: str, *arguments: str,
                   needs_libtpu: bool = True) -> tuple[dict, str]:
    """(the JSON report, stdout) of `bert-jax aot` on a config file written from
    `config_text` into `directory`; skips the test where libtpu is not installed (for a TPU
    topology: a GPU target's caller checks for jax's CUDA plugin)."""
    written, stdout = compile_reports(directory, config_text, *arguments,
                                      needs_libtpu=needs_libtpu)
    (report,) = written["reports"]
    return report, stdout


def compile_reports(directory, config_text: str, *arguments: str,
                    needs_libtpu: bool = True) -> tuple[dict, str]:
    """(the whole --json file, stdout) of `bert-jax aot`, as compile_report."""
    if needs_libtpu and importlib.util.find_spec("libtpu") is None:
        pytest.skip("libtpu is not installed (pip install -r requirements-tpu.txt)")
    config = directory / "config.py"
    config.write_text(config_text)
    output = directory / "report.json"
    env = dict(os.environ, TPU_SKIP_MDS_QUERY="1", ALLOW_MULTIPLE_LIBTPU_LOAD="1")
    result = subprocess.run(
        [sys.executable, "-m", "bert_jax.cli", "aot", "--config", str(config), *arguments,
         "--json", str(output)],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(output.read_text()), result.stdout


def run_config_text(preset: str, settings: dict) -> str:
    """A run config file: `base_config(preset)` with each dotted key of `settings` set."""
    lines = [f"    config.{key} = {value!r}" for key, value in settings.items()]
    return ("from bert_jax.run_config import base_config\n\n\ndef get_config():\n"
            f"    config = base_config({preset!r})\n" + "\n".join(lines)
            + "\n    return config\n")


def tpu_abstract_mesh():
    """A one-device mesh of an abstract TPU: what `aot` traces under on a CPU host, so the
    layers that ask `traced_platform()` take their TPU form."""
    cpu_mesh = sharding.make_mesh(devices=jax.devices()[:1]).abstract_mesh
    device_type = type(cpu_mesh.abstract_device)
    return type(cpu_mesh)(cpu_mesh.axis_sizes, cpu_mesh.axis_names,
                          axis_types=cpu_mesh.axis_types,
                          abstract_device=device_type("TPU v5 lite", None, "tpu"))
