"""The demo pre-training of each family, bert-jax's trainer against transformers, side by side.

  bert        `configs/demo.py` (`make pretrain`): BERT-tiny, MLM + NSP on the standard
              library's docstrings, 32 x 64 tokens a step, AdamW (decay 0.01, not on norms
              and biases), global-norm clip 1, linear warm-up and decay. transformers:
              `BertForPreTraining` and `torch.optim.AdamW`, its own heads applied at the
              masked positions (`bench/torch_pretraining.py`).
  modernbert  `configs/modernbert_demo.py`: ModernBERT-tiny, MLM only at 30% masks drawn
              when rows are read, packed rows, StableAdamW (decay 1e-5 scaled by lr/peak),
              warmup-stable-decay with a 1-sqrt decay. transformers: `ModernBertForMaskedLM`
              (sparse prediction) and torch-optimi's `StableAdamW`, ModernBERT's own; packed
              rows given as its per-layer-type 4-D masks and restarting position ids
              (`bench/torch_pretraining.py`'s `instance_masks`).

bert-jax runs its real trainer (`bert_jax.training.trainer.train`, the loop of `bert-jax
pretrain`) over its real reader (`tasks/pretraining_data.prepare_run`), with the run's
held-out evaluation every `--eval-every` steps; the reader's batches (train and held-out,
masks included) are recorded as the trainer reads them and replayed to transformers in a
plain torch loop (transformers' Trainer draws its own batches and masks through its
collator; fed these it would be this loop with more machinery). Both start from bert-jax's
initial weights, exported with `convert`'s writer, and follow `schedules.py`'s schedule
(torch through LambdaLR). Dropout is off on both sides (ModernBERT's demo has none; BERT's
0.1 is set to 0) so that the two runs differ only by floating-point rounding: step 1's
losses agree to ~1e-6, and a gap at step 1,000 is a difference in the recipe, not in RNG.
`--dropout` keeps BERT's 0.1 (then the runs differ by their dropout draws).

Prints each side's held-out MLM loss at every evaluation, the final losses and their
relative difference, and each side's tokens/s over the whole run (real tokens; bert-jax's
time includes compiling the step, tf.data reading and masking, and the final checkpoint;
transformers' includes turning the recorded numpy batches into its inputs, but no reading
or masking: its figure is an upper bound for a torch run), both without the held-out
evaluations. Writes bench/out/pretraining_curves_FAMILY.png.

    python bench/pretraining_curves.py --family bert|modernbert [--steps 1000]
        [--eval-every 50] [--dropout]
"""

import argparse
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.host import announce_host  # noqa: E402
from bench.torch_pretraining import gathered_pretraining_losses, instance_masks  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "bench", "out")
CONFIGS = {"bert": "demo", "modernbert": "modernbert_demo"}


class RecordingReader:
    """A reader that keeps a copy of every batch it hands out (the trainer's position and
    resume calls pass through to the reader); `before_read(count)` is called with the
    number handed out so far before each read."""

    def __init__(self, reader, batches: list, before_read=None):
        self.reader, self.batches, self.before_read = reader, batches, before_read

    def __iter__(self):
        return self

    def __next__(self) -> dict:
        if self.before_read is not None:
            self.before_read(len(self.batches))
        batch = next(self.reader)
        self.batches.append({name: np.array(value) for name, value in batch.items()})
        return batch

    def __getattr__(self, name):
        return getattr(self.reader, name)


class Recorder:
    """Wraps a `dataset_factory`: the training batches in order, the held-out batches of
    every evaluation (`check_held_out`), and when the second training batch was asked for
    (the first step, compiled, has run: the trainer waits for it)."""

    def __init__(self, dataset_factory):
        self.dataset_factory, self.train, self.evaluations = dataset_factory, [], []
        self.second_batch_time = None

    def __call__(self, split, batch_size, process_index, process_count):
        reader = self.dataset_factory(split, batch_size, process_index, process_count)
        if split == "train":
            return RecordingReader(reader, self.train, self._note_second_batch)
        self.evaluations.append([])
        return RecordingReader(reader, self.evaluations[-1])

    def _note_second_batch(self, count: int) -> None:
        if count == 1 and self.second_batch_time is None:
            self.second_batch_time = time.perf_counter()

    def check_held_out(self) -> list:
        """The held-out batches, the same at every evaluation (or this raises)."""
        first = self.evaluations[0]
        for later in self.evaluations[1:]:
            if len(later) != len(first) or not all(
                    np.array_equal(a[name], b[name]) for a, b in zip(first, later)
                    for name in a):
                raise AssertionError("the held-out batches changed between evaluations")
        return first


