"""The shard writer: raw text to pre-masked TFRecord shards, streaming, on every core.

Objective mlm_nsp (the default) writes BERT's masked segment pairs; objective mlm writes
masked-LM-only rows, unmasked, for masks drawn when rows are read (`work_unit.py`).

The original `create_pretraining_data.py` reads the whole corpus, makes every instance,
shuffles them all in memory and writes them from one core: 70 GB and days on English
Wikipedia (google-research/bert#117, #1270, #89). Here the corpus streams through in
*work units*: consecutive documents holding about `UNIT_BYTES` of text. Why each choice:

- Bounded memory: the main process holds at most 2 x workers units in flight (text in,
  serialized records out) and never the corpus; a unit's instances are shuffled within
  the unit (all its dupes together), so no global shuffle buffer is needed. The reader's
  file interleave and shuffle buffer mix across units at training time.
- Random-next segments come from another document of the same unit (a window of about
  512 KB of text: dozens of books' chapters, hundreds of Wikipedia articles) instead of
  the whole corpus: the original's goal, a segment from an unrelated document, is met
  without holding the corpus.
- Determinism: units are cut by the main process in corpus order, every random draw of a
  unit is seeded by (seed, unit, dupe), and results are written in unit order, so the
  shards are byte-identical whatever the worker count.
- Records go to shards round-robin in that order, so shard sizes differ by at most one.
  The main process reads the text and writes the records; workers tokenise, build, mask
  and serialise. Writing took 2.3 us of CPU per 600-byte record here, so the main loop
  bounds scaling at about 400,000 instances/s (some 8 workers at ~50,000 each).
- Each shard is written under a temporary name and renamed when all are complete; then
  `manifest.json` (counts, settings, vocabulary hash) is written, also atomically. On any
  error the temporary files are removed: no half-written shard is left.
"""

import collections
import contextlib
import itertools
import multiprocessing
import os
import re
import shutil
import tempfile

from bert_jax.storage import files, temporaries
from bert_jax.errors import UserError
from bert_jax.storage.storage_errors import reported
from input_pipeline import manifest as manifest_lib, schema, sources
from input_pipeline.tokenization import load_tokenizer
from input_pipeline.work_unit import Settings, UnitResult, process_unit

_SHARD_NAME = re.compile(r"shard-\d{5}-of-\d{5}\.tfrecord")
UNIT_BYTES = 1 << 19  # text per work unit: big enough to batch well, small to bound memory
_WORKER_STATE = {}


def _init_worker(vocab_path: str, lowercase: bool | None, settings: Settings) -> None:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    _WORKER_STATE.update(tokenizer=load_tokenizer(vocab_path, lowercase), settings=settings)


def _run_unit(unit_index: int, documents: list[list[str]]) -> UnitResult:
    return process_unit(unit_index, documents, _WORKER_STATE["tokenizer"],
                        _WORKER_STATE["settings"])


def work_units(documents, unit_bytes: int, stats: sources.ReadStats):
    """(index, documents, input bytes read so far) of consecutive documents holding about
    `unit_bytes` of text."""
    unit, size, index = [], 0, 0
    for document in documents:
        unit.append(document)
        size += sum(len(sentence) for sentence in document) + len(document)
        if size >= unit_bytes:
            yield index, unit, stats.bytes_read
            unit, size, index = [], 0, index + 1
    if unit:
        yield index, unit, stats.bytes_read


def _first_unit_read(units):
    """`units` with the first one already read: an empty, undecodable or cut-short input
    (all of a small one) fails here, in a fraction of a second, as `vocab` does, rather
    than after TensorFlow is imported and the workers have started (4-9 s)."""
    units = iter(units)
    first = next(units, None)
    return itertools.chain([] if first is None else [first], units)


