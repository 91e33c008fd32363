"""Pre-training's data: the demo corpus, the vocabulary, the shards' shapes and checks, the reader.

`prepare_data` resolves a run config's data section without changing it: it builds the demo
shards if asked, takes the vocabulary of `init_from` (whose path the caller found, having
resolved the model), reads the lengths and packing the shards were made with, sizes the
model's vocabulary from its vocabulary file and refuses shards made with another vocabulary
or for another objective (objective mlm: data.max_predictions is the slots of its masking
schedule, not the shards'). It returns the settings it derived; the caller applies them
(`apply_settings`) before the trainer starts, so run_config.json records them.
`reader_factory` opens the shard reader per process. `prepare_run` does all of it for
`bert-jax pretrain` and its pod rehearsal (`preflight.py`): the task, the reader and
init_from's weights (read only on a fresh start).
"""

import dataclasses
import functools
from typing import Any, Callable, NamedTuple

import ml_collections

from bert_jax.storage import files
from bert_jax.errors import UserError
from input_pipeline import mixture_config


@dataclasses.dataclass(frozen=True)
class PreparedData:
    """What `prepare_data` derived from a run config's data section."""
    settings: dict[str, Any]  # run-config key ('data.seq_len', 'model.vocab_size') -> value
    tokenizer: Any  # the tokenizer of data.vocab_path, or None without a vocabulary


def apply_settings(run_config, settings: dict[str, Any]) -> None:
    """Writes `PreparedData.settings` into the run config (before the trainer records it)."""
    for key, value in settings.items():
        section, name = key.split(".")
        run_config[section][name] = value


def _read_time_masks(data, split: str, tokenizer, objective: str) -> dict:
    """The reader's masking arguments: objective mlm's masks at the schedule's rates (held-out
    rows always at data.masking_rate, with the same masks at every evaluation, so the
    evaluations of a run compare), or data.dynamic_masking's; {} for the shards' masks."""
    from input_pipeline import masking_schedule

    if objective == "mlm":
        schedule = (masking_schedule.schedule_of(data) if split == "train"
                    else masking_schedule.MaskingSchedule((data.masking_rate,)))
        # Never a special token, [MASK] written in the text included (transformers' collator
        # skips every special token too).
        return dict(objective="mlm", masking_schedule=schedule,
                    vocab_size=tokenizer.vocab_size, mask_id=tokenizer.mask_id,
                    special_ids=tuple(sorted({*tokenizer.special_ids, tokenizer.mask_id})))
    if data.dynamic_masking and split == "train":
        return dict(dynamic_masking=True, vocab_size=tokenizer.vocab_size,
                    mask_id=tokenizer.mask_id, masked_lm_prob=data.masking_rate,
                    special_ids=tokenizer.special_ids)
    return {}


def reader_factory(data, seed: int, tokenizer=None, objective: str = "mlm_nsp", log=print):
    """`make(split, batch_size, process_index, process_count)` over the shards of the run
    config's (prepared) data section, its training split a mixture where data.sources
    names one (`mixture_data.py`); `seed` orders the training data (and draws objective
    mlm's masks)."""
    from bert_jax.tasks import mixture_data
    from input_pipeline.reader import PretrainingDataset

    def make(split, batch_size, process_index, process_count):
        pattern = data.train_files if split == "train" else data.eval_files
        masking = _read_time_masks(data, split, tokenizer, objective)
        if split == "train" and mixture_config.is_mixture(data):
            return mixture_data.open_mixture(data, seed, batch_size, process_index,
                                             process_count, masking, log)
        return PretrainingDataset(
            [p for p in pattern.split(",") if p], batch_size, data.seq_len,
            data.max_predictions, seed=seed if split == "train" else 0,
            shuffle_buffer=data.shuffle_buffer if split == "train" else 1,
            process_index=process_index, process_count=process_count,
            max_sequences_per_row=data.max_sequences_per_row or 1, **masking)
    return make


def _manifest_directory(pattern: str) -> str | None:
    """The directory of a shard pattern (a directory or a file glob), if it holds the
    manifest.json that `create-data` writes; None for the original tool's shards."""
    from input_pipeline import manifest as manifest_lib

    directory = pattern if files.isdir(pattern) else files.dirname(pattern)
    return directory if files.exists(files.join(directory, manifest_lib.MANIFEST_NAME)) else None


