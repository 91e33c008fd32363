"""A data mixture's settings, `data.sources` and `data.mixture_tau`: read and checked
without TensorFlow (the run config checks them when it loads; `mixture.py` draws the rows).
"""

import dataclasses

import numpy as np

from bert_jax.errors import UserError

SOURCE_KEYS = ("files", "weight", "repeat")  # what a data.sources entry may set


@dataclasses.dataclass(frozen=True)
class Source:
    name: str
    files: str  # comma-separated shard globs or directories
    weight: float = 1.0
    repeat: bool = True


def sources_of(data, where: str = "run config") -> list[Source]:
    """The sources of a run config's data section (sorted by name), checked: known keys
    only, files given, weights not negative, at least one above 0."""
    sources = []
    for name, entry in sorted(data.sources.items()):
        if not hasattr(entry, "items"):
            raise UserError(f"{where}: data.sources.{name} must be a dict(files=..., weight=..., "
                            f"repeat=...), got {entry!r}")
        entry = dict(entry)
        unknown = sorted(set(entry) - set(SOURCE_KEYS))
        if unknown:
            raise UserError(f"{where}: data.sources.{name}: unknown key(s) {', '.join(unknown)}; "
                            f"a source sets {', '.join(SOURCE_KEYS)}")
        if not entry.get("files"):
            raise UserError(f"{where}: data.sources.{name}.files is not set (its shards: "
                            "globs or create-data directories, comma-separated)")
        weight = float(entry.get("weight", 1.0))
        if weight < 0:
            raise UserError(f"{where}: data.sources.{name}.weight must be at least 0, "
                            f"got {weight}")
        files = _under_root(entry["files"], data.get("sources_root", ""))
        sources.append(Source(name, files, weight, bool(entry.get("repeat", True))))
    if sources and not any(source.weight > 0 for source in sources) and not data.mixture_tau:
        raise UserError(f"{where}: every data.sources weight is 0")
    return sources


def is_mixture(data) -> bool:
    """Whether a run config's data section names sources (a mixture) for its training rows."""
    return bool(data.get("sources"))


def all_files(data) -> str:
    """Every source's shard patterns, comma-joined: what the shards' checks read."""
    return ",".join(source.files for source in sources_of(data))


def _under_root(files: str, root: str) -> str:
    """`files` with each relative pattern read under `root` (data.sources_root: one override
    moves a whole mixture, every phase's shards, to another directory or a gs:// bucket)."""
    if not root:
        return files
    return ",".join(pattern if pattern.startswith("/") or "://" in pattern
                    else f"{root.rstrip('/')}/{pattern}" for pattern in files.split(",") if pattern)


def probabilities(weights, sizes, tau: float) -> np.ndarray:
    """p_i: the weights normalised, or with tau > 0, sizes^tau normalised."""
    values = (np.asarray(sizes, np.float64) ** tau if tau > 0
              else np.asarray(weights, np.float64))
    return values / values.sum()


def shares(counts: dict[str, int]) -> dict[str, float]:
    """Each source's share of the rows `counts` holds."""
    total = max(sum(counts.values()), 1)
    return {name: float(count) / total for name, count in counts.items()}


def check_sources(config, where: str) -> None:
    """Refuses a mixture's unknown keys, missing files, bad weights, and sources given
    together with data.train_files (which one would the run read?)."""
    data = config.data
    if not data.get("sources"):
        return
    if data.train_files:
        raise UserError(f"{where}: data.train_files and data.sources are both set; a run reads "
                        "one: its shards (train_files) or a mixture of named sources")
    if data.mixture_tau < 0:
        raise UserError(f"{where}: data.mixture_tau must be at least 0 (0 = the sources' "
                        f"weights), got {data.mixture_tau}")
    sources_of(data, where)