def _results_in_order(units, workers: int, initargs: tuple):
    """(result, bytes read) of each unit in unit order; at most 2 x workers in flight."""
    if workers <= 1:
        _init_worker(*initargs)
        for index, documents, bytes_read in units:
            yield _run_unit(index, documents), bytes_read
        return
    # spawn, not fork: the parent may hold TensorFlow's and tokenizers' threads.
    context = multiprocessing.get_context("spawn")
    with context.Pool(workers, initializer=_init_worker, initargs=initargs) as pool:
        pending = collections.deque()
        for index, documents, bytes_read in units:
            pending.append((pool.apply_async(_run_unit, (index, documents)), bytes_read))
            if len(pending) >= 2 * workers:
                result, bytes_read = pending.popleft()
                yield result.get(), bytes_read
        while pending:
            result, bytes_read = pending.popleft()
            yield result.get(), bytes_read


def validate_settings(settings: Settings, num_shards: int, workers: int) -> None:
    problems = []
    if settings.objective not in schema.OBJECTIVES:
        problems.append(f"--objective {settings.objective!r}: expected one of "
                        f"{', '.join(schema.OBJECTIVES)}")
    if settings.objective == "mlm":
        if settings.max_seq_len < 3:
            problems.append(f"--max-seq-len {settings.max_seq_len}: need at least 3 "
                            "([CLS] text [SEP])")
    elif settings.max_seq_len < 5:
        problems.append(f"--max-seq-len {settings.max_seq_len}: need at least 5 "
                        "([CLS] A [SEP] B [SEP])")
    if settings.max_predictions < 1:
        problems.append(f"--max-predictions {settings.max_predictions}: need at least 1")
    if not 0 <= settings.masked_lm_prob <= 1:
        problems.append(f"--masked-lm-prob {settings.masked_lm_prob}: expected 0..1")
    if not 0 <= settings.short_seq_prob <= 1:
        problems.append(f"--short-seq-prob {settings.short_seq_prob}: expected 0..1")
    if settings.dupe_factor < 1:
        problems.append(f"--dupe-factor {settings.dupe_factor}: need at least 1")
    if settings.random_token not in ("uniform", "unigram"):
        problems.append(f"--random-token {settings.random_token!r}: expected uniform|unigram")
    if settings.max_sequences_per_row < 1:
        problems.append(f"--max-sequences-per-row {settings.max_sequences_per_row}: need at "
                        "least 1")
    if num_shards < 1 or workers < 1:
        problems.append(f"--num-shards {num_shards} / --workers {workers}: need at least 1")
    if problems:
        raise UserError("; ".join(problems))


def shard_names(num_shards: int) -> list[str]:
    return [f"shard-{index:05d}-of-{num_shards:05d}.tfrecord" for index in range(num_shards)]


def commit_shards(temporary: list[str], paths: list[str]) -> None:
    """Renames complete shards into place and removes shards of an earlier, other-sized run."""
    directory = files.dirname(paths[0])
    manifest = files.join(directory, manifest_lib.MANIFEST_NAME)
    if files.exists(manifest):
        files.remove(manifest)  # it describes the shards about to be replaced
    for temporary_path, path in zip(temporary, paths):
        files.move_into_place(temporary_path, path)
    for name in files.listdir(directory):
        if _SHARD_NAME.fullmatch(name) and files.join(directory, name) not in paths:
            files.remove(files.join(directory, name))


