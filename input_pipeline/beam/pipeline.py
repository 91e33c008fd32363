"""The Beam pipeline of `create-data --runner beam`: the local writer's shards, on any engine.

    read + cut units (one worker, corpus order) -> Reshuffle -> process_unit (every worker)
      -> per-unit record counts -> first record of each unit (a side input)
      -> each unit's records split into pieces by shard -> GroupByKey(shard)
      -> each shard's pieces in unit order, written under a temporary name
      -> finalize (one worker): rename the shards into place, write manifest.json

Why this shape:
- Work units are cut exactly as the local writer cuts them (`create_data.work_units`) and
  `work_unit.process_unit` seeds everything by (seed, unit, dupe), so every unit's records
  are the local writer's. Cutting needs the documents in corpus order, so one worker
  reads; that costs only reading and splitting text (tens of MB/s), while tokenising,
  building, masking and serialising, nearly all the work, runs on every worker.
- Shards are placed from (unit, position) and the units' record counts
  (`shard_assignment`), so every shard is byte-identical to the local writer's.
- Nothing is renamed into place until every shard is written; a failure (in any worker)
  removes this run's temporary files, and a `UserError` raised in a worker (a non-UTF-8
  line, an empty corpus) reaches the caller as the same `UserError`.
- Every path goes through the one file layer (`bert_jax/storage/files.py`), so inputs and output
  may be local or `gs://`. A worker writes a remote shard to its own disk with
  TensorFlow's writer and uploads it under a temporary name through the file layer
  (TensorFlow's `gs://` client has its endpoint built in: no emulator, so no test).
"""

import collections
import contextlib
import functools
import os
import re
import shlex
import tempfile
import uuid

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from bert_jax.storage import files
from bert_jax.errors import UserError
from input_pipeline import create_data, manifest as manifest_lib, sources
from input_pipeline.beam.shard_assignment import first_records, pieces_by_shard
from input_pipeline.tokenization import load_tokenizer
from input_pipeline.work_unit import Settings, process_unit

_USER_ERROR = "<<bert-jax user error>>"  # brackets a UserError's message across the runner
_USER_ERROR_PATTERN = re.compile(re.escape(_USER_ERROR) + "(.*?)" + re.escape(_USER_ERROR),
                                 re.DOTALL)


def _passing_user_errors(generator_function):
    """Runners wrap a worker's exception in their own; mark a UserError's message so the
    caller can raise it again, unchanged."""
    @functools.wraps(generator_function)
    def wrapped(*args, **kwargs):
        try:
            yield from generator_function(*args, **kwargs)
        except UserError as error:
            raise RuntimeError(f"{_USER_ERROR}{error}{_USER_ERROR}") from None
    return wrapped


def _read_units(_, inputs, input_format, encoding_errors, tfds_data_dir, tfds_feature,
                unit_bytes):
    """(unit index, documents) in corpus order, then the read statistics (tagged `stats`)."""
    stats = sources.ReadStats()
    documents = sources.read_documents(inputs, input_format, encoding_errors, tfds_data_dir,
                                       tfds_feature, stats)
    for index, unit, _ in create_data.work_units(documents, unit_bytes, stats):
        yield index, unit
    yield beam.pvalue.TaggedOutput("stats", stats.replaced_bytes)


class _ProcessUnits(beam.DoFn):
    """A unit's documents -> its `UnitResult` (records in their final order).

    The tokenizer travels pickled with the DoFn, so workers need no access to the
    vocabulary file (a local path on the machine that launched a Dataflow job)."""

    def __init__(self, tokenizer, settings: Settings):
        self.tokenizer, self.settings = tokenizer, settings

    def setup(self):
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

    @_passing_user_errors
    def process(self, element):
        index, documents = element
        yield process_unit(index, documents, self.tokenizer, self.settings)


def _pieces(result, first_record: dict, num_shards: int):
    """(shard, (unit, records joined, record lengths)) for each shard this unit feeds."""
    data, offsets = result.buffer.tobytes(), result.offsets
    for shard, positions in pieces_by_shard(first_record[result.index], offsets, num_shards):
        starts, ends = offsets[positions], offsets[positions + 1]
        joined = b"".join(data[start:end] for start, end in zip(starts.tolist(), ends.tolist()))
        yield shard, (result.index, joined, ends - starts)


