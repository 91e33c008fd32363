"""BERT-mini learning curves: bert-jax vs Hugging Face `transformers.BertForPreTraining` (torch).

Both start from the same weights (bert-jax's initialisation exported with the interop
code), see the same shards of War and Peace in the same order, and use the same recipe:
AdamW (β 0.9/0.999, ε 1e-6, decoupled weight decay 0.01 without LayerNorm and biases),
global-norm clip 1.0, linear warm-up then linear decay, dropout 0.1. Writes
bench/out/learning_curve.png and prints the MLM losses at the last step, averaged over the
last 20 steps to damp batch noise, and their ratio.

    python bench/learning_curve.py [--steps 500] [--batch-size 8]

`--attention-dropout` instead trains bert-jax alone with attention-probability dropout 0.1
(the paper) and 0 (the fused kernels' setting), two seeds a side on the same batches, and
prints each run's MLM loss on a held-out shard.

`--packing` instead trains bert-jax alone on packed (`create-data --pack`) and unpacked
shards of the same instances (the same create-data seed), two seeds a side, --batch-size
rows a step, and prints the MLM loss on held-out chapters (unpacked shards of the last
tenth of the book, which no run trains on) after the same number of instances and after
the same wall time (the unpacked run's; dropout on, one process, timed after the first
step's compilation). Issue 25's goal: equal within seed noise at equal instances, packed
lower at equal time.
"""

import argparse
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from bench.host import announce_host  # noqa: E402
CORPUS = os.path.join(ROOT, "..", "shared", "data", "corpus", "war_and_peace.bert.txt")
OUT = os.path.join(ROOT, "bench", "out")


def make_shards(seq_len: int, max_predictions: int) -> tuple[str, str]:
    """An 8k WordPiece vocabulary and shards of War and Peace, built once in bench/out."""
    from input_pipeline.create_data import create_pretraining_data
    from input_pipeline.vocabulary import train_wordpiece

    directory = os.path.join(OUT, "war_and_peace_data")
    vocab_path = os.path.join(directory, "vocab.txt")
    shards = os.path.join(directory, "shards")
    if not os.path.exists(os.path.join(shards, "manifest.json")):
        vocab_path = train_wordpiece([CORPUS], 8000, directory, lowercase=True)
        create_pretraining_data([CORPUS], vocab_path, shards, num_shards=4, max_seq_len=seq_len,
                                max_predictions=max_predictions, dupe_factor=1, seed=7)
    return vocab_path, shards


def run_config_for(args, vocab_size: int):
    from bert_jax.run_config import base_config

    config = base_config("mini")
    config.model.vocab_size = vocab_size
    config.batch_size, config.num_train_steps = args.batch_size, args.steps
    config.data.update(seq_len=128, max_predictions=20)
    config.optimizer.update(learning_rate=args.learning_rate, warmup_steps=args.warmup_steps)
    return config


def train_jax(run_config, batches, log_every: int) -> tuple[list[float], dict, float]:
    """MLM losses per step, the initial parameters (numpy) and seconds per step."""
    import jax

    bundle = single_device_bundle(run_config)
    state = bundle.init_state(jax.random.PRNGKey(run_config.seed))
    initial = jax.tree.map(np.asarray, jax.device_get(state.params))
    rng, losses, start = jax.random.PRNGKey(1), [], time.perf_counter()
    for index, batch in enumerate(batches):
        state, metrics = bundle.train_step(state, batch, rng)
        losses.append(float(metrics["mlm_loss"]))
        if (index + 1) % log_every == 0:
            print(f"  jax   step {index + 1}: mlm_loss {losses[-1]:.4f}", flush=True)
    return losses, initial, (time.perf_counter() - start) / len(batches)