class _ShardSet:
    """Shards under temporary names, filled round-robin; renamed only by `commit`."""

    def __init__(self, output_dir: str, num_shards: int):
        self.paths = [files.join(output_dir, name) for name in shard_names(num_shards)]
        # Remote shards are written locally and uploaded whole at commit (see bert_jax/files).
        self.staging = tempfile.mkdtemp(prefix="bert-jax-shards-") \
            if files.is_remote(output_dir) else output_dir
        # Hidden and named for this process; a killed run's are removed here (files.py).
        self.temporary = [temporaries.temporary_name(os.path.join(self.staging, name))
                          for name in shard_names(num_shards)]
        self.writers = []  # opened by `open`, inside the caller's cleanup
        self.counts = [0] * num_shards
        self.next_shard = 0

    def open(self) -> None:
        import tensorflow as tf
        for path in self.temporary:
            self.writers.append(tf.io.TFRecordWriter(path))

    def write(self, result: UnitResult) -> None:
        data, offsets = result.buffer.tobytes(), result.offsets.tolist()
        writers, counts, shard = self.writers, self.counts, self.next_shard
        for start, end in zip(offsets[:-1], offsets[1:]):
            writers[shard].write(data[start:end])
            counts[shard] += 1
            shard = shard + 1 if shard + 1 < len(writers) else 0
        self.next_shard = shard

    def commit(self) -> None:
        for writer in self.writers:
            writer.close()
        commit_shards(self.temporary, self.paths)
        self._remove_staging()

    def abandon(self) -> None:
        """Removes every temporary shard. It runs after a failure, often a storage fault
        that also fails a writer's close (its last flush): nothing here may stop it."""
        for writer in self.writers:
            with contextlib.suppress(Exception):
                writer.close()
        for temporary in self.temporary:
            with contextlib.suppress(FileNotFoundError):
                os.remove(temporary)
        self._remove_staging()

    def _remove_staging(self) -> None:
        if self.staging != files.dirname(self.paths[0]):
            shutil.rmtree(self.staging, ignore_errors=True)


def create_pretraining_data(input_patterns: list[str], vocab_path: str, output_dir: str, *,
                            num_shards: int = 16, max_seq_len: int = 128,
                            max_predictions: int = 20, masked_lm_prob: float = 0.15,
                            dupe_factor: int = 10, short_seq_prob: float = 0.1,
                            random_token: str = "uniform", whole_word_mask: bool = False,
                            seed: int = 12345, workers: int = 1, show_progress: bool = True,
                            input_format: str = "bert", encoding_errors: str = "strict",
                            lowercase: bool | None = None, tfds_data_dir: str | None = None,
                            tfds_feature: str = "text", unit_bytes: int = UNIT_BYTES,
                            max_sequences_per_row: int = 1, objective: str = "mlm_nsp") -> dict:
    """Writes `num_shards` TFRecord shards and `manifest.json` to `output_dir`.

    Returns the manifest (see `manifest.read_manifest`).

    `vocab_path` is a `vocab.txt`, a SentencePiece `.model`, a `tokenizer.json` or a
    directory holding one.
    `max_sequences_per_row` > 1 packs up to that many instances into each record
    (`packing.py`); 1 writes the original format, one instance per record. `objective`
    "mlm" writes masked-LM-only sequences instead (`mlm_sequences.py`; the mask, pair and
    dupe settings do not apply).
    """
    settings = Settings(max_seq_len, max_predictions, masked_lm_prob, dupe_factor,
                        short_seq_prob, random_token, whole_word_mask, seed,
                        max_sequences_per_row, objective)
    validate_settings(settings, num_shards, workers)
    tokenizer = load_tokenizer(vocab_path, lowercase)  # checks the vocabulary up front
    inputs = sources.expand_inputs(input_patterns)
    stats = sources.ReadStats()
    documents = sources.read_documents(inputs, input_format, encoding_errors, tfds_data_dir,
                                       tfds_feature, stats)
    units = _first_unit_read(work_units(documents, unit_bytes, stats))
    created_output_dir = not files.exists(output_dir)
    with _storage_faults(output_dir):
        files.makedirs(output_dir)
    results = _results_in_order(units, workers, (vocab_path, tokenizer.lowercase, settings))
    # Progress counts (decompressed) bytes read; a total is known for plain files only.
    plain = all(not path.startswith("tfds:") and not path.endswith(".gz") for path in inputs)
    total_bytes = sum(files.size(path) for path in inputs) if plain else None
    shards = _ShardSet(output_dir, num_shards)
    try:
        with _storage_faults(output_dir):
            shards.open()
            totals = _write_all(results, shards, _progress(show_progress, total_bytes))
            if not totals["instances"]:
                raise no_instances_error(input_patterns)
            shards.commit()
    except BaseException:
        shards.abandon()
        if created_output_dir and files.isdir(output_dir) and not files.listdir(output_dir):
            files.rmtree(output_dir)  # a failed run leaves nothing behind, not even the directory
        raise
    manifest = build_manifest(shards.counts, totals, settings, input_format, encoding_errors,
                              inputs, stats.replaced_bytes, tokenizer)
    with reported(output_dir, "writing manifest.json", "make room and run again"):
        manifest_lib.write_manifest(output_dir, manifest)
    return manifest_lib.read_manifest(output_dir)