def _check_shards(data, tokenizer, log, objective: str = "mlm_nsp") -> None:
    """Refuses shards made with another vocabulary, sequence length, prediction count or
    objective.

    Shards of the original `create_pretraining_data.py` have no manifest: their first
    records are checked (schema, lengths, token ids below the vocabulary size) and a
    warning says that the vocabulary itself could not be.
    """
    from input_pipeline import manifest as manifest_lib
    from input_pipeline.manifest import expand_patterns
    from input_pipeline.shard_check import check_first_records

    for pattern in filter(None, (data.train_files + "," + data.eval_files).split(",")):
        directory = _manifest_directory(pattern)
        if directory is not None:
            manifest = manifest_lib.read_manifest(directory)
            manifest_lib.check_objective(manifest, objective, pattern)
            manifest_lib.check_vocabulary(manifest, tokenizer.hash, pattern)
            manifest_lib.check_settings(manifest, data.seq_len, data.max_predictions, pattern,
                                        data.max_sequences_per_row or 1)
            continue
        if objective == "mlm":
            raise UserError(f"{pattern}: no {manifest_lib.MANIFEST_NAME}: objective mlm reads "
                            "the shards of create-data --objective mlm, which have one; shards "
                            "without are the original tool's, for objective mlm_nsp")
        first = expand_patterns([pattern])[0]
        checked = check_first_records(first, data.seq_len, data.max_predictions,
                                      tokenizer.vocab_size)
        log(f"warning: {pattern}: no {manifest_lib.MANIFEST_NAME} (shards of the original "
            f"create_pretraining_data.py?): the first {checked} record(s) of {first} have the "
            f"schema, seq_len {data.seq_len}, max_predictions {data.max_predictions} and ids "
            f"below {tokenizer.vocab_size}, but that they were made with {data.vocab_path} "
            "cannot be checked")


# The original phase-1 shards' shapes: what data.demo_dir builds when data.seq_len /
# data.max_predictions are unset (and what `bert-jax aot` compiles for without shards).
PHASE_ONE_SHAPES = dict(seq_len=128, max_predictions=20)


def shard_shapes(data, log=print, objective: str = "mlm_nsp") -> dict[str, int]:
    """data.seq_len / data.max_predictions left unset (None) -> their values, from the first
    training shards' manifest.json (the demo's defaults with data.demo_dir); a value that was
    set is not returned, and `_check_shards` refuses it if the shards disagree. Objective
    mlm's shards hold no masks: its max_predictions is the slots of its masking schedule at
    that seq_len (`masking_schedule.py`), and a value set below them is refused."""
    from input_pipeline.masking_schedule import schedule_of

    if objective != "mlm":
        return _manifest_shapes(data, [key for key in ("seq_len", "max_predictions")
                                       if data[key] is None], log)
    shapes = _manifest_shapes(data, ["seq_len"] if data.seq_len is None else [], log)
    seq_len = shapes.get("seq_len", data.seq_len)
    schedule = schedule_of(data)
    slots = schedule.prediction_slots(seq_len)
    if data.max_predictions is None:
        shapes["max_predictions"] = slots
    elif data.max_predictions < slots:
        raise UserError(f"data.max_predictions {data.max_predictions} is fewer than the {slots} "
                        f"masked positions a row of {seq_len} tokens can have at the highest "
                        f"masking rate, {schedule.highest:g}; leave it unset (objective mlm "
                        "sizes it from the schedule) or raise it")
    return shapes


def _manifest_shapes(data, unset: list[str], log) -> dict[str, int]:
    """The `unset` keys' values from the first training shards' manifest (see shard_shapes)."""
    from input_pipeline import manifest as manifest_lib

    if not unset:
        return {}
    if data.demo_dir and not data.train_files:
        return {key: PHASE_ONE_SHAPES[key] for key in unset}
    names = " and ".join(f"data.{key}" for key in unset)
    for pattern in filter(None, data.train_files.split(",")):
        directory = _manifest_directory(pattern)
        if directory is not None:
            settings = manifest_lib.read_manifest(directory)["settings"]
            shapes = {key: settings["max_seq_len" if key == "seq_len" else key] for key in unset}
            log(f"{names} from {files.join(directory, manifest_lib.MANIFEST_NAME)}: "
                + ", ".join(f"{key} {value}" for key, value in shapes.items()))
            return shapes
    if data.train_files:
        from input_pipeline.manifest import expand_patterns

        expand_patterns([p for p in data.train_files.split(",") if p])  # no shards: says so
    where = (f"the shards {data.train_files} have no {manifest_lib.MANIFEST_NAME}"
             if data.train_files else "data.train_files is not set")
    raise UserError(f"{names} unset, and {where} to take them from; set "
                    + " ".join(f"--config.data.{key}=N" for key in unset)
                    + " (the lengths the shards were made with)")


def sequences_per_row(data, log=print, objective: str = "mlm_nsp") -> int:
    """data.max_sequences_per_row, or where unset (None) the first training shards' manifest's:
    packed shards say how many instances a row holds; shards without a manifest (the
    original tool's) and the demo's are unpacked (1), objective mlm's demo packed."""
    from input_pipeline import manifest as manifest_lib
    from input_pipeline.demo_corpus import MLM_SEQUENCES_PER_ROW

    if data.max_sequences_per_row is not None:
        return data.max_sequences_per_row
    if data.demo_dir and objective == "mlm" and not data.train_files:
        return MLM_SEQUENCES_PER_ROW
    for pattern in filter(None, data.train_files.split(",")):
        directory = _manifest_directory(pattern)
        if directory is not None:
            per_row = manifest_lib.sequences_per_row(manifest_lib.read_manifest(directory))
            if per_row > 1:
                log(f"data.max_sequences_per_row from {directory}: packed shards, up to "
                    f"{per_row} instances a row (batch_size counts rows)")
            return per_row
    return 1