def train_torch(model_dir: str, run_config, batches, log_every: int) -> tuple[list[float], float]:
    import torch
    import transformers

    from bench.torch_pretraining import gathered_pretraining_losses
    from bert_jax.training.schedules import warmup_decay_schedule

    torch.manual_seed(0)
    model = transformers.BertForPreTraining.from_pretrained(model_dir)
    model.train()
    decayed = [p for n, p in model.named_parameters()
               if not ("LayerNorm" in n or n.endswith("bias"))]
    others = [p for n, p in model.named_parameters() if "LayerNorm" in n or n.endswith("bias")]
    settings = run_config.optimizer
    optimizer = torch.optim.AdamW(
        [{"params": decayed, "weight_decay": settings.weight_decay},
         {"params": others, "weight_decay": 0.0}],
        lr=settings.learning_rate, betas=(settings.beta1, settings.beta2), eps=settings.epsilon)
    schedule = warmup_decay_schedule(1.0, settings.warmup_steps, run_config.num_train_steps)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: float(schedule(step)))
    losses, start = [], time.perf_counter()
    for index, batch in enumerate(batches):
        tensors = {name: torch.from_numpy(np.array(value)) for name, value in batch.items()}
        # BertForPreTraining's own heads, applied (as bert-jax does) only at the P masked
        # positions: scoring all T positions costs 6x the FLOPs for the same loss.
        mlm_loss, nsp_loss = gathered_pretraining_losses(model, tensors)
        optimizer.zero_grad()
        (mlm_loss + nsp_loss).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), settings.clip_norm)
        optimizer.step()
        scheduler.step()
        losses.append(float(mlm_loss))
        if (index + 1) % log_every == 0:
            print(f"  torch step {index + 1}: mlm_loss {losses[-1]:.4f}", flush=True)
    return losses, (time.perf_counter() - start) / len(batches)


def train_and_evaluate(run_config, batches, held_out: list) -> tuple[list[float], dict, float]:
    """bert-jax alone: train losses, the held-out means (no dropout) and seconds per step."""
    import jax

    bundle = single_device_bundle(run_config)
    state = bundle.init_state(jax.random.PRNGKey(run_config.seed))
    rng, losses, start = jax.random.PRNGKey(run_config.seed + 1), [], time.perf_counter()
    for batch in batches:
        state, metrics = bundle.train_step(state, batch, rng)
        losses.append(float(metrics["mlm_loss"]))
    seconds = (time.perf_counter() - start) / len(batches)
    return losses, held_out_means(bundle, state.params, held_out), seconds


def held_out_means(bundle, params, held_out: list) -> dict:
    """Each term's mean over the held-out batches (sums and counts added first)."""
    import jax

    totals = None
    for batch in held_out:
        result = jax.device_get(bundle.eval_step(params, batch))
        totals = result if totals is None else jax.tree.map(np.add, totals, result)
    return bundle.task.means(totals["sums"], totals["counts"])


