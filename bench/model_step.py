"""One full pre-training step, bert-jax against Hugging Face `BertForPreTraining` (PyTorch).

A step is forward, backward and AdamW with global-norm clipping at fp32, batch 8 x 128
tokens (no padding) with 20 masked-LM predictions per sequence plus next-sentence
prediction. bert-jax runs its real jitted `train_step` (`bert_jax.training.train_step`, donated
state, dropout on), its MLM head on the 20 gathered positions. PyTorch runs
`BertForPreTraining` in train mode with `torch.optim.AdamW(betas=(0.9, 0.999), eps=1e-6,
weight_decay=0.01)` and `clip_grad_norm_(1.0)`, in two ways:
  torch    `model(**inputs, labels=...)`, labels -100 except at the same 20 positions: what a
           user of transformers gets; its MLM head scores all 128 positions.
  torch-g  the same model's heads on the 20 gathered positions (bench/torch_pretraining.py,
           as bench/learning_curve.py trains it): the like-for-like comparison.
Token values do not change the work, so the batch is random ids.

Both frameworks use the same number of threads (all cores). The two are timed in
interleaved rounds, so a change in machine load hits both; the ratio per round is what
counts. Model-FLOPs utilisation (MFU, `bert_jax.compiler.flops`: matmul FLOPs only, 3x forward) is
reported against each framework's own fp32 matmul peak, measured in this process on large
square matmuls in every round (load changes the peak too), and against the better one; each
row's FLOPs are the work it does (`torch` counts its MLM head on all 128 positions).

Goals (issues 2 and 4): bert-jax >= 2x PyTorch's tokens/s on mini, >= 1.3x on base, and
>= 60% MFU of the JAX matmul peak on base.

`--xla-products` adds a row `jax-xla`: the same step and peak matmul compiled with XLA's
default matrix-product library, in this process, where the CPU's choice is oneDNN
(bert_jax/cpu_matmul.py): `jax/jax-xla` is then that choice's own ratio.

Packed against unpacked rows: bench/packing_step.py.

Usage: python bench/model_step.py [--presets mini,base] [--rounds 5] [--steps 3] [--xla-products]
"""

import argparse
import os
import statistics
import sys

import numpy as np

os.environ.setdefault("JAX_PLATFORMS", "cpu")  # no TPU probing on a CPU host
# OpenMP's default busy-waiting makes PyTorch 4x slower per step (6.6 vs 1.5 CPU-s on mini)
# when other processes share the cores; passive waiting costs it little on an idle machine.
# Set OMP_WAIT_POLICY=ACTIVE to measure PyTorch's default.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench.host import announce_host  # noqa: E402
from bench.timed_rounds import time_rounds, warm_up  # noqa: E402
from bert_jax.cpu_matmul import XLA_DEFAULT_OPTIONS  # noqa: E402

VOCAB_SIZE = 30522  # bert-base-uncased
XLA_PRODUCTS = "jax-xla"  # `--xla-products`' row: jax's step with XLA's default products


