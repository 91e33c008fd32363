"""A pre-training run's data mixture: `data.sources` and `data.mixture_tau` to a reader.

`data.sources` names the sources (name -> files, weight, repeat; `input_pipeline/mixture.py`
draws the rows); it stands instead of `data.train_files`, and the shards of every source
are checked as train_files' are (`mixture_config.all_files` joins them for
`pretraining_data`'s checks, which need no TensorFlow).
With `data.mixture_tau` above 0 the weights are not used: p_i is proportional to n_i^tau,
n_i the rows of source i (its manifest's counts, else counted).
"""

from input_pipeline import mixture
from input_pipeline.mixture_config import Source, probabilities, sources_of
from input_pipeline import manifest, reader as reader_lib, tfrecord


def source_rows(source: Source) -> int:
    """The rows (records) of a source's shards: their manifests' counts, else counted."""
    paths = manifest.expand_patterns([p for p in source.files.split(",") if p])
    counts = reader_lib.manifest_counts(paths)
    if counts is None:
        counts = {path: tfrecord.count_records(path) for path in paths}
    return sum(counts.values())


def mixture_probabilities(data, sources: list[Source]):
    """(p, sizes): each source's probability, and its rows when tau sampling needs them."""
    sizes = [source_rows(source) for source in sources] if data.mixture_tau > 0 else None
    return probabilities([source.weight for source in sources], sizes,
                                 data.mixture_tau), sizes


def open_mixture(data, seed: int, batch_size: int, process_index: int, process_count: int,
                 reader_keywords: dict, log=print) -> mixture.MixtureDataset:
    """The mixture of `data.sources`, this process's rows: each source's tagged reader (its
    own seed; `reader_keywords` as the run's single reader would take them, objective mlm's
    masking schedule drawn by the mixture instead)."""
    sources = sources_of(data)
    keywords = dict(reader_keywords)
    schedule = keywords.pop("masking_schedule", None)
    masking = None
    if keywords.get("objective") == "mlm":
        masking = (schedule, dict(vocab_size=keywords["vocab_size"],
                                  mask_id=keywords["mask_id"],
                                  special_ids=keywords["special_ids"],
                                  max_predictions=data.max_predictions))
    per_row = data.max_sequences_per_row or 1

    def open_reader(source, source_seed):
        return reader_lib.PretrainingDataset(
            [p for p in source.files.split(",") if p], mixture.CHUNK_ROWS, data.seq_len,
            data.max_predictions, seed=source_seed, shuffle_buffer=data.shuffle_buffer,
            repeat=source.repeat, process_index=process_index, process_count=process_count,
            max_sequences_per_row=per_row, tagged=True, drop_remainder=False, **keywords)

    def identity(source):
        return dict(files=source.files, seq_len=data.seq_len, max_sequences_per_row=per_row,
                    repeat=source.repeat)

    probabilities, sizes = mixture_probabilities(data, sources)
    described = ", ".join(f"{source.name} {share:.3f}" + (f" ({size} rows)" if sizes else "")
                          for source, share, size in zip(sources, probabilities,
                                                         sizes or [None] * len(sources)))
    how = f"n^{data.mixture_tau:g}" if data.mixture_tau > 0 else "weights"
    log(f"data mixture ({how}): {described}")
    return mixture.MixtureDataset(sources, probabilities, batch_size, open_reader, identity,
                                  seed=seed, process_index=process_index, masking=masking,
                                  log=log)