def _vocab_size(data, model_vocab_size: int, log, objective: str = "mlm_nsp"):
    """(tokenizer, vocab_size) of data.vocab_path, (None, the model's) without one."""
    if not data.vocab_path:
        if not model_vocab_size:
            raise UserError("set data.vocab_path (the vocabulary the shards were made with: "
                            "vocab.txt, a SentencePiece .model or a tokenizer.json)")
        if data.dynamic_masking or objective == "mlm":
            needs = "objective mlm" if objective == "mlm" else "data.dynamic_masking"
            raise UserError(f"{needs} needs data.vocab_path: the [MASK] id, the "
                            "special tokens and the random replacements come from it")
        return None, model_vocab_size
    from input_pipeline.tokenization import load_tokenizer

    tokenizer = load_tokenizer(data.vocab_path)
    if model_vocab_size and model_vocab_size < tokenizer.vocab_size:
        raise UserError(f"model.vocab_size {model_vocab_size} is smaller than the "
                        f"{tokenizer.vocab_size} tokens of {data.vocab_path}")
    if data.train_files:
        _check_shards(data, tokenizer, log, objective)
    return tokenizer, model_vocab_size or tokenizer.vocab_size


def prepare_data(run_config, log=print,
                 init_vocab_path: Callable[[], str | None] | None = None) -> PreparedData:
    """Resolves the demo data, the shapes, the packing, the vocabulary and vocab_size.

    `init_vocab_path()`: the vocabulary file of `init_from`'s model, or None if it has none;
    asked only when data.vocab_path is unset (continued pre-training keeps its
    vocabulary). The run config is left as it is: the settings come back, to be applied by
    the caller.
    """
    data = ml_collections.ConfigDict(run_config.data.to_dict())  # derived values go here
    objective = run_config.objective
    if mixture_config.is_mixture(data):  # every source's shards are checked as train_files'
        mixture_config.check_sources(run_config, "run config")
        data.train_files = mixture_config.all_files(data)
    data.update(shard_shapes(data, log, objective))
    data.max_sequences_per_row = sequences_per_row(data, log, objective)
    # The demo corpus stands in for shards only where none are given: with the user's own
    # (and their model's vocabulary) its tokenizer and held-out shards would be refused.
    if data.demo_dir and not data.train_files:
        from input_pipeline.demo_corpus import prepare_demo_data

        paths = prepare_demo_data(data.demo_dir, vocab_size=data.demo_vocab_size,
                                  seq_len=data.seq_len, max_predictions=data.max_predictions,
                                  objective=objective, vocab_type=data.demo_vocab_type)
        for key, value in paths.items():
            if not data[key]:
                data[key] = value
    if not data.vocab_path and init_vocab_path is not None:
        data.vocab_path = init_vocab_path() or ""
    tokenizer, vocab_size = _vocab_size(data, run_config.model.vocab_size, log, objective)
    settings = {f"data.{key}": value for key, value in data.items()
                if value != run_config.data[key]
                and not (key == "train_files" and mixture_config.is_mixture(data))}
    if vocab_size != run_config.model.vocab_size:
        settings["model.vocab_size"] = vocab_size
    return PreparedData(settings=settings, tokenizer=tokenizer)


def init_from_source(path: str):
    """(vocab_path(), init_weights()) of the model --config.init_from names: the one place
    pre-training reads that model. Both are asked only when needed: the vocabulary when
    data.vocab_path is unset, the weights when the run starts fresh (not on a resume)."""
    from bert_jax.interop import model_source

    # Resolved on first use: a resumed run whose init_from has since been deleted needs neither.
    source = functools.cache(lambda: model_source.resolve(path))
    return (lambda: source().vocab_path), (lambda: source().load())


class PretrainingRun(NamedTuple):
    """What `trainer.train` takes for a pre-training run, and the run's tokenizer."""
    task: Any  # tasks.pretraining.PretrainingTask of the completed run config
    dataset_factory: Callable  # the shard reader, per process
    init_weights: Callable | None  # init_from's weights, None without init_from
    tokenizer: Any  # data.vocab_path's, or None without a vocabulary


def prepare_run(run_config, log=print, source=None) -> PretrainingRun:
    """Completes `run_config`'s data section (demo shards, shapes, packing, vocabulary,
    model.vocab_size: `prepare_data` above) in place, before the trainer records
    it, and gives the task, the shard reader and init_from's weights. `source`: init_from's
    `ModelSource` when the caller has resolved it already (continued_pretraining.py)."""
    from bert_jax.tasks import pretraining

    if source is not None:
        init_vocab_path, init_weights = (lambda: source.vocab_path), source.load
    elif run_config.init_from:
        init_vocab_path, init_weights = init_from_source(run_config.init_from)
    else:
        init_vocab_path, init_weights = None, None
    prepared = prepare_data(run_config, log, init_vocab_path)
    apply_settings(run_config, prepared.settings)
    return PretrainingRun(
        task=pretraining.task_from_run_config(run_config),
        dataset_factory=reader_factory(run_config.data, run_config.seed, prepared.tokenizer,
                                       run_config.objective, log),
        init_weights=init_weights, tokenizer=prepared.tokenizer)