def make_batch(batch_size: int, seq_len: int, predictions: int, seed: int = 0) -> dict:
    """A full (unpadded) batch in the project's feature names, random ids and positions."""
    rng = np.random.default_rng(seed)
    positions = np.stack([np.sort(rng.choice(np.arange(1, seq_len), predictions, replace=False))
                          for _ in range(batch_size)])
    segment_ids = np.broadcast_to(np.arange(seq_len) >= seq_len // 2, (batch_size, seq_len))
    return dict(
        input_ids=rng.integers(0, VOCAB_SIZE, (batch_size, seq_len)).astype(np.int32),
        input_mask=np.ones((batch_size, seq_len), np.int32),
        segment_ids=segment_ids.astype(np.int32),
        masked_lm_positions=positions.astype(np.int32),
        masked_lm_ids=rng.integers(0, VOCAB_SIZE, (batch_size, predictions)).astype(np.int32),
        masked_lm_weights=np.ones((batch_size, predictions), np.float32),
        next_sentence_labels=rng.integers(0, 2, (batch_size,)).astype(np.int32))


class JaxStep:
    """The project's jitted train step on one CPU device; `__call__` runs one step,
    `forward` one evaluation (no gradient) of the same batch. The task is BERT's
    pre-training unless `task` is given (bench/modernbert_step.py: masked LM)."""

    def __init__(self, preset_name: str, batch: dict, dtype: str = "float32",
                 model_overrides: dict | None = None, data_overrides: dict | None = None,
                 precision_overrides: dict | None = None, task=None,
                 optimizer_overrides: dict | None = None, compiler_options: dict | None = None):
        import jax
        from bert_jax import run_config, sharding
        from bert_jax.tasks.pretraining import task_from_run_config
        from bert_jax.training import train_step
        config = run_config.base_config(preset_name)
        config.precision.dtype = dtype  # compute dtype; parameters stay float32
        config.precision.update(precision_overrides or {})  # e.g. the attention kernel
        config.model.vocab_size = VOCAB_SIZE
        config.model.update(model_overrides or {})  # e.g. attention_dropout_rate
        config.batch_size = batch["input_ids"].shape[0]
        config.data.seq_len = batch["input_ids"].shape[1]
        config.data.max_predictions = batch["masked_lm_positions"].shape[1]
        config.data.update(data_overrides or {})  # packed rows: max_sequences_per_row
        config.optimizer.warmup_steps = 10  # a non-zero learning rate from the first steps
        config.optimizer.update(optimizer_overrides or {})  # e.g. StableAdamW
        mesh = sharding.make_mesh(devices=jax.devices()[:1])
        self.bundle = train_step.build_train_step(config, mesh,
                                                  task or task_from_run_config(config))
        self.model_config = self.bundle.model_config
        self.state = self.bundle.init_state(jax.random.PRNGKey(0))
        self.batch = jax.device_put(batch, self.bundle.batch_shardings)
        self.rng = jax.random.PRNGKey(1)
        self._train_step, self._eval_step = self.bundle.train_step, self.bundle.eval_step
        if compiler_options:  # XLA options for these two programs alone (cpu_matmul's)
            self._train_step = self._train_step.lower(self.state, self.batch, self.rng).compile(
                compiler_options)
            self._eval_step = self._eval_step.lower(self.state.params, self.batch).compile(
                compiler_options)

    def __call__(self) -> float:
        self.state, metrics = self._train_step(self.state, self.batch, self.rng)
        return float(metrics["loss"])  # waits for the step

    def forward(self) -> float:
        """The jitted eval step (forward and loss, no gradient); waits for it."""
        outputs = self._eval_step(self.state.params, self.batch)
        return float(self.bundle.task.means(outputs["sums"], outputs["counts"])["loss"])

    def load_params(self, params: dict) -> None:
        """Starts from `params` (a nested numpy tree shaped as the model's, per layer; stacked
        here where the step keeps its layers stacked)."""
        import jax

        from bert_jax.models.layers.layer_scan import store_stacked

        plan = self.bundle.layer_storage.plan
        if plan is not None:
            params = store_stacked(params, plan)
        self.state = self.state.replace(params=jax.tree.map(
            lambda value, target: jax.device_put(np.asarray(value, np.float32), target.sharding),
            params, self.state.params))


class TorchStep:
    """transformers.BertForPreTraining with AdamW and clipping, the same sizes and batch."""

    def __init__(self, model_config, batch: dict):
        import torch
        import transformers
        torch.manual_seed(0)
        hf_config = transformers.BertConfig(
            vocab_size=model_config.vocab_size, hidden_size=model_config.hidden_dim,
            num_hidden_layers=model_config.num_layers,
            num_attention_heads=model_config.num_heads,
            intermediate_size=model_config.mlp_dim,
            max_position_embeddings=model_config.max_positions,
            type_vocab_size=model_config.num_segments, layer_norm_eps=model_config.layer_norm_eps,
            hidden_dropout_prob=model_config.dropout_rate,
            attention_probs_dropout_prob=model_config.attention_dropout_rate, hidden_act="gelu")
        self.model = transformers.BertForPreTraining(hf_config).train()
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-4, betas=(0.9, 0.999),
                                           eps=1e-6, weight_decay=0.01)
        labels = torch.full(batch["input_ids"].shape, -100, dtype=torch.long)
        positions = torch.from_numpy(batch["masked_lm_positions"]).long()
        labels.scatter_(1, positions, torch.from_numpy(batch["masked_lm_ids"]).long())
        self.inputs = dict(
            input_ids=torch.from_numpy(batch["input_ids"]).long(),
            attention_mask=torch.from_numpy(batch["input_mask"]).long(),
            token_type_ids=torch.from_numpy(batch["segment_ids"]).long(),
            labels=labels,
            next_sentence_label=torch.from_numpy(batch["next_sentence_labels"]).long())

    def loss(self):
        return self.model(**self.inputs).loss

    def update(self):
        """One step; returns the loss tensor without waiting for it."""
        import torch
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.loss()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        return loss

    def __call__(self) -> float:
        return float(self.update().detach())