class _WriteShard(beam.DoFn):
    """One shard's pieces, in unit order, to `<shard>.tmp-beam-<run>`; yields (shard, count).

    A remote shard is written on the worker's disk first, then uploaded."""

    def __init__(self, output_dir: str, num_shards: int, run_token: str):
        self.output_dir, self.num_shards, self.run_token = output_dir, num_shards, run_token

    def process(self, element):
        import tensorflow as tf
        shard, pieces = element
        path = _temporary_paths(self.output_dir, self.num_shards, self.run_token)[shard]
        count = 0
        with _written_locally(path) as local:
            with tf.io.TFRecordWriter(local) as writer:
                for _, joined, lengths in sorted(pieces, key=lambda piece: piece[0]):
                    start = 0
                    for length in lengths.tolist():
                        writer.write(joined[start:start + length])
                        start += length
                    count += len(lengths)
        yield shard, count


@contextlib.contextmanager
def _written_locally(path: str):
    """A local path to write `path` through: itself, or a file uploaded to it when done."""
    if not files.is_remote(path):
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="bert-jax-beam-shard-") as directory:
        local = os.path.join(directory, files.basename(path))
        yield local
        files.move_into_place(local, path)


def _merge_counters(counters) -> collections.Counter:
    """Summed with `update`, which keeps zero counts (`+` drops them, and the manifest
    needs every key, `long_sentences: 0` included)."""
    merged = collections.Counter()
    for counter in counters:
        merged.update(counter)
    return merged


def _merge_dicts(dicts) -> dict:
    merged = {}
    for one in dicts:
        merged.update(one)
    return merged


class _Finalize(beam.DoFn):
    """After every shard is written: rename them into place and write the manifest."""

    def __init__(self, output_dir: str, run_token: str, manifest_arguments: dict):
        self.output_dir, self.run_token = output_dir, run_token
        self.manifest_arguments = manifest_arguments

    @_passing_user_errors
    def process(self, _, shard_counts, totals, replaced_bytes):
        if not totals["instances"]:
            raise create_data.no_instances_error(self.manifest_arguments["input_patterns"])
        arguments = dict(self.manifest_arguments)
        num_shards = arguments.pop("num_shards")
        arguments.pop("input_patterns")
        counts = [0] * num_shards
        for shard, count in shard_counts:
            counts[shard] = count
        temporary = _temporary_paths(self.output_dir, num_shards, self.run_token)
        for shard, path in enumerate(temporary):
            if not counts[shard]:
                with files.atomic_write(path, "wb"):  # a shard no record reached: empty, as locally
                    pass
        create_data.commit_shards(temporary, _final_paths(self.output_dir, num_shards))
        manifest = create_data.build_manifest(counts, totals, replaced_bytes=replaced_bytes,
                                              **arguments)
        manifest_lib.write_manifest(self.output_dir, manifest)
        yield manifest["num_instances"]


def _final_paths(output_dir: str, num_shards: int) -> list[str]:
    return [files.join(output_dir, name) for name in create_data.shard_names(num_shards)]


def _temporary_paths(output_dir: str, num_shards: int, run_token: str) -> list[str]:
    return [f"{path}.tmp-beam-{run_token}" for path in _final_paths(output_dir, num_shards)]


def _remove_temporaries(output_dir: str, run_token: str, created_output_dir: bool) -> None:
    """After a failure: this run's temporary shards go, and the directory if it made it."""
    names = files.listdir(output_dir) if files.isdir(output_dir) else []
    for name in names:
        if name.endswith(f".tmp-beam-{run_token}"):
            files.remove(files.join(output_dir, name))
    if created_output_dir and files.isdir(output_dir) and not files.listdir(output_dir):
        files.rmtree(output_dir)  # a failed run leaves nothing behind, not even the directory


def pipeline_options(beam_options: str | None, workers: int) -> PipelineOptions:
    """The user's options; without a --runner, the DirectRunner with one process per worker
    (named: Beam's own default runner downloads a binary, which fails offline)."""
    arguments = shlex.split(beam_options or "")
    if not any(argument.startswith("--runner") for argument in arguments):
        arguments = ["--runner=DirectRunner", "--direct_running_mode=multi_processing",
                     f"--direct_num_workers={workers}"] + arguments
    return PipelineOptions(arguments)


