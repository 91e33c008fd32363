"""Training data for the loop: the demo corpus, the vocabulary, shard checks, data position.

`prepare_data` resolves the run config's data section (building the demo shards if asked,
taking the vocabulary of `init_from`, setting vocab_size) and refuses shards made with
another vocabulary; `reader_factory` opens the shard reader per process; the data position
goes into each checkpoint and comes back on resume unless the data itself has changed.
"""

import jax

from bert_jax import files
from bert_jax.errors import UserError


def reader_factory(run_config, tokenizer=None):
    """`make(split, batch_size, process_index, process_count)` over the configured shards."""
    from input_pipeline.reader import PretrainingDataset

    def make(split, batch_size, process_index, process_count):
        data = run_config.data
        pattern = data.train_files if split == "train" else data.eval_files
        masking = {}
        if data.dynamic_masking and split == "train":
            masking = dict(dynamic_masking=True, vocab_size=tokenizer.vocab_size,
                           mask_id=tokenizer.mask_id, special_ids=(
                               tokenizer.pad_id, tokenizer.cls_id, tokenizer.sep_id))
        return PretrainingDataset(
            [p for p in pattern.split(",") if p], batch_size, data.seq_len,
            data.max_predictions, seed=run_config.seed if split == "train" else 0,
            shuffle_buffer=data.shuffle_buffer if split == "train" else 1,
            process_index=process_index, process_count=process_count,
            max_sequences_per_row=data.max_sequences_per_row or 1, **masking)
    return make


def _check_shards(run_config, tokenizer, log) -> None:
    """Refuses shards made with another vocabulary, sequence length or prediction count.

    Shards of the original `create_pretraining_data.py` have no manifest: their first
    records are checked (schema, lengths, token ids below the vocabulary size) and a
    warning says that the vocabulary itself could not be.
    """
    from input_pipeline import manifest as manifest_lib
    from input_pipeline.reader import expand_patterns
    from input_pipeline.shard_check import check_first_records

    data = run_config.data
    for pattern in filter(None, (data.train_files + "," + data.eval_files).split(",")):
        directory = pattern if files.isdir(pattern) else files.dirname(pattern)
        if files.exists(files.join(directory, manifest_lib.MANIFEST_NAME)):
            manifest = manifest_lib.read_manifest(directory)
            manifest_lib.check_vocabulary(manifest, tokenizer.hash, pattern)
            manifest_lib.check_settings(manifest, data.seq_len, data.max_predictions, pattern,
                                        data.max_sequences_per_row or 1)
            continue
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


def resolve_shapes(run_config, log=print) -> None:
    """Fills data.seq_len / data.max_predictions left unset (None) from the first training
    shards' manifest.json (the demo's defaults with data.demo_dir); a value that was set stays,
    and `_check_shards` refuses it if the shards disagree."""
    from input_pipeline import manifest as manifest_lib

    data = run_config.data
    unset = [key for key in ("seq_len", "max_predictions") if data[key] is None]
    if not unset:
        return
    if data.demo_dir:
        for key in unset:
            data[key] = PHASE_ONE_SHAPES[key]
        return
    names = " and ".join(f"data.{key}" for key in unset)
    for pattern in filter(None, data.train_files.split(",")):
        directory = pattern if files.isdir(pattern) else files.dirname(pattern)
        if files.exists(files.join(directory, manifest_lib.MANIFEST_NAME)):
            settings = manifest_lib.read_manifest(directory)["settings"]
            for key in unset:
                data[key] = settings["max_seq_len" if key == "seq_len" else key]
            log(f"{names} from {files.join(directory, manifest_lib.MANIFEST_NAME)}: "
                + ", ".join(f"{key} {data[key]}" for key in unset))
            return
    if data.train_files:
        from input_pipeline.reader import expand_patterns

        expand_patterns([p for p in data.train_files.split(",") if p])  # no shards: says so
    where = (f"the shards {data.train_files} have no {manifest_lib.MANIFEST_NAME}"
             if data.train_files else "data.train_files is not set")
    raise UserError(f"{names} unset, and {where} to take them from; set "
                    + " ".join(f"--config.data.{key}=N" for key in unset)
                    + " (the lengths the shards were made with)")