class TorchGatheredStep(TorchStep):
    """The same model, optimizer and batch; its MLM head only on the masked positions."""

    def __init__(self, model_config, batch: dict):
        import torch
        super().__init__(model_config, batch)
        self.tensors = {name: torch.from_numpy(np.asarray(value)) for name, value in batch.items()}

    def loss(self):
        from bench.torch_pretraining import gathered_pretraining_losses
        mlm_loss, nsp_loss = gathered_pretraining_losses(self.model, self.tensors)
        return mlm_loss + nsp_loss


def matmul_runs(size: int, xla_products: bool = False) -> dict:
    """One fp32 (size x size) @ (size x size) product per call, for each framework (and,
    with `xla_products`, jax's compiled with XLA's default library as "jax-xla")."""
    import jax
    import jax.numpy as jnp
    import torch
    rng = np.random.default_rng(0)
    left, right = (rng.standard_normal((size, size), np.float32) for _ in range(2))
    jax_left, jax_right = jnp.asarray(left), jnp.asarray(right)
    jax_matmul = jax.jit(jnp.matmul)
    torch_left, torch_right = torch.from_numpy(left), torch.from_numpy(right)
    runs = {"jax": lambda: jax_matmul(jax_left, jax_right).block_until_ready(),
            "torch": lambda: torch.matmul(torch_left, torch_right)}
    if xla_products:
        xla_matmul = jax_matmul.lower(jax_left, jax_right).compile(XLA_DEFAULT_OPTIONS)
        runs[XLA_PRODUCTS] = lambda: xla_matmul(jax_left, jax_right).block_until_ready()
    return runs