def build(root, inputs: list[str], tokenizer, output_dir: str, run_token: str,
          settings: Settings, num_shards: int, input_format: str,
          encoding_errors: str, tfds_data_dir: str | None, tfds_feature: str,
          unit_bytes: int, input_patterns: list[str]) -> None:
    """Adds the shard writer's transforms to the pipeline `root`."""
    read = (root | "Start" >> beam.Create([None])
            | "ReadAndCutUnits" >> beam.FlatMap(
                _passing_user_errors(_read_units), inputs, input_format, encoding_errors,
                tfds_data_dir, tfds_feature, unit_bytes).with_outputs("stats", main="units"))
    results = (read.units | "Spread" >> beam.Reshuffle()
               | "ProcessUnits" >> beam.ParDo(_ProcessUnits(tokenizer, settings)))
    first_record = (results
                    | "RecordCounts" >> beam.Map(lambda result: (result.index,
                                                                 len(result.offsets) - 1))
                    | "AllCounts" >> beam.combiners.ToDict()
                    | "FirstRecords" >> beam.Map(first_records))
    totals = (results | "UnitTotals" >> beam.Map(create_data.unit_totals)
              | "Totals" >> beam.CombineGlobally(_merge_counters))
    replaced = read.stats | "ReplacedBytes" >> beam.CombineGlobally(_merge_dicts)
    shard_counts = (results
                    | "SplitByShard" >> beam.FlatMap(_pieces, beam.pvalue.AsSingleton(first_record),
                                                     num_shards)
                    | "GroupByShard" >> beam.GroupByKey()
                    | "WriteShards" >> beam.ParDo(_WriteShard(output_dir, num_shards, run_token)))
    manifest_arguments = dict(settings=settings, input_format=input_format,
                              encoding_errors=encoding_errors, inputs=inputs,
                              num_shards=num_shards, tokenizer=tokenizer,
                              input_patterns=input_patterns)
    (root | "AfterAll" >> beam.Create([None])
     | "Finalize" >> beam.ParDo(_Finalize(output_dir, run_token, manifest_arguments),
                                beam.pvalue.AsList(shard_counts),
                                beam.pvalue.AsSingleton(totals),
                                beam.pvalue.AsSingleton(replaced)))


def create_pretraining_data(input_patterns: list[str], vocab_path: str, output_dir: str, *,
                            num_shards: int = 16, max_seq_len: int = 128,
                            max_predictions: int = 20, masked_lm_prob: float = 0.15,
                            dupe_factor: int = 10, short_seq_prob: float = 0.1,
                            random_token: str = "uniform", whole_word_mask: bool = False,
                            seed: int = 12345, workers: int = 1, input_format: str = "bert",
                            encoding_errors: str = "strict", lowercase: bool | None = None,
                            tfds_data_dir: str | None = None, tfds_feature: str = "text",
                            unit_bytes: int = create_data.UNIT_BYTES,
                            beam_options: str | None = None,
                            max_sequences_per_row: int = 1, objective: str = "mlm_nsp") -> dict:
    """Runs the pipeline to completion; returns the manifest (as the local writer does)."""
    settings = Settings(max_seq_len, max_predictions, masked_lm_prob, dupe_factor,
                        short_seq_prob, random_token, whole_word_mask, seed,
                        max_sequences_per_row, objective)
    create_data.validate_settings(settings, num_shards, workers)
    if input_format not in sources.FORMATS:
        raise UserError(f"--format {input_format!r}: expected one of {sources.FORMATS}")
    if encoding_errors not in ("strict", "replace"):
        raise UserError(f"--encoding-errors {encoding_errors!r}: expected strict or replace")
    tokenizer = load_tokenizer(vocab_path, lowercase)  # checks the vocabulary up front
    inputs = sources.expand_inputs(input_patterns)
    created_output_dir = not files.exists(output_dir)
    files.makedirs(output_dir)
    run_token = uuid.uuid4().hex[:12]
    try:
        with beam.Pipeline(options=pipeline_options(beam_options, workers)) as root:
            build(root, inputs, tokenizer, output_dir, run_token, settings, num_shards,
                  input_format, encoding_errors, tfds_data_dir, tfds_feature, unit_bytes,
                  input_patterns)
    except BaseException as error:
        _remove_temporaries(output_dir, run_token, created_output_dir)
        match = _USER_ERROR_PATTERN.search(str(error))
        if match:
            raise UserError(match.group(1)) from None
        raise
    return manifest_lib.read_manifest(output_dir)