class TimedEvaluator:
    """The run's own evaluator (`TermEvaluator`), timed, so that the run's time can be
    counted without it; `curve` holds (step, held-out MLM loss, seconds it took)."""

    def __init__(self, evaluator):
        object.__setattr__(self, "evaluator", evaluator)
        object.__setattr__(self, "curve", [])

    def __call__(self, bundle, state, step):
        start = time.perf_counter()
        metrics = self.evaluator(bundle, state, step)
        self.curve.append((step, metrics["mlm_loss"], time.perf_counter() - start))
        return metrics

    def __getattr__(self, name):
        return getattr(self.evaluator, name)

    def __setattr__(self, name, value):  # the loop sets show_progress on its evaluator
        setattr(self.evaluator, name, value)


def run_config_for(family: str, args):
    """The family's demo config: `--steps` of its own schedule, evaluation every
    `--eval-every` steps, demo data under bench/out, dropout off unless `--dropout`."""
    from bert_jax.run_config import load_run_config

    overrides = [f"--config.data.demo_dir={os.path.join(OUT, CONFIGS[family] + '_data')}",
                 f"--config.eval.every_steps={args.eval_every}",
                 f"--config.log_every_steps={args.eval_every}"]
    run_config = load_run_config(CONFIGS[family], overrides)
    # Fewer steps (the quick check) follow the start of the demo's own schedule.
    run_config.schedule_steps = run_config.num_train_steps
    run_config.num_train_steps = args.steps
    run_config.checkpoint.every_steps = args.steps
    if family == "bert" and not args.dropout:
        run_config.model.dropout_rate = run_config.model.attention_dropout_rate = 0.0
    return run_config


def initial_weights(run_config, task):
    """bert-jax's initialisation of the run (its seed's), as numpy."""
    import jax

    from bert_jax import sharding
    from bert_jax.training import initial_state, train_step

    bundle = train_step.build_train_step(run_config, sharding.mesh_from_config(
        run_config.mesh), task)
    params = jax.tree.map(np.asarray, jax.device_get(
        bundle.init_state(jax.random.PRNGKey(run_config.seed)).params))
    return initial_state.LoadedWeights(f"seed {run_config.seed}", bundle.model_config, params)


def train_bert_jax(run_config, pretraining, weights) -> dict:
    """bert-jax's trainer from `weights`: the held-out curve, the recorded batches, the
    run's seconds without evaluations, and those of its first step (compilation)."""
    from bert_jax.training import trainer
    from bert_jax.training.evaluation import TermEvaluator

    recorder = Recorder(pretraining.dataset_factory)
    evaluator = TimedEvaluator(TermEvaluator(run_config.eval, recorder))
    with tempfile.TemporaryDirectory(dir=OUT) as workdir:
        start = time.perf_counter()
        trainer.train(run_config, workdir, task=pretraining.task, dataset_factory=recorder,
                      init_weights=lambda: weights, evaluator=evaluator, show_progress=False,
                      log=lambda *_: None)
        seconds = time.perf_counter() - start - sum(took for *_, took in evaluator.curve)
    baseline = evaluator.curve[0][2]  # step 0's evaluation runs before the first step
    return dict(curve=[(step, loss) for step, loss, _ in evaluator.curve],
                train=recorder.train, held_out=recorder.check_held_out(), seconds=seconds,
                first_step=recorder.second_batch_time - start - baseline)


