"""Raw text to masked-LM-only train and held-out shards, made once in a work directory.

`bert-jax pretrain --model M --text FILE ...` (bert_jax/tasks/continued_pretraining.py)
needs shards of the model's own tokenizer and a held-out split to report a held-out loss,
without asking the user to run `create-data` twice. `prepare_text_shards` makes them under
DIRECTORY (the run's WORKDIR/data) with create-data's own writer (`create_data.py`,
objective mlm: packed [CLS] text [SEP] rows, masks drawn when training reads them), and
records what they were made from in `text_data.json`. A rerun (a resume) finds that record
and the shards' manifests and reuses them; a record of other text, another tokenizer or
other lengths is refused, since the run's position in its data means nothing in other data.

The held-out split is by document (a blank line ends one, in create-data's bert format):
every `stride`-th document, spread over the text so both splits span it; a text of one
document gives its last sentences instead. The text is read twice (a count, then the
split), streaming: nothing but one document is held.
"""

import json
import os
import shutil
import tempfile

from bert_jax.errors import UserError
from bert_jax.storage import files, temporaries
from input_pipeline import manifest as manifest_lib, sources
from input_pipeline.create_data import UNIT_BYTES, create_pretraining_data

RECORD_NAME = "text_data.json"
SEQUENCES_PER_ROW = 3  # create-data --objective mlm's default packing
POOL_BYTES = 8 * UNIT_BYTES  # text below this is tokenized in this process (4 MiB)


def _record(inputs: list[str], tokenizer, seq_len: int, eval_fraction: float, seed: int,
            input_format: str) -> dict:
    """What the shards are a function of: the text (each file's path and size), the
    tokenizer's fingerprint and the shard settings."""
    return dict(text=[dict(path=files.absolute(path), bytes=files.size(path))
                      for path in sources.expand_inputs(inputs)],
                vocabulary=tokenizer.hash, seq_len=seq_len, eval_fraction=eval_fraction,
                seed=seed, input_format=input_format, sequences_per_row=SEQUENCES_PER_ROW)


def _differences(held: dict, wanted: dict) -> list[str]:
    return [f"{key} {held.get(key)!r}, not {wanted[key]!r}" for key in wanted
            if held.get(key) != wanted[key]]


def _split_documents(inputs: list[str], input_format: str, eval_fraction: float):
    """(split, document) of every document, split 'train' or 'eval' (module docstring)."""
    count = sum(1 for _ in sources.read_documents(inputs, input_format))
    if count == 1:  # one document: its last sentences are held out
        (document,) = sources.read_documents(inputs, input_format)
        if len(document) < 2:
            raise UserError(f"{', '.join(inputs)}: one sentence of text; a held-out split "
                            "needs at least two (one sentence a line)")
        cut = min(len(document) - 1, max(1, round(len(document) * (1 - eval_fraction))))
        yield "train", document[:cut]
        yield "eval", document[cut:]
        return
    num_eval = max(1, round(count * eval_fraction))
    stride = count // num_eval
    for index, document in enumerate(sources.read_documents(inputs, input_format)):
        held_out = index % stride == stride // 2 and index // stride < num_eval
        yield ("eval" if held_out else "train"), document


def _write_split_text(inputs, input_format, eval_fraction, directory) -> dict[str, str]:
    """train.txt and eval.txt in `directory`, in create-data's bert format."""
    paths = {split: os.path.join(directory, f"{split}.txt") for split in ("train", "eval")}
    with open(paths["train"], "w", encoding="utf-8") as train, \
            open(paths["eval"], "w", encoding="utf-8") as held_out:
        outputs = {"train": train, "eval": held_out}
        for split, document in _split_documents(inputs, input_format, eval_fraction):
            outputs[split].write("\n".join(document) + "\n\n")
    return paths


def prepare_text_shards(directory: str, inputs: list[str], vocab_path: str, tokenizer, *,
                        seq_len: int, eval_fraction: float = 0.05, seed: int = 12345,
                        input_format: str = "bert", workers: int | None = None,
                        show_progress: bool = True, log=print) -> dict:
    """{'train_files', 'eval_files', 'train_rows', 'eval_rows', 'train_tokens'} of the
    shards in `directory`, made from `inputs` with `vocab_path` (whose loaded `tokenizer`
    gives the fingerprint) unless they are there already (see the module docstring)."""
    wanted = _record(inputs, tokenizer, seq_len, eval_fraction, seed, input_format)
    record_path = files.join(directory, RECORD_NAME)
    if files.exists(record_path):
        with files.open_file(record_path) as file:
            held = json.load(file)
        differences = _differences(held, wanted)
        if differences:
            raise UserError(f"{directory}: holds shards made with {'; '.join(differences)}; "
                            "a run continues on the data it started with: give the same "
                            "text and settings, or another --workdir")
        log(f"reusing the shards in {directory} ({RECORD_NAME} matches)")
    else:
        if files.exists(directory):
            raise UserError(f"{directory}: exists but has no {RECORD_NAME} (not made by "
                            "pretrain --text, or interrupted); move it away or choose "
                            "another --workdir")
        _build(directory, inputs, vocab_path, wanted, workers, show_progress, log)
    return _summary(directory)


def _build(directory, inputs, vocab_path, wanted, workers, show_progress, log):
    """Writes the split text to a local temporary and the shards to a staging directory
    (a hidden sibling of a local `directory`: a rename publishes it; for gs://, local and
    uploaded), then publishes them at `directory` in one step (an interrupted build leaves
    nothing there)."""
    with tempfile.TemporaryDirectory(prefix="bert-jax-text-") as temporary:
        texts = _write_split_text(inputs, wanted["input_format"], wanted["eval_fraction"],
                                  temporary)
        # Worker processes pay off past a few work units; below, starting them costs more.
        if workers is None:
            workers = 1 if files.size(texts["train"]) < POOL_BYTES else os.cpu_count() or 1
        if files.is_remote(directory):
            staging = os.path.join(temporary, "data")
        else:
            files.makedirs(os.path.dirname(os.path.abspath(directory)))
            staging = temporaries.temporary_name(directory)
        try:
            for split, text in texts.items():
                log(f"making the {split} shards from {', '.join(inputs)} "
                    f"({'held out' if split == 'eval' else 'training'} documents) ...")
                create_pretraining_data(
                    [text], vocab_path, os.path.join(staging, split), num_shards=1 if
                    split == "eval" else max(1, min(16, files.size(text) >> 24)),
                    max_seq_len=wanted["seq_len"], seed=wanted["seed"], workers=workers,
                    show_progress=show_progress, objective="mlm",
                    max_sequences_per_row=wanted["sequences_per_row"])
            with open(os.path.join(staging, RECORD_NAME), "w", encoding="utf-8") as file:
                json.dump(wanted, file, indent=2)
            files.publish_directory(staging, directory)
        finally:
            shutil.rmtree(staging, ignore_errors=True)  # already gone after a rename


def _summary(directory: str) -> dict:
    """The shard paths and their sizes, from the manifests (checked as they are read)."""
    summary = {}
    for split in ("train", "eval"):
        path = files.join(directory, split)
        manifest = manifest_lib.read_manifest(path)
        summary[f"{split}_files"] = path
        summary[f"{split}_rows"] = manifest["num_records"]
        summary[f"{split}_tokens"] = manifest["num_tokens"]
    return summary
