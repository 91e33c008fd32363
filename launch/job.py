"""One TPU job, described by one TOML file and checked before any gcloud call is made.

    name = "bert-large"                  # TPU VM name (and queued-resource name)
    project = "my-gcp-project"
    zone = "us-central2-b"
    accelerator_type = "v4-64"
    runtime_version = "tpu-ubuntu2204-base"
    spot = true                          # optional, default false
    queued = false                       # optional, default false
    workdir = "gs://my-bucket/bert-large"

    [code]                               # what `setup` installs on every worker
    repository = "https://github.com/me/bert-jax.git"
    revision = "main"

    [train]                              # what `run` starts on every worker
    config = "configs/bert_large.py"
    [train.overrides]                    # --config.KEY=VALUE for bert-jax pretrain
    batch_size = 256
    "data.train_files" = "gs://my-bucket/shards/train"
    "data.vocab_path" = "gs://my-bucket/shards/vocab.txt"

    [env]                                # optional extra environment for the run
    TF_CPP_MIN_LOG_LEVEL = "2"
"""

import dataclasses
import re
import tomllib
from typing import Any

from bert_jax.errors import UserError
from launch.tpu_types import AcceleratorType, parse_accelerator_type

# key -> (expected Python type, required); the one place that says what a job file holds.
_TOP_LEVEL = {
    "name": (str, True), "project": (str, True), "zone": (str, True),
    "accelerator_type": (str, True), "runtime_version": (str, True),
    "spot": (bool, False), "queued": (bool, False), "workdir": (str, True),
    "code": (dict, True), "train": (dict, True), "env": (dict, False),
}
_CODE = {"repository": (str, True), "revision": (str, False)}
_TRAIN = {"config": (str, True), "overrides": (dict, False)}
# gcloud resource names: lowercase letter first, then lowercase letters, digits and hyphens.
_NAME_PATTERN = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")
_ENV_NAME_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclasses.dataclass(frozen=True)
class Job:
    path: str  # the TOML file it came from, for messages
    name: str  # TPU VM node id; also the queued resource id when queued
    project: str  # GCP project id
    zone: str  # e.g. us-central2-b
    accelerator: AcceleratorType  # parsed accelerator_type: generation and size
    runtime_version: str  # TPU VM software image, e.g. tpu-ubuntu2204-base
    spot: bool  # spot capacity: cheaper, preemptible at any time
    queued: bool  # ask through `queued-resources`: wait for capacity instead of failing
    workdir: str  # gs:// directory: checkpoints, config, logs; survives the slice
    repository: str  # git URL of bert-jax that `setup` clones on every worker
    revision: str  # branch, tag or commit to install
    train_config: str  # path of the pretrain config, relative to the repository root
    overrides: tuple[tuple[str, Any], ...]  # dotted config key -> value, in file order
    env: tuple[tuple[str, str], ...]  # extra environment variables for the run

    @property
    def num_workers(self) -> int:
        return self.accelerator.num_workers


def _check_keys(table: dict, schema: dict, where: str) -> None:
    unknown = sorted(set(table) - set(schema))
    if unknown:
        raise UserError(f"{where}: unknown key(s) {unknown}; expected some of {sorted(schema)}")
    for key, (expected_type, required) in schema.items():
        if key not in table:
            if required:
                raise UserError(f"{where}: missing required key {key!r}")
            continue
        value = table[key]
        # bool is a subclass of int in Python; no key here takes a number, so `isinstance` is exact.
        if not isinstance(value, expected_type):
            kind = {str: "a string", bool: "true or false", dict: "a table"}[expected_type]
            raise UserError(f"{where}: key {key!r} must be {kind}, got {value!r}")


def _flatten(table: dict, prefix: str = "") -> list[tuple[str, Any]]:
    """{"train": {"steps": 5}} and {"train.steps": 5} both become [("train.steps", 5)]."""
    items = []
    for key, value in table.items():
        if isinstance(value, dict):
            items.extend(_flatten(value, f"{prefix}{key}."))
        else:
            items.append((f"{prefix}{key}", value))
    return items


def _read_toml(path: str) -> dict:
    try:
        with open(path, "rb") as file:
            return tomllib.load(file)
    except FileNotFoundError:
        raise UserError(f"job file {path} does not exist") from None
    except tomllib.TOMLDecodeError as error:
        raise UserError(f"job file {path} is not valid TOML: {error}") from None


def load_job(path: str) -> Job:
    """Reads and validates a job file; every problem names the file and the key."""
    values = _read_toml(path)
    _check_keys(values, _TOP_LEVEL, path)
    _check_keys(values["code"], _CODE, f"{path} [code]")
    _check_keys(values["train"], _TRAIN, f"{path} [train]")
    if not _NAME_PATTERN.fullmatch(values["name"]):
        raise UserError(f"{path}: key 'name' must be 1-63 lowercase letters, digits or hyphens, "
                        f"starting with a letter, got {values['name']!r}")
    if not values["workdir"].startswith("gs://"):
        raise UserError(
            f"{path}: key 'workdir' must be a gs:// path, got {values['workdir']!r}: every "
            "worker writes checkpoints there and a preempted slice loses its disks")
    env = values.get("env", {})
    for key, value in env.items():
        if (not _ENV_NAME_PATTERN.fullmatch(key) or not isinstance(value, str)
                or "\n" in value):
            raise UserError(f"{path} [env]: {key!r} must be a variable name with a one-line "
                            "string value")
    overrides = _flatten(values["train"].get("overrides", {}))
    for key, value in overrides:
        # One line each: the remote command, and its dry-run print, stay one line.
        if not isinstance(value, (str, int, float, bool)) or "\n" in str(value):
            raise UserError(f"{path} [train.overrides]: {key!r} must be a one-line string, "
                            f"a number or a boolean, got {value!r}")
    return Job(
        path=path, name=values["name"], project=values["project"], zone=values["zone"],
        accelerator=parse_accelerator_type(values["accelerator_type"],
                                           f"{path}: key 'accelerator_type'"),
        runtime_version=values["runtime_version"], spot=values.get("spot", False),
        queued=values.get("queued", False), workdir=values["workdir"].rstrip("/"),
        repository=values["code"]["repository"],
        revision=values["code"].get("revision", "main"),
        train_config=values["train"]["config"], overrides=tuple(overrides),
        env=tuple(env.items()))


def override_arguments(job: Job) -> list[str]:
    """`--config.key=value` for each override, as `bert-jax pretrain` reads them (TOML's
    true becomes "True", which the run config's parser accepts)."""
    return [f"--config.{key}={value}" for key, value in job.overrides]