class TorchSide:
    """transformers' model of the family with the reference optimizer of the run config's
    recipe; `losses(batch)` -> (loss to train, MLM sum, MLM count) of a numpy batch."""

    def __init__(self, family: str, model_dir: str, run_config):
        import torch
        import transformers

        from bert_jax.training.schedules import make_schedule

        self.family, settings = family, run_config.optimizer
        if family == "bert":
            self.model = transformers.BertForPreTraining.from_pretrained(model_dir)
        else:  # logits at the labelled positions only, as bert-jax's gathered head
            self.model = transformers.ModernBertForMaskedLM.from_pretrained(
                model_dir, sparse_prediction=True, attn_implementation="sdpa")
            self.window = self.model.config.local_attention // 2
        # bert-jax's decay_mask: every weight but norms' and biases.
        named = list(self.model.named_parameters())
        exempt = [p for n, p in named if "norm" in n.lower() or n.endswith("bias")]
        decayed = [p for n, p in named if not ("norm" in n.lower() or n.endswith("bias"))]
        groups = [{"params": decayed, "weight_decay": settings.weight_decay},
                  {"params": exempt, "weight_decay": 0.0}]
        peak, betas = settings.learning_rate, (settings.beta1, settings.beta2)
        if settings.name == "stable_adamw":
            from optimi import StableAdamW
            self.optimizer = StableAdamW(
                groups, lr=peak, betas=betas, eps=settings.epsilon,
                decouple_lr=settings.decouple_learning_rate, max_lr=peak, foreach=True,
                triton=False)
        else:
            assert settings.name == "adamw", settings.name
            self.optimizer = torch.optim.AdamW(groups, lr=peak, betas=betas,
                                               eps=settings.epsilon)
        schedule = make_schedule(settings, run_config.schedule_steps or
                                 run_config.num_train_steps)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda step: float(schedule(step)) / peak)
        self.clip_norm, self.torch = settings.clip_norm, torch

    def losses(self, batch: dict):
        torch = self.torch
        tensors = {name: torch.from_numpy(value) for name, value in batch.items()}
        weights = tensors["masked_lm_weights"].float()
        if self.family == "bert":
            mlm_loss, nsp_loss = gathered_pretraining_losses(self.model, tensors)
            count = weights.sum()
            return mlm_loss + nsp_loss, mlm_loss * (count + 1e-5), count
        labels = torch_labels(batch)
        loss = self.model(
            input_ids=tensors["input_ids"].long(), labels=labels,
            attention_mask=instance_masks(batch["instance_ids"], self.window),
            position_ids=tensors["position_ids"].long()).loss
        count = (labels != -100).sum()
        return loss, loss * count, count

    def train_step(self, batch: dict) -> None:
        self.model.train()
        loss, _, _ = self.losses(batch)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if self.clip_norm > 0:
            self.torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.clip_norm)
        self.optimizer.step()
        self.scheduler.step()

    def held_out_loss(self, batches: list) -> float:
        """The MLM loss over all the batches' masked tokens (sums added first, as
        bert-jax's evaluation)."""
        self.model.eval()
        total, count = 0.0, 0.0
        with self.torch.no_grad():
            for batch in batches:
                _, batch_sum, batch_count = self.losses(batch)
                total, count = total + float(batch_sum), count + float(batch_count)
        return total / count


def torch_labels(batch: dict):
    """(B, T) labels of a masked-LM batch: the original token at each masked position
    (weight > 0), -100 (ignored) elsewhere."""
    import torch

    labels = np.full(batch["input_ids"].shape, -100, np.int64)
    rows, slots = np.nonzero(batch["masked_lm_weights"] > 0)
    labels[rows, batch["masked_lm_positions"][rows, slots]] = (
        batch["masked_lm_ids"][rows, slots])
    return torch.from_numpy(labels)


def train_torch(family: str, model_dir: str, run_config, jax_run: dict, eval_steps) -> dict:
    """transformers over the recorded batches, evaluated at `eval_steps` on the recorded
    held-out batches; its seconds without evaluations."""
    import torch

    torch.manual_seed(0)
    side, curve, evaluating = TorchSide(family, model_dir, run_config), [], 0.0
    start = time.perf_counter()
    for step in range(len(jax_run["train"]) + 1):
        if step in eval_steps:
            began = time.perf_counter()
            curve.append((step, side.held_out_loss(jax_run["held_out"])))
            evaluating += time.perf_counter() - began
            print(f"  step {step:5d}: held-out MLM loss bert-jax "
                  f"{dict(jax_run['curve'])[step]:.6f}, transformers {curve[-1][1]:.6f}",
                  flush=True)
        if step < len(jax_run["train"]):
            side.train_step(jax_run["train"][step])
    return dict(curve=curve, seconds=time.perf_counter() - start - evaluating)