def attention_dropout_comparison(args) -> int:
    """Attention-probability dropout 0.1 (the paper) against 0 (the fused kernels' setting,
    bert_jax/models/layers/attention_kernels.py): BERT-mini, the same shards and seeds on both
    sides, two seeds a side, held-out MLM loss on a shard no run trains on."""
    from input_pipeline.reader import PretrainingDataset, expand_patterns
    from input_pipeline.tokenization import load_tokenizer

    vocab_path, shards = make_shards(128, 20)
    files = expand_patterns([shards])
    train_files, held_out_files = files[:-1], files[-1:]
    vocab_size = load_tokenizer(vocab_path).vocab_size
    held_out_data = PretrainingDataset(held_out_files, 32, 128, 20, seed=0, repeat=False,
                                       process_index=0, process_count=1)
    held_out = [next(held_out_data) for _ in range(args.eval_batches)]
    print(f"attention dropout 0.1 vs 0: BERT-mini, {args.steps} steps of {args.batch_size} x "
          f"128 on {len(train_files)} shards, held-out MLM loss on {args.eval_batches} x 32 "
          f"sequences of {os.path.basename(held_out_files[0])}", flush=True)
    results = {}
    for seed in (0, 1):
        data = PretrainingDataset(train_files, args.batch_size, 128, 20, seed=seed,
                                  process_index=0, process_count=1)
        batches = [next(data) for _ in range(args.steps)]
        for rate in (0.1, 0.0):
            config = run_config_for(args, vocab_size)
            config.seed, config.model.attention_dropout_rate = seed, rate
            losses, held, seconds = train_and_evaluate(config, batches, held_out)
            results[rate, seed] = float(held["mlm_loss"])
            print(f"  attention dropout {rate}, seed {seed}: held-out MLM loss "
                  f"{held['mlm_loss']:.4f} (accuracy {held['mlm_accuracy']:.4f}); train MLM "
                  f"loss, mean of the last 20 steps {np.mean(losses[-20:]):.4f}; "
                  f"{seconds:.3f} s/step", flush=True)
    means = {rate: np.mean([results[rate, seed] for seed in (0, 1)]) for rate in (0.1, 0.0)}
    print(f"held-out MLM loss, mean of 2 seeds: dropout 0.1 {means[0.1]:.4f}, dropout 0 "
          f"{means[0.0]:.4f} ({(means[0.0] / means[0.1] - 1) * 100:+.2f}%); seed spread "
          f"0.1: {abs(results[0.1, 0] - results[0.1, 1]):.4f}, "
          f"0: {abs(results[0.0, 0] - results[0.0, 1]):.4f}")
    return 0


def packing_shards(seq_len: int, max_predictions: int) -> tuple[str, dict, str]:
    """The 8k vocabulary; unpacked and packed shards of the first nine tenths of the book's
    chapters (the same instances: one create-data seed); unpacked shards of the rest."""
    from input_pipeline.create_data import create_pretraining_data

    vocab_path, _ = make_shards(128, 20)
    directory = os.path.join(OUT, f"war_and_peace_packing_{seq_len}")
    chapters = open(CORPUS, encoding="utf-8").read().strip().split("\n\n")
    cut = len(chapters) * 9 // 10
    shards = {}
    for name, text, per_row in (("train", chapters[:cut], 1), ("train_packed", chapters[:cut], 3),
                                ("held_out", chapters[cut:], 1)):
        shards[name] = os.path.join(directory, name)
        if not os.path.exists(os.path.join(shards[name], "manifest.json")):
            os.makedirs(directory, exist_ok=True)
            corpus = os.path.join(directory, f"{name}.txt")
            with open(corpus, "w", encoding="utf-8") as file:
                file.write("\n\n".join(text) + "\n")
            create_pretraining_data([corpus], vocab_path, shards[name], num_shards=2,
                                    max_seq_len=seq_len, max_predictions=max_predictions,
                                    dupe_factor=2, seed=7, max_sequences_per_row=per_row,
                                    show_progress=False)
    held_out = shards.pop("held_out")
    return vocab_path, shards, held_out


def single_device_bundle(run_config):
    """The pre-training step of `run_config` on one device."""
    import jax

    from bert_jax import sharding
    from bert_jax.tasks.pretraining import task_from_run_config
    from bert_jax.training import train_step

    return train_step.build_train_step(run_config, sharding.make_mesh(
        1, 1, 1, devices=jax.devices()[:1]), task_from_run_config(run_config))


def train_until(run_config, data, evaluate, instances: int, seconds: float | None):
    """Trains until `instances` instances have been seen, then (with `seconds`) on until
    that much step time has passed; `evaluate(params)` at each point, and where it was."""
    import jax

    bundle = single_device_bundle(run_config)
    state = bundle.init_state(jax.random.PRNGKey(run_config.seed))
    rng, seen, elapsed, step, points = jax.random.PRNGKey(run_config.seed + 1), 0, 0.0, 0, {}
    while True:
        start = time.perf_counter()
        state, metrics = bundle.train_step(state, next(data), rng)
        seen += int(jax.device_get(metrics["num_sequences"]))  # waits for the step
        elapsed += time.perf_counter() - start if step else 0.0  # the first step compiles
        step += 1
        where = dict(step=step, instances=seen, seconds=elapsed)
        if "instances" not in points and seen >= instances:
            points["instances"] = dict(where, **evaluate(state.params))
        if "instances" in points and (seconds is None or elapsed >= seconds):
            points["time"] = dict(where, **evaluate(state.params))
            return points