def _storage_faults(output_dir: str):
    """A full disk, a file-size limit or a read-only directory: one line naming it."""
    return reported(output_dir, "writing the shards", "nothing was left behind; fix that or "
                    "use another --output-dir")


def build_manifest(shard_counts: list[int], totals: dict, settings: Settings,
                   input_format: str, encoding_errors: str, inputs: list[str],
                   replaced_bytes: dict, tokenizer) -> dict:
    """The manifest of a complete run (both writers: local and Beam). A shard's count is of
    records (`num_records`; unpacked shards also say `num_instances`, as before packing)."""
    num_shards = len(shard_counts)
    packed = settings.max_sequences_per_row > 1
    shards = [dict(file=name, num_records=count) if packed
              else dict(file=name, num_records=count, num_instances=count)
              for name, count in zip(shard_names(num_shards), shard_counts)]
    return dict(
        shards=shards, packed=packed, num_records=totals["records"],
        # Objective mlm's masks are drawn when its rows are read (manifest version 3).
        masked=settings.objective != "mlm" and settings.masked_lm_prob > 0,
        real_token_fraction=round(
            totals["real_tokens"] / max(1, totals["records"] * settings.max_seq_len), 6),
        num_instances=totals["instances"], num_documents=totals["documents"],
        num_sentences=totals["sentences"], num_tokens=totals["tokens"],
        num_masked_tokens=totals["masked_tokens"],
        num_long_sentences=totals["long_sentences"], num_dropped_tokens=totals["dropped_tokens"],
        settings=dict(settings.to_dict(), input_format=input_format,
                      encoding_errors=encoding_errors, num_shards=num_shards),
        inputs=inputs, replaced_bytes=replaced_bytes,
        vocabulary=dict(hash=tokenizer.hash, size=tokenizer.vocab_size,
                        lowercase=tokenizer.lowercase, kind=type(tokenizer).__name__))


def no_instances_error(input_patterns: list[str]) -> UserError:
    return UserError(f"{input_patterns}: no training instances: the input has no "
                     "document with tokens")


def unit_totals(result: UnitResult) -> collections.Counter:
    """A unit's contribution to the manifest's counts."""
    return collections.Counter(documents=result.num_documents, sentences=result.num_sentences,
                               tokens=result.num_tokens, masked_tokens=result.masked_tokens,
                               records=len(result.offsets) - 1, instances=result.num_instances,
                               real_tokens=result.real_tokens,
                               long_sentences=result.long_sentences,
                               dropped_tokens=result.dropped_tokens)


def _write_all(results, shards: _ShardSet, progress) -> collections.Counter:
    """Writes every unit's records as they arrive; returns the totals."""
    totals = collections.Counter()
    with progress:
        for result, bytes_read in results:
            shards.write(result)
            totals.update(unit_totals(result))
            progress.update(bytes_read - progress.n)
            progress.set_postfix(instances=totals["instances"], records=totals["records"],
                                 refresh=False)
    return totals


def _progress(show: bool, total_bytes: int | None):
    from tqdm import tqdm
    return tqdm(total=total_bytes, unit="B", unit_scale=True, desc="create-data",
                disable=not show, smoothing=0.1)