def plot(family: str, jax_curve, torch_curve, path: str, title: str) -> None:
    """Both held-out curves above, their relative difference below."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (losses, gap) = plt.subplots(2, 1, figsize=(8, 6.5), sharex=True,
                                         height_ratios=(3, 1))
    for name, curve, style in (("bert-jax (its trainer)", jax_curve, "o-"),
                               ("transformers (torch loop)", torch_curve, "x--")):
        steps, values = zip(*curve)
        losses.plot(steps, values, style, markersize=4, label=name)
    losses.set_ylabel("held-out MLM loss")
    losses.set_title(title, fontsize=10)
    losses.legend()
    losses.grid(alpha=0.3)
    steps = [step for step, _ in jax_curve]
    relative = [(ours / theirs - 1) * 100 for (_, ours), (_, theirs) in zip(jax_curve,
                                                                              torch_curve)]
    gap.plot(steps, relative, "k.-")
    gap.axhline(0, color="grey", linewidth=0.5)
    gap.set_xlabel("step")
    gap.set_ylabel("bert-jax vs\ntransformers (%)")
    gap.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", choices=sorted(CONFIGS), required=True)
    parser.add_argument("--steps", type=int, default=1000, help="of the demo's schedule")
    parser.add_argument("--eval-every", type=int, default=50,
                        help="steps between held-out evaluations (and step 0)")
    parser.add_argument("--dropout", action="store_true",
                        help="bert: keep the demo's dropout 0.1 (the runs then differ by RNG)")
    args = parser.parse_args()
    announce_host()  # the CPU, its ISA, threads and load: figures carry their host
    os.environ.setdefault("JAX_PLATFORMS", "cpu")  # no accelerator probing on a CPU host
    from bert_jax.interop.model_writers import export_huggingface
    from bert_jax.tasks.pretraining_data import prepare_run

    os.makedirs(OUT, exist_ok=True)
    run_config = run_config_for(args.family, args)
    pretraining = prepare_run(run_config, log=lambda *_: None)  # builds the demo data once
    weights = initial_weights(run_config, pretraining.task)
    model_dir = os.path.join(OUT, f"pretraining_curves_{args.family}_initial_hf")
    export_huggingface(weights.config, weights.params, pretraining.tokenizer, model_dir,
                       overwrite=True)
    batch, seq_len = run_config.batch_size, run_config.data.seq_len
    print(f"{args.family}: configs/{CONFIGS[args.family]}.py, {args.steps} steps of "
          f"{batch} x {seq_len} ({run_config.model_preset}, {run_config.optimizer.name}, "
          f"schedule {run_config.optimizer.schedule} over {run_config.schedule_steps} steps, "
          f"dropout {'as the preset' if args.dropout else 'off'}), held-out MLM loss on "
          f"{run_config.eval.num_batches} x {run_config.eval.batch_size} rows every "
          f"{args.eval_every} steps", flush=True)
    jax_run = train_bert_jax(run_config, pretraining, weights)
    eval_steps = {step for step, _ in jax_run["curve"]}
    torch_run = train_torch(args.family, model_dir, run_config, jax_run, eval_steps)
    tokens = sum(int(batch["input_mask"].sum()) for batch in jax_run["train"])
    (_, ours), (_, theirs) = jax_run["curve"][-1], torch_run["curve"][-1]
    for (step, ours_then), (_, theirs_then) in list(zip(jax_run["curve"],
                                                        torch_run["curve"]))[:2]:
        print(f"held-out MLM loss at step {step}: bert-jax {ours_then:.6f}, transformers "
              f"{theirs_then:.6f} (relative {ours_then / theirs_then - 1:+.1e})")
    print(f"final held-out MLM loss (step {args.steps}): bert-jax {ours:.4f}, transformers "
          f"{theirs:.4f}, bert-jax {(ours / theirs - 1) * 100:+.2f}% relative")
    steady = jax_run["seconds"] - jax_run["first_step"]
    print(f"tokens/s over the whole run ({tokens} real tokens, evaluations left out): "
          f"bert-jax {tokens / jax_run['seconds']:.0f} ({jax_run['seconds']:.1f} s, of which "
          f"{jax_run['first_step']:.1f} s the first step with its compilation; "
          f"{tokens * (args.steps - 1) / args.steps / steady:.0f} after it), transformers "
          f"{tokens / torch_run['seconds']:.0f} ({torch_run['seconds']:.1f} s)")
    path = os.path.join(OUT, f"pretraining_curves_{args.family}.png")
    plot(args.family, jax_run["curve"], torch_run["curve"], path,
         f"configs/{CONFIGS[args.family]}.py, {args.steps} steps of {batch} x {seq_len}\n"
         "same initial weights, batches, masks, optimizer and schedule")
    print(f"plot: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