def packing_comparison(args) -> int:
    """Packed against unpacked rows of the same instances (see the module docstring)."""
    from input_pipeline.reader import PretrainingDataset
    from input_pipeline.tokenization import load_tokenizer

    seq_len, predictions = args.packing_seq_len, args.packing_seq_len * 20 // 128
    vocab_path, shards, held_out_dir = packing_shards(seq_len, predictions)
    held_out_data = PretrainingDataset([held_out_dir], 16, seq_len, predictions, seed=0,
                                       repeat=False, process_index=0, process_count=1)
    held_out = [next(held_out_data) for _ in range(args.eval_batches)]
    instances = args.steps * args.batch_size
    print(f"packed vs unpacked rows: BERT-mini, {args.batch_size} x {seq_len} rows a step, "
          f"{instances} instances, held-out MLM loss on {args.eval_batches} x 16 sequences of "
          "unseen chapters", flush=True)
    vocab_size = load_tokenizer(vocab_path).vocab_size
    unpacked = run_config_for(args, vocab_size)
    unpacked.data.update(seq_len=seq_len, max_predictions=predictions)
    # Both sides are scored on the same unpacked held-out rows, by an unpacked step.
    evaluator = single_device_bundle(unpacked)
    results = {}
    for seed in (0, 1):
        unpacked_time = None
        for name, per_row in (("unpacked", 1), ("packed", 3)):
            config = run_config_for(args, vocab_size)
            config.seed = seed
            config.data.update(seq_len=seq_len, max_predictions=predictions,
                               max_sequences_per_row=per_row)
            config.schedule_steps = 2 * args.steps  # one schedule, whoever trains longer
            data = PretrainingDataset([shards["train" if per_row == 1 else "train_packed"]],
                                      args.batch_size, seq_len, predictions, seed=seed,
                                      process_index=0, process_count=1,
                                      max_sequences_per_row=per_row)
            points = train_until(config, data, lambda params: held_out_means(
                evaluator, params, held_out), instances, unpacked_time)
            unpacked_time = unpacked_time or points["instances"]["seconds"]
            results[name, seed] = points
            for point, label in (("instances", "same instances"), ("time", "same time")):
                value = points[point]
                print(f"  {name:8s} seed {seed}, {label:14s}: held-out MLM loss "
                      f"{value['mlm_loss']:.4f} after {value['instances']} instances, "
                      f"{value['step']} steps, {value['seconds']:.0f} s", flush=True)
    for point in ("instances", "time"):
        means = {name: np.mean([results[name, seed][point]["mlm_loss"] for seed in (0, 1)])
                 for name in ("unpacked", "packed")}
        spread = {name: abs(results[name, 0][point]["mlm_loss"]
                            - results[name, 1][point]["mlm_loss"]) for name in means}
        print(f"same {point}: held-out MLM loss, mean of 2 seeds: unpacked "
              f"{means['unpacked']:.4f}, packed {means['packed']:.4f} "
              f"({means['packed'] - means['unpacked']:+.4f}); seed spread unpacked "
              f"{spread['unpacked']:.4f}, packed {spread['packed']:.4f}")
    return 0


