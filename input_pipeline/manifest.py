"""`manifest.json`, written beside the shards: what they hold and how they were made.

Training reads it to refuse shards made with another vocabulary (`check_vocabulary`), and
the reader takes per-shard instance counts from it. Shards made by the original
`create_pretraining_data.py` have no manifest; they are still readable, just unchecked.
"""

import json
import os

from bert_jax.errors import UserError
from input_pipeline.files import exists, open_file

MANIFEST_NAME = "manifest.json"
FORMAT = "bert-jax-pretraining-shards"
VERSION = 1


def write_manifest(directory: str, manifest: dict) -> str:
    """Writes `manifest.json` atomically (temp name, then rename); returns its path."""
    path = os.path.join(directory, MANIFEST_NAME)
    temporary = path + ".tmp"
    with open(temporary, "w", encoding="utf-8") as file:
        json.dump(dict(manifest, format=FORMAT, version=VERSION), file, indent=1, sort_keys=True)
        file.write("\n")
    os.replace(temporary, path)
    return path


def read_manifest(directory: str) -> dict:
    """The manifest of a shard directory (or the path of a manifest.json itself).

    Keys: `shards` (list of {file, num_instances}), `num_instances`, `settings` (every
    create-data setting), `vocabulary` ({hash, size, lowercase}), `format`, `version`.
    """
    path = directory if directory.endswith(".json") else os.path.join(directory, MANIFEST_NAME)
    if not exists(path):
        raise UserError(f"{path}: no shard manifest here; expected the output directory of "
                        "`bert-jax create-data`")
    try:
        with open_file(path, encoding="utf-8") as file:
            manifest = json.load(file)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise UserError(f"{path}: manifest is not valid JSON ({error})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise UserError(f"{path}: not a bert-jax shard manifest (expected format {FORMAT!r})")
    if manifest.get("version") != VERSION:
        raise UserError(f"{path}: manifest version {manifest.get('version')!r}; this bert-jax "
                        f"reads version {VERSION}")
    for key in ("shards", "settings", "vocabulary", "num_instances"):
        if key not in manifest:
            raise UserError(f"{path}: manifest lacks the key {key!r}")
    return manifest


def check_vocabulary(manifest: dict, tokenizer_hash: str, source: str) -> None:
    """Raises `UserError` unless the shards were made with the vocabulary of this hash.

    `source` names where the shards came from (a directory or pattern), for the message.
    """
    made_with = manifest["vocabulary"]["hash"]
    if made_with != tokenizer_hash:
        raise UserError(
            f"{source}: these shards were made with vocabulary {made_with} but the model's "
            f"vocabulary is {tokenizer_hash}; token ids would not match. Re-run "
            "`bert-jax create-data` with the model's vocab.txt")


def check_settings(manifest: dict, seq_len: int, max_predictions: int, source: str) -> None:
    """Raises `UserError` if the shards were made for another length or prediction count."""
    settings = manifest["settings"]
    for key, wanted in (("max_seq_len", seq_len), ("max_predictions", max_predictions)):
        if settings.get(key) != wanted:
            raise UserError(f"{source}: shards were made with {key}={settings.get(key)}, "
                            f"but {wanted} was asked for")
