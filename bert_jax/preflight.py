"""The JAX half of `bert-jax launch check`: a job's run, rehearsed on this machine in seconds.

For each job it does what every pod worker will do first, from the job's own paths:
resolve and read the vocabulary (setting model.vocab_size), read the shard manifest and
the first records of one train and one eval shard, build the mesh over the slice's device
count, and trace the real train step for that mesh (shapes and shardings, no compile, no
device memory). `launch/check.py` runs this module in a subprocess whose simulated CPU
device count is the slice's, so `launch/` itself imports no JAX:

    python -m bert_jax.preflight '[{"job": ..., "config": ..., "overrides": [...],
                                    "devices": 32, "workers": 8}]'
"""

import json
import sys
import time

from bert_jax.errors import UserError


def _check_shards(split: str, patterns: str, run_config, num_workers: int, log) -> None:
    """Reads the first records of the first shard of `patterns`; enough shards per worker."""
    from input_pipeline.manifest import expand_patterns
    from input_pipeline.shard_check import check_first_records

    data = run_config.data
    files = expand_patterns([pattern for pattern in patterns.split(",") if pattern])
    if len(files) < num_workers:
        raise UserError(f"data.{split}_files: {len(files)} shard file(s) for {num_workers} "
                        "workers; each worker reads its own files, so write at least one "
                        "per worker")
    checked = check_first_records(files[0], data.seq_len, data.max_predictions,
                                  run_config.model.vocab_size,
                                  max_sequences_per_row=data.max_sequences_per_row or 1,
                                  objective=run_config.objective)
    log(f"  {split + ' data':<12} {patterns}: {len(files)} shard file(s); the first {checked} "
        f"record(s) of {files[0]} have the schema (seq_len {data.seq_len}, max_predictions "
        f"{data.max_predictions}) and ids below {run_config.model.vocab_size}")


def _check_batch(name: str, batch_size: int, num_workers: int, data_parallel: int) -> None:
    for parts, what in ((num_workers, "workers"), (data_parallel, "data-parallel devices")):
        if batch_size % parts:
            raise UserError(f"{name} {batch_size} must be a multiple of the {parts} {what}")


def check_run(run_config, num_devices: int, num_workers: int, log=print) -> None:
    """Raises `UserError` at the first problem a pod run of `run_config` would hit."""
    import jax

    from bert_jax import sharding
    from bert_jax.tasks.pretraining_data import prepare_run
    from bert_jax.training import train_step

    data = run_config.data
    # What `pretrain` does first on every worker: vocabulary, manifests, vocab_size, the task.
    pretraining = prepare_run(run_config, log)
    tokenizer = pretraining.tokenizer
    if tokenizer is not None:
        log(f"  vocabulary   {data.vocab_path}: {tokenizer.vocab_size} tokens "
            f"(model.vocab_size {run_config.model.vocab_size})")
    if not data.train_files:
        raise UserError("data.train_files is not set")
    _check_shards("train", data.train_files, run_config, num_workers, log)
    if data.eval_files:
        _check_shards("eval", data.eval_files, run_config, num_workers, log)
    else:
        log("  eval data    none (data.eval_files is empty): no held-out loss will be reported")
    devices = jax.devices()[:num_devices]
    if len(devices) < num_devices:  # the caller sets the simulated device count
        raise RuntimeError(f"{num_devices} devices wanted, this process has {len(devices)}")
    mesh = sharding.mesh_from_config(run_config.mesh, devices)
    data_parallel = sharding.data_parallel_size(mesh)
    _check_batch("batch_size", run_config.batch_size, num_workers, data_parallel)
    if data.eval_files:
        _check_batch("eval.batch_size", run_config.eval.batch_size, num_workers, data_parallel)
    shape = " x ".join(f"{name} {size}" for name, size in mesh.shape.items())
    log(f"  mesh         {num_devices} devices on {num_workers} worker(s): {shape}")
    start = time.perf_counter()
    bundle = train_step.build_train_step(run_config, mesh, pretraining.task)
    bundle.train_step.trace(bundle.abstract_state, bundle.abstract_batch, bundle.abstract_rng)
    num_params = sum(leaf.size for leaf in jax.tree.leaves(bundle.abstract_state.params))
    log(f"  train step   traced for this mesh in {time.perf_counter() - start:.1f} s: "
        f"{num_params / 1e6:.1f}M parameters, global batch {run_config.batch_size} "
        f"x {data.seq_len} ({run_config.batch_size // num_workers} per worker)")


def main(argv: list[str]) -> int:
    from bert_jax.run_config import load_run_config

    failed = 0
    for spec in json.loads(argv[0]):
        print(f"{spec['job']}:", flush=True)
        try:
            run_config = load_run_config(spec["config"], spec["overrides"])
            check_run(run_config, spec["devices"], spec["workers"],
                      log=lambda line: print(line, flush=True))
        except UserError as error:
            print(f"  error: {error}", flush=True)
            failed += 1
            continue
        print("  ok", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
