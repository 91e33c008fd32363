"""The package metadata (ranges, for `pip install .`) against the pinned sets (requirements*.txt,
for `make` and CI): every pin lies inside its range, the GPU and TPU extras name the build
of the jax they run with, and the environment `make` builds holds exactly the pins.

Read as setuptools reads pyproject.toml to build the package metadata: no GPU, no network.
A CUDA plugin or libtpu of another jax version fails to load (or pip replaces jax), so the
extras go through jax's own extras (`jax[cuda13]`, `jax[tpu]`), which name exactly jax's build.
"""

import importlib.metadata
import pathlib

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from setuptools.config.pyprojecttoml import apply_configuration
from setuptools.dist import Distribution

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _metadata(monkeypatch) -> Distribution:
    monkeypatch.chdir(ROOT)
    return apply_configuration(Distribution(), ROOT / "pyproject.toml")


def _requirements(lines) -> dict[str, Requirement]:
    requirements = (Requirement(line) for line in lines)
    return {canonicalize_name(requirement.name): requirement for requirement in requirements}


def _pins(file_name: str) -> dict[str, Requirement]:
    lines = (ROOT / file_name).read_text().splitlines()
    pins = _requirements(line for line in lines if line.strip() and not line.startswith("#"))
    for requirement in pins.values():
        (specifier,) = requirement.specifier  # exactly one: '==version'
        assert specifier.operator == "==", f"{file_name}: {requirement} is not pinned"
    return pins


def _pinned_version(requirement: Requirement) -> str:
    (specifier,) = requirement.specifier
    return specifier.version


def test_the_runtime_ranges_name_what_requirements_txt_pins_and_accept_the_pins(monkeypatch):
    ranges = _requirements(_metadata(monkeypatch).install_requires)
    pins = _pins("requirements.txt")
    assert set(ranges) == set(pins)
    for name, requirement in ranges.items():
        assert requirement.specifier, f"{name}: no range"
        assert not any(specifier.operator == "==" for specifier in requirement.specifier), (
            f"{requirement}: a pin in the package metadata keeps it out of existing environments")
        assert requirement.specifier.contains(_pinned_version(pins[name])), (
            f"requirements.txt pins {pins[name]}, outside pyproject.toml's {requirement}")


def test_the_extras_accept_the_pinned_sets(monkeypatch):
    extras = _metadata(monkeypatch).extras_require
    for extra, file_name in (("dev", "requirements-dev.txt"), ("beam", "requirements-beam.txt"),
                             ("gpu-compile", "requirements-gpu-compile.txt")):
        pins = _pins(file_name)
        for name, requirement in _requirements(extras[extra]).items():
            if name == "jax":
                continue  # through jax's extra: the next test
            assert name in pins, f"{file_name} does not pin {name} of the {extra} extra"
            assert requirement.specifier.contains(_pinned_version(pins[name])), (
                f"{file_name} pins {pins[name]}, outside the {extra} extra's {requirement}")


def test_the_environment_make_builds_holds_exactly_the_pins():
    # `make` installs requirements.txt, then the dev, TPU, Beam and GPU-compile sets over it in
    # a second pip call. A pin another set's package refuses is replaced there with a warning
    # pip does not fail on, and the suite runs with a version nobody pinned (pyarrow 25.0.1
    # under a 26.0.1 pin: apache-beam 2.77 takes < 26). `==2.13.0` accepts torch's
    # 2.13.0+cpu, as pip does (PEP 440: a local label matches a pin without one).
    installed_by_make = ("requirements.txt", "requirements-dev.txt", "requirements-tpu.txt",
                         "requirements-beam.txt", "requirements-gpu-compile.txt")
    differences = [f"{file_name}: {pin}, installed {importlib.metadata.version(name)}"
                   for file_name in installed_by_make
                   for name, pin in _pins(file_name).items()
                   if not pin.specifier.contains(importlib.metadata.version(name))]
    assert not differences, differences


def test_the_gpu_and_tpu_extras_go_through_jaxs_own_extras(monkeypatch):
    distribution = _metadata(monkeypatch)
    runtime = _requirements(distribution.install_requires)
    jax_version = _pinned_version(_pins("requirements.txt")["jax"])
    for extra, jax_extra in (("cuda", "cuda13"), ("tpu", "tpu"), ("gpu-compile", "cuda13-local")):
        jax = _requirements(distribution.extras_require[extra])["jax"]
        assert jax.extras == {jax_extra} and jax.specifier == runtime["jax"].specifier
    # The pinned files carry the build jax's extras name for the pinned jax.
    for file_name, plugin in (("requirements-cuda.txt", "jax-cuda13-plugin"),
                              ("requirements-gpu-compile.txt", "jax-cuda13-plugin")):
        pins = _pins(file_name)
        assert _pinned_version(pins[plugin]) == jax_version
        assert _pinned_version(pins["jax-cuda13-pjrt"]) == jax_version
    # NVIDIA's CUDA libraries (cuDNN among them) come as wheels with the plugin.
    assert _pins("requirements-cuda.txt")["jax-cuda13-plugin"].extras == {"with-cuda"}
    # libtpu: the release the installed jax's `tpu` extra asks for.
    (libtpu,) = [Requirement(line) for line in importlib.metadata.requires("jax")
                 if line.startswith("libtpu") and 'extra == "tpu"' in line]
    assert libtpu.specifier.contains(_pinned_version(_pins("requirements-tpu.txt")["libtpu"]))
