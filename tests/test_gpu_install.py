"""`pip install .[cuda]` resolves to the CUDA plugin of the jax that requirements.txt pins.

Read as setuptools reads pyproject.toml to build the package metadata: no GPU, no network.
A CUDA plugin of another jax version fails to load (or pip replaces the pinned jax), so the
plugin and its PJRT runtime must carry exactly jax's pin, for one CUDA major version.
"""

import pathlib
import re

from packaging.requirements import Requirement
from setuptools.config.pyprojecttoml import apply_configuration
from setuptools.dist import Distribution

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _metadata(monkeypatch) -> Distribution:
    monkeypatch.chdir(ROOT)  # the requirement files are named relative to pyproject.toml
    return apply_configuration(Distribution(), ROOT / "pyproject.toml")


def _pin(requirement: Requirement) -> str:
    (specifier,) = requirement.specifier  # exactly one: '==version'
    assert specifier.operator == "==", f"{requirement} is not pinned"
    return specifier.version


def test_the_cuda_extra_pins_the_plugin_of_the_pinned_jax(monkeypatch):
    distribution = _metadata(monkeypatch)
    runtime = {requirement.name: requirement
               for requirement in map(Requirement, distribution.install_requires)}
    jax_version = _pin(runtime["jax"])
    assert _pin(runtime["jaxlib"]) == jax_version
    cuda = {requirement.name: requirement
            for requirement in map(Requirement, distribution.extras_require["cuda"])}
    majors = {re.fullmatch(r"jax-cuda(\d+)-(plugin|pjrt)", name).group(1) for name in cuda}
    assert len(majors) == 1, f"one CUDA major version, got {sorted(cuda)}"
    (major,) = majors
    assert set(cuda) == {f"jax-cuda{major}-plugin", f"jax-cuda{major}-pjrt"}
    assert {_pin(requirement) for requirement in cuda.values()} == {jax_version}
    # NVIDIA's CUDA libraries (cuDNN among them) come as wheels with the plugin.
    assert cuda[f"jax-cuda{major}-plugin"].extras == {"with-cuda"}


def test_the_tpu_extra_is_pinned_too(monkeypatch):
    (libtpu,) = map(Requirement, _metadata(monkeypatch).extras_require["tpu"])
    assert libtpu.name == "libtpu" and _pin(libtpu)
