"""The CLI's persistent compilation cache: where it goes, how it is turned off, and that a
second process reuses the first one's compiled program instead of compiling again."""

import os
import subprocess
import sys

from bert_jax import compilation_cache

PROGRAM = """
import os, sys
from bert_jax import compilation_cache
compilation_cache.enable()
import jax, jax.numpy as jnp
from jax._src import monitoring
hits = []
monitoring.register_event_listener(
    lambda event, **kwargs: hits.append(event) if event.endswith("cache_hits") else None)
@jax.jit
def f(x):
    for _ in range(30):
        x = jnp.tanh(x @ x + 1.0)
    return x
f(jnp.ones((32, 32))).block_until_ready()
print(len(hits))
"""


def test_enable_sets_jax_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR", raising=False)
    monkeypatch.setenv("BERT_JAX_COMPILATION_CACHE", str(tmp_path))
    assert compilation_cache.enable() == str(tmp_path)
    assert os.environ["JAX_COMPILATION_CACHE_DIR"] == str(tmp_path)

    monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR")
    monkeypatch.setenv("BERT_JAX_COMPILATION_CACHE", "off")
    assert compilation_cache.enable() is None
    assert "JAX_COMPILATION_CACHE_DIR" not in os.environ

    monkeypatch.delenv("BERT_JAX_COMPILATION_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert compilation_cache.enable() == str(tmp_path / "xdg" / "bert-jax" / "xla")

    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", "/elsewhere")  # JAX's own setting wins
    assert compilation_cache.enable() == "/elsewhere"


def test_second_process_reuses_compiled_program(tmp_path):
    environment = dict(os.environ, BERT_JAX_COMPILATION_CACHE=str(tmp_path / "xla"),
                       JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0")
    environment.pop("JAX_COMPILATION_CACHE_DIR", None)

    def hits() -> int:
        run = subprocess.run([sys.executable, "-c", PROGRAM], env=environment, check=True,
                             capture_output=True, text=True)
        return int(run.stdout.split()[-1])

    assert hits() == 0
    assert os.listdir(tmp_path / "xla")
    assert hits() >= 1
