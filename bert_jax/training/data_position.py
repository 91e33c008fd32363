"""Where a run is in its data: saved with each checkpoint, restored on resume unless the data changed.

The position itself is the dataset's (`state()` / `restore(state)`); what the data was
(`data_source`) is saved beside it, so a phase-2 run (other shards, longer sequences) in a
phase-1 work directory starts its new data from the beginning instead of a position that
means nothing there. A dataset whose batches depend on the step they train (objective mlm's
masking-rate schedule) also has `seek_step`: `seek_step` below tells it the step its next
batch trains, on every start, resume and phase 2, and how many batches each step reads.
"""

import jax


def data_source(data, batch_size: int) -> dict:
    """What identifies a run's data stream: from the run config's data section and batch size."""
    if data.get("sources"):  # a mixture matches each source's position itself (mixture.py)
        return dict(mixture="each source's own position")
    source = dict(train_files=data.train_files, seq_len=data.seq_len,
                  max_predictions=data.max_predictions, batch_size=batch_size)
    if (data.max_sequences_per_row or 1) > 1:  # unpacked runs keep the checkpoints' key set
        source["max_sequences_per_row"] = data.max_sequences_per_row
    return source


def restore_position(dataset, meta: dict | None, source: dict, log) -> None:
    """Puts the data stream where the checkpoint left it, unless the data has changed
    (`source`: this run's `data_source`)."""
    if meta is None:
        return
    if meta.get("data_source") != source:
        log(f"the data differs from the checkpoint's ({meta.get('data_source')}); the new data "
            "starts from its beginning (e.g. phase 2 of a two-phase run)")
        return
    if len(meta["data"]) != jax.process_count():
        log(f"the checkpoint was written by {len(meta['data'])} process(es), this run has "
            f"{jax.process_count()}; the data starts from its beginning")
        return
    dataset.restore(meta["data"][jax.process_index()])


def seek_step(dataset, step: int, warmup=None) -> None:
    """Tells a dataset whose batches depend on the step they train (it has `seek_step`) that
    its next batch trains `step`, and with a batch-size warm-up (`batch_warmup.BatchWarmup`)
    how many micro-batches each step reads; other datasets need neither."""
    if hasattr(dataset, "seek_step"):
        dataset.seek_step(step, *((warmup.micro_batches, warmup.steps) if warmup else ()))