def benchmark_preset(preset_name: str, args) -> list[str]:
    """Table rows for one model size: each framework's step, MFU against per-round peaks."""
    from bert_jax.compiler import flops
    batch = make_batch(args.batch_size, args.seq_len, args.predictions)
    jax_step = JaxStep(preset_name, batch)
    steps = {"jax": jax_step, "torch": TorchStep(jax_step.model_config, batch),
             "torch-g": TorchGatheredStep(jax_step.model_config, batch)}
    if args.xla_products:  # the same step and initial weights, XLA's default products
        steps[XLA_PRODUCTS] = JaxStep(preset_name, batch, compiler_options=XLA_DEFAULT_OPTIONS)
    # Model FLOPs of the work each row does: plain torch runs its MLM head on all positions.
    step_flops = {name: flops.train_step_flops(
        jax_step.model_config, args.batch_size, args.seq_len,
        args.seq_len if name == "torch" else args.predictions) for name in steps}
    peak_runs = matmul_runs(args.peak_size, args.xla_products)
    calls = {**steps, **{f"{name} peak": run for name, run in peak_runs.items()}}
    warm_up(calls, args.warmup)
    repeats = {name: args.steps if name in steps else args.peak_repeats for name in calls}
    times = time_rounds(calls, args.rounds, repeats)
    peaks = {name: [2 * args.peak_size**3 / statistics.median(r) for r in times[f"{name} peak"]]
             for name in peak_runs}  # FLOP/s per round
    peaks["torch-g"] = peaks["torch"]
    lines = [f"{preset_name:5s} matmul peak GFLOP/s, median of rounds (range): " + ", ".join(
        f"{name} {statistics.median(p) / 1e9:.1f} ({min(p) / 1e9:.1f}-{max(p) / 1e9:.1f})"
        for name, p in peaks.items() if name in peak_runs)]
    for name in steps:
        medians = [statistics.median(r) for r in times[name]]
        median = statistics.median(t for r in times[name] for t in r)
        achieved = [step_flops[name] / m for m in medians]  # per round
        own = statistics.median(a / p for a, p in zip(achieved, peaks[name]))
        best = statistics.median(a / max(pj, pt) for a, pj, pt in
                                 zip(achieved, peaks["jax"], peaks["torch"]))
        lines.append(
            f"{preset_name:5s} {name:7s} {args.batch_size * args.seq_len / median:9.0f} "
            f"{median * 1e3:9.1f} {min(medians) * 1e3:7.1f}-{max(medians) * 1e3:<7.1f} "
            f"{step_flops[name] / median / 1e9:7.1f} {100 * own:8.1f}% {100 * best:8.1f}%")
    for other in [name for name in steps if name != "jax"]:
        ratios = [statistics.median(t) / statistics.median(j)
                  for j, t in zip(times["jax"], times[other])]
        lines.append(
            f"{preset_name:5s} jax/{other} tokens/s ratio: median "
            f"{statistics.median(ratios):.2f} (rounds {min(ratios):.2f}-{max(ratios):.2f}); "
            f"{other} does {step_flops[other] / 1e9:.1f} GFLOP per step, "
            f"jax {step_flops['jax'] / 1e9:.1f}")
    return lines


def step_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of a timed step bench: sizes, batch, rounds and the matmul peak."""
    parser.add_argument("--presets", default="mini,base", help="comma-separated model sizes")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--predictions", type=int, default=20, help="masked positions per row")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds")
    parser.add_argument("--steps", type=int, default=3, help="timed steps per round and framework")
    parser.add_argument("--warmup", type=int, default=2,
                        help="untimed steps at least (compilation; then until a step takes "
                             "no fresh memory: warm_up)")
    parser.add_argument("--peak-size", type=int, default=2048, help="square matmul size for the peak")
    parser.add_argument("--peak-repeats", type=int, default=5, help="peak matmuls per round")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    step_arguments(parser)
    parser.add_argument("--xla-products", action="store_true",
                        help=f"also bert-jax's step and peak matmul with the products in XLA's "
                             f"default library ({XLA_PRODUCTS!r}), compiled so in this process: "
                             f"where this CPU runs them in oneDNN (bert_jax/cpu_matmul.py), the "
                             f"choice's own ratio")
    args = parser.parse_args()
    announce_host()  # the CPU, its ISA, threads and load: figures carry their host
    import jax
    import torch
    torch.set_num_threads(os.cpu_count())
    print(f"threads: torch {torch.get_num_threads()} (OMP_WAIT_POLICY="
          f"{os.environ['OMP_WAIT_POLICY']}), jax/XLA {os.cpu_count()} "
          f"({jax.devices()[0].device_kind}); jax {jax.__version__}, torch {torch.__version__}")
    print(f"batch {args.batch_size} x {args.seq_len}, {args.predictions} predictions; "
          f"{args.rounds} rounds x {args.steps} steps each; matmul peak: {args.peak_size}^2, "
          f"{args.peak_repeats} per round")
    print("MFU = model FLOPs / step time / matmul peak, per round (median over rounds)")
    print("size  frame    tokens/s   ms/step  round medians   GFLOP/s  MFU(own)  MFU(best)")
    for preset_name in args.presets.split(","):
        for line in benchmark_preset(preset_name, args):
            print(line, flush=True)

if __name__ == "__main__":
    main()