def plot(jax_losses, torch_losses, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(8, 5))
    for name, losses in (("bert-jax", jax_losses), ("transformers (torch)", torch_losses)):
        steps = np.arange(1, len(losses) + 1)
        axis.plot(steps, losses, alpha=0.25)
        smooth = np.convolve(losses, np.ones(20) / 20, mode="valid")
        axis.plot(steps[19:], smooth, label=f"{name} (20-step mean)")
    axis.set_xlabel("step")
    axis.set_ylabel("MLM loss")
    axis.set_title("BERT-mini on War and Peace: same weights, data, recipe")
    axis.legend()
    figure.savefig(path, dpi=120)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--batch-size", type=int, default=8)  # torch sets the pace on a CPU
    parser.add_argument("--learning-rate", type=float, default=5e-4)
    parser.add_argument("--warmup-steps", type=int, default=50)
    parser.add_argument("--attention-dropout", action="store_true",
                        help="instead: bert-jax with attention dropout 0.1 vs 0, two seeds "
                             "a side, held-out MLM loss")
    parser.add_argument("--eval-batches", type=int, default=20,
                        help="held-out batches of 32 for --attention-dropout")
    parser.add_argument("--packing", action="store_true",
                        help="instead: bert-jax on packed vs unpacked rows of the same "
                             "instances, two seeds a side, held-out MLM loss")
    parser.add_argument("--packing-seq-len", type=int, default=512,
                        help="row length for --packing (predictions: 20 per 128 tokens)")
    args = parser.parse_args()
    announce_host()  # the CPU, its ISA, threads and load: figures carry their host
    if not os.path.exists(CORPUS):
        print(f"skipped: {CORPUS} is absent (the shared reference data)")
        return 0
    os.makedirs(OUT, exist_ok=True)
    if args.attention_dropout:
        return attention_dropout_comparison(args)
    if args.packing:
        return packing_comparison(args)
    from bert_jax.interop.model_writers import export_huggingface
    from input_pipeline.reader import PretrainingDataset
    from input_pipeline.tokenization import load_tokenizer

    vocab_path, shards = make_shards(128, 20)
    tokenizer = load_tokenizer(vocab_path)
    run_config = run_config_for(args, tokenizer.vocab_size)
    dataset = PretrainingDataset([shards], args.batch_size, 128, 20, seed=0,
                                 process_index=0, process_count=1)
    batches = [next(dataset) for _ in range(args.steps)]
    log_every = max(args.steps // 10, 1)
    print(f"bert-jax: BERT-mini, {args.steps} steps of {args.batch_size} x 128", flush=True)
    jax_losses, initial, jax_seconds = train_jax(run_config, batches, log_every)
    model_dir = os.path.join(OUT, "learning_curve_initial_hf")
    from bert_jax.training.train_step import model_config_of

    export_huggingface(model_config_of(run_config), initial, tokenizer, model_dir,
                       architecture="BertForPreTraining", overwrite=True)
    print("transformers.BertForPreTraining from the same initial weights", flush=True)
    torch_losses, torch_seconds = train_torch(model_dir, run_config, batches, log_every)
    path = os.path.join(OUT, "learning_curve.png")
    plot(jax_losses, torch_losses, path)
    jax_tail, torch_tail = np.mean(jax_losses[-20:]), np.mean(torch_losses[-20:])
    print(f"\nMLM loss at step {args.steps}: bert-jax {jax_losses[-1]:.4f}, "
          f"torch {torch_losses[-1]:.4f}")
    print(f"mean of steps {args.steps - 19}-{args.steps}: bert-jax {jax_tail:.4f}, "
          f"torch {torch_tail:.4f}, ratio {jax_tail / torch_tail:.4f} "
          f"({abs(jax_tail / torch_tail - 1) * 100:.2f}% apart)")
    print(f"MLM loss at step 1: bert-jax {jax_losses[0]:.4f}, torch {torch_losses[0]:.4f}")
    print(f"seconds per step (same process, shared CPU): bert-jax {jax_seconds:.3f}, "
          f"torch {torch_seconds:.3f}")
    print(f"plot: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
