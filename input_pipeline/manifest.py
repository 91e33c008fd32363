"""`manifest.json`, written beside the shards: what they hold and how they were made.

Training reads it to refuse shards made with another vocabulary (`check_vocabulary`), and
the reader takes per-shard instance counts from it. Shards made by the original
`create_pretraining_data.py` have no manifest; they are still readable, just unchecked.

Packed shards (`create-data --pack`) are written as manifest version 2, unpacked ones as
version 1: a bert-jax from before packing refuses packed shards by their manifest's
version instead of reading their rows as single instances. Masked-LM-only shards
(`create-data --objective mlm`: no pairs, no masks, which the reader draws) are version 3,
so a bert-jax from before them refuses them the same way; this one reads all three.
"""

import json

from bert_jax.storage import files
from bert_jax.errors import UserError

MANIFEST_NAME = "manifest.json"
FORMAT = "bert-jax-pretraining-shards"
VERSION = 1  # unpacked shards
PACKED_VERSION = 2  # packed shards: rows of several instances
MLM_VERSION = 3  # objective mlm: sequences without pairs or masks, packed or not


def write_manifest(directory: str, manifest: dict) -> str:
    """Writes `manifest.json` atomically (temp name, then rename); returns its path."""
    path = files.join(directory, MANIFEST_NAME)
    with files.atomic_write(path) as file:
        version = (MLM_VERSION if objective_of(manifest) == "mlm" else
                   PACKED_VERSION if manifest.get("packed") else VERSION)
        json.dump(dict(manifest, format=FORMAT, version=version), file, indent=1, sort_keys=True)
        file.write("\n")
    return path


def read_manifest(directory: str) -> dict:
    """The manifest of a shard directory (or the path of a manifest.json itself).

    Keys: `shards` (list of {file, num_records}), `num_instances`, `settings` (every
    create-data setting), `vocabulary` ({hash, size, lowercase}), `format`, `version`;
    from packing on also `packed`, `num_records` and `real_token_fraction`.
    """
    path = directory if directory.endswith(".json") else files.join(directory, MANIFEST_NAME)
    if not files.exists(path):
        raise UserError(f"{path}: no shard manifest here; expected the output directory of "
                        "`bert-jax create-data`")
    try:
        with files.open_file(path) as file:
            manifest = json.load(file)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise UserError(f"{path}: manifest is not valid JSON ({error})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise UserError(f"{path}: not a bert-jax shard manifest (expected format {FORMAT!r})")
    if manifest.get("version") not in (VERSION, PACKED_VERSION, MLM_VERSION):
        raise UserError(f"{path}: manifest version {manifest.get('version')!r}; this bert-jax "
                        f"reads versions {VERSION} to {MLM_VERSION}")
    for key in ("shards", "settings", "vocabulary", "num_instances"):
        if key not in manifest:
            raise UserError(f"{path}: manifest lacks the key {key!r}")
    for shard in manifest["shards"]:
        _check_shard_name(shard.get("file") if isinstance(shard, dict) else None, path)
    return manifest


def expand_patterns(file_patterns: list[str]) -> list[str]:
    """Sorted shard paths: globs, files, or shard directories (no TensorFlow: training's
    checks run before any reader).

    A directory with a manifest gives the shards it lists; without one, every *.tfrecord.
    """
    if isinstance(file_patterns, str):
        file_patterns = [file_patterns]
    paths = []
    for pattern in file_patterns:
        if files.isdir(pattern) and files.exists(files.join(pattern, MANIFEST_NAME)):
            shards = read_manifest(pattern)["shards"]
            matches = [files.join(pattern, shard["file"]) for shard in shards]
        else:
            matches = files.expand(pattern, "*.tfrecord")
        if not matches:
            raise UserError(f"{pattern}: no shard files match")
        paths.extend(matches)
    return sorted(set(paths))


def _check_shard_name(name, path: str) -> None:
    """A shard is a plain file name in the manifest's directory: a manifest must not make the
    reader open `../../anything`, an absolute path or another bucket."""
    if (not isinstance(name, str) or name in ("", ".", "..") or "/" in name or "\\" in name
            or "://" in name):
        raise UserError(f"{path}: shard name {name!r} is not a plain file name in this "
                        "directory; a manifest lists its shards by name, without any path")


def check_vocabulary(manifest: dict, tokenizer_hash: str, source: str) -> None:
    """Raises `UserError` unless the shards were made with the vocabulary of this hash.

    `source` names where the shards came from (a directory or pattern), for the message.
    """
    made_with = manifest["vocabulary"]["hash"]
    if made_with != tokenizer_hash:
        raise UserError(
            f"{source}: these shards were made with vocabulary {made_with} but the model's "
            f"vocabulary is {tokenizer_hash}; token ids would not match. Re-run "
            "`bert-jax create-data` with the model's vocabulary (its vocab.txt, "
            "sentencepiece.model or tokenizer.json)")


def records_in_shard(shard: dict) -> int:
    """A manifest shard entry's record count (before packing, manifests said num_instances)."""
    return shard["num_records"] if "num_records" in shard else shard["num_instances"]


def sequences_per_row(manifest: dict) -> int:
    """How many instances a record holds at most (1: unpacked, as before packing)."""
    return int(manifest["settings"].get("max_sequences_per_row", 1))


def objective_of(manifest: dict) -> str:
    """The objective the shards were made for: mlm_nsp (BERT's pairs; every manifest from
    before objective mlm) or mlm."""
    return manifest["settings"].get("objective", "mlm_nsp")


def check_objective(manifest: dict, objective: str, source: str) -> None:
    """Raises `UserError` naming both objectives if the shards were made for another one."""
    made_for = objective_of(manifest)
    if made_for != objective:
        made_with = "create-data --objective mlm" if made_for == "mlm" else "create-data"
        raise UserError(f"{source}: these shards were made for objective {made_for} "
                        f"({made_with}) but the run's objective is {objective}; set "
                        f"--config.objective={made_for} or make shards with --objective "
                        f"{objective}")


def check_settings(manifest: dict, seq_len: int, max_predictions: int, source: str,
                   max_sequences_per_row: int = 1) -> None:
    """Raises `UserError` if the shards were made for another length, prediction count or
    packing (objective mlm's shards hold no predictions: the reader draws them)."""
    settings = dict(manifest["settings"], max_sequences_per_row=sequences_per_row(manifest))
    checked = [("max_seq_len", seq_len, "seq_len")]
    if objective_of(manifest) != "mlm":
        checked.append(("max_predictions", max_predictions, "max_predictions"))
    for key, wanted, config_key in checked + [("max_sequences_per_row", max_sequences_per_row,
                                               "max_sequences_per_row")]:
        if settings.get(key) != wanted:
            raise UserError(f"{source}: shards were made with {key}={settings.get(key)}, "
                            f"but {wanted} was asked for (data.{config_key}; leave it unset "
                            "to take the shards' value)")