def resolve_packing(run_config, log=print) -> None:
    """Fills data.max_sequences_per_row left unset (None) from the first training shards'
    manifest: packed shards say how many instances a row holds; shards without a manifest
    (the original tool's) and the demo's are unpacked (1)."""
    from input_pipeline import manifest as manifest_lib

    data = run_config.data
    if data.max_sequences_per_row is not None:
        return
    data.max_sequences_per_row = 1
    for pattern in filter(None, data.train_files.split(",")):
        directory = pattern if files.isdir(pattern) else files.dirname(pattern)
        if files.exists(files.join(directory, manifest_lib.MANIFEST_NAME)):
            data.max_sequences_per_row = manifest_lib.sequences_per_row(
                manifest_lib.read_manifest(directory))
            if data.max_sequences_per_row > 1:
                log(f"data.max_sequences_per_row from {directory}: packed shards, up to "
                    f"{data.max_sequences_per_row} instances a row (batch_size counts rows)")
            return


def prepare_data(run_config, log=print):
    """Resolves the demo data, the shapes, the vocabulary and vocab_size; returns the
    tokenizer or None."""
    data = run_config.data
    resolve_shapes(run_config, log)
    resolve_packing(run_config, log)
    if data.demo_dir:
        from input_pipeline.demo_corpus import prepare_demo_data

        paths = prepare_demo_data(data.demo_dir, vocab_size=data.demo_vocab_size,
                                  seq_len=data.seq_len, max_predictions=data.max_predictions)
        for key, value in paths.items():
            if not data[key]:
                data[key] = value
    if not data.vocab_path and run_config.init_from:
        from bert_jax.interop import model_source

        # Continued pre-training keeps its vocabulary, wherever the source kind keeps it.
        data.vocab_path = model_source.resolve(run_config.init_from).vocab_path or ""
    if not data.vocab_path:
        if not run_config.model.vocab_size:
            raise UserError("set data.vocab_path (the vocab.txt the shards were made with)")
        if data.dynamic_masking:
            raise UserError("data.dynamic_masking needs data.vocab_path: the [MASK] id, the "
                            "special tokens and the random replacements come from it")
        return None
    from input_pipeline.tokenization import load_tokenizer

    tokenizer = load_tokenizer(data.vocab_path)
    if not run_config.model.vocab_size:
        run_config.model.vocab_size = tokenizer.vocab_size
    elif run_config.model.vocab_size < tokenizer.vocab_size:
        raise UserError(f"model.vocab_size {run_config.model.vocab_size} is smaller than the "
                        f"{tokenizer.vocab_size} tokens of {data.vocab_path}")
    if data.train_files:
        _check_shards(run_config, tokenizer, log)
    return tokenizer


def data_source(run_config) -> dict:
    data = run_config.data
    source = dict(train_files=data.train_files, seq_len=data.seq_len,
                  max_predictions=data.max_predictions, batch_size=run_config.batch_size)
    if (data.max_sequences_per_row or 1) > 1:  # unpacked runs keep the checkpoints' key set
        source["max_sequences_per_row"] = data.max_sequences_per_row
    return source


def restore_position(dataset, meta, run_config, log) -> None:
    """Puts the data stream where the checkpoint left it, unless the data has changed."""
    if meta is None:
        return
    if meta.get("data_source") != data_source(run_config):
        log(f"the data differs from the checkpoint's ({meta.get('data_source')}); the new data "
            "starts from its beginning (e.g. phase 2 of a two-phase run)")
        return
    if len(meta["data"]) != jax.process_count():
        log(f"the checkpoint was written by {len(meta['data'])} process(es), this run has "
            f"{jax.process_count()}; the data starts from its beginning")
        return
    dataset.restore(meta["data"][jax.process_index()])
