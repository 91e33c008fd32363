"""ModernBERT on the CPU, bert-jax against transformers' `ModernBertForMaskedLM`: the forward
pass and the train step, like for like, timed in one process.

Both sides hold the same weights (transformers' random initialisation, read into bert-jax
through its Hugging Face reader) and see the same batch: the same rows, the same masked
positions (30% of each sequence's tokens, ModernBERT's rate; token values do not change the
work, so the ids are random and a masked token keeps its id), float32, dropout off
(ModernBERT's defaults). Before timing, each side's masked-LM loss on the batch is printed:
equal weights and equal inputs give equal losses, which is what makes the times comparable.

  bert-jax      the project's jitted steps (`bert_jax.training.train_step.build_train_step`
                with the masked-LM task, `tasks/masked_lm.py`): `eval_step` (forward and
                loss) and `train_step` (forward, backward, StableAdamW: `optimizer.name=
                stable_adamw`, lr 8e-4, betas 0.9/0.98, eps 1e-6, weight decay 1e-5 scaled
                by lr/peak (`decouple_learning_rate`), none on norms and biases, no global
                clip: StableAdamW clips each tensor's step itself). Its MLM head has the
                task's ceil(0.3 T) gathered slots a row (unused slots weigh 0) and on a CPU
                scores the slots in use, in eighths of all slots (`models/layers/
                slots_in_use.py`: 385 of the 616 where padded rows mask 340). Attention:
                `precision.attention=auto`, which on a CPU is the reference path, chunked.
  transformers  `ModernBertForMaskedLM` with `sparse_prediction=True` (logits only at the
                masked positions, as ours), the loss of `labels` (-100 elsewhere); forward
                under `torch.no_grad()`; train step: backward and torch-optimi's
                `StableAdamW` (foreach) with the same hyper-parameters and decay groups.
                Its attention as `attn_implementation` "sdpa" and "eager", each timed: the
                faster is the peer. `--compile` adds `torch.compile` (sdpa), as information.

Layouts (`--layouts`), each at every `--seq-lens`:
  padded  `--rows` rows, one sequence each: one shorter than ModernBERT's 128-token window,
          one the full length, the rest between; padded to the row length. Both sides run
          the same (rows, T) batch with its attention mask.
  packed  sequences of the same mix packed first-fit into `--rows` rows (a sequence that
          fits nowhere is cut to the largest room left, as a document's end is); bert-jax
          gets instance ids and position ids restarting at each sequence. transformers runs
          the same packed rows through its own `attention_mask` argument given as a dict of
          4-D masks per layer type (each sequence sees only itself, sliding layers only
          their window) and the same restarting `position_ids`: the computation of
          bert-jax's packed rows. `--unpacked` adds transformers on the same sequences
          unpacked, one a row padded to the longest (what its data collator feeds), sdpa
          only (eager would keep every layer's (rows, heads, T, T) probabilities).
Throughput is in real (not padding) tokens a second, the same work on every side.

The sides alternate in `--rounds` rounds of `--steps` calls each, so a change in machine
load hits them all; a ratio is the median over rounds of the per-round ratio, with the
range. The load average is printed before and after each layout: the machine is shared.

Usage: python bench/modernbert_step.py [--layers 22] [--seq-lens 512,1024] [--rows 4]
       [--layouts padded,packed] [--modes forward,train] [--rounds 3] [--steps 1]
       [--unpacked] [--compile]
"""

import argparse
import os
import statistics
import sys
import tempfile

os.environ.setdefault("JAX_PLATFORMS", "cpu")  # no TPU probing on a CPU host
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as bench/model_step.py, for torch
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.model_step import JaxStep  # noqa: E402
from bench.timed_rounds import time_rounds, warm_up  # noqa: E402
from bert_jax.cpu_matmul import XLA_DEFAULT_OPTIONS  # noqa: E402
from bench.host import announce_host  # noqa: E402
from bench.masked_lm_rows import (Rows, instances, jax_batch, make_rows,  # noqa: E402
                                  packed_masks, torch_labels, unpacked)

PRESET = "modernbert-base"
# `--xla-products`' side: bert-jax's step with its matrix products in XLA's default library.
XLA_PRODUCTS = "bert-jax, XLA's products"
MASK_RATE = 0.3  # ModernBERT's masking rate
# ModernBERT's StableAdamW recipe (torch-optimi's names).
LEARNING_RATE, BETAS, EPSILON, WEIGHT_DECAY = 8e-4, (0.9, 0.98), 1e-6, 1e-5


def decay_groups(model) -> list[dict]:
    """torch parameter groups as bert-jax's `decay_mask`: no weight decay on norms and
    biases."""
    named = list(model.named_parameters())
    no_decay = [p for n, p in named if "norm" in n or n.endswith("bias")]
    decay = [p for n, p in named if not ("norm" in n or n.endswith("bias"))]
    return [{"params": decay}, {"params": no_decay, "weight_decay": 0.0}]


class TorchMaskedLM:
    """A transformers masked-LM `model` and its `optimizer`, optionally `torch.compile`d;
    `inputs` per side name, each run with its attention implementation."""

    def __init__(self, model, optimizer, compile_model: bool = False):
        import torch
        self.model, self.optimizer = model, optimizer
        self.model.train()  # dropout rates are 0: train mode changes nothing but autograd use
        self.compiled = torch.compile(model) if compile_model else None
        self.no_grad = torch.no_grad

    def loss(self, inputs: dict, attention: str, compiled: bool = False):
        self.model.set_attn_implementation(attention)
        model = self.compiled if compiled else self.model
        return model(**inputs).loss

    def forward(self, inputs: dict, attention: str, compiled: bool = False) -> float:
        with self.no_grad():
            return float(self.loss(inputs, attention, compiled))

    def train_step(self, inputs: dict, attention: str, compiled: bool = False) -> float:
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.loss(inputs, attention, compiled)
        loss.backward()
        self.optimizer.step()
        return float(loss.detach())


class TorchModernBert(TorchMaskedLM):
    """transformers' ModernBertForMaskedLM (sparse prediction) and torch-optimi's
    StableAdamW."""

    def __init__(self, directory: str, compile_model: bool = False):
        import transformers
        from optimi import StableAdamW
        model = transformers.ModernBertForMaskedLM.from_pretrained(directory)
        super().__init__(model, StableAdamW(
            decay_groups(model), lr=LEARNING_RATE, betas=BETAS, eps=EPSILON,
            weight_decay=WEIGHT_DECAY, decouple_lr=True, foreach=True, triton=False),
            compile_model)


def hf_model_config(layers: int):
    import transformers
    from bert_jax.models.presets import preset
    ours = preset(PRESET, num_layers=layers)
    config = transformers.ModernBertConfig(
        vocab_size=ours.vocab_size, hidden_size=ours.hidden_dim,
        intermediate_size=ours.mlp_dim, num_hidden_layers=ours.num_layers,
        num_attention_heads=ours.num_heads, sparse_prediction=True)
    # The masked-LM task's layers and windows must be the ones transformers runs.
    assert config.local_attention == ours.local_attention and config.layer_types == [
        "full_attention" if ours.is_global(layer) else "sliding_attention"
        for layer in range(layers)]
    return config


def save_initial_weights(layers: int, directory: str):
    """transformers' random ModernBertForMaskedLM saved in `directory`, whose weights both
    sides read for each layout (kept on disk, not in memory: a base step at 4 x 1,024
    tokens takes 10 GB a side); returns its config."""
    import torch
    import transformers
    torch.manual_seed(0)
    model = transformers.ModernBertForMaskedLM(hf_model_config(layers))
    model.save_pretrained(directory)
    return model.config


def torch_sides(rows: Rows, window: int | None, args) -> dict:
    """Side name -> (inputs, attention implementation, compiled) of transformers' sides.
    Packed rows' `attention_mask` is the dict of 4-D masks per layer type, or with `window`
    None (a model whose every layer is full, EuroBERT) the full-attention mask alone."""
    import torch
    inputs = dict(input_ids=torch.from_numpy(rows.ids).long(), labels=torch_labels(rows))
    instance_ids, position_ids = instances(rows)
    if any(len(row) > 1 for row in rows.sequences):
        masks = packed_masks(rows, window or 0)
        position_ids = torch.from_numpy(position_ids).long()
        # eager adds its mask to the scores
        additive = lambda mask: torch.where(mask, 0.0, torch.finfo(torch.float32).min)  # noqa: E731
        if window is None:
            attention = {"sdpa": masks["full_attention"],
                         "eager": additive(masks["full_attention"])}
        else:
            attention = {"sdpa": masks, "eager": {
                name: additive(mask) for name, mask in masks.items()}}
        sides = {f"transformers {name}": (dict(inputs, attention_mask=mask,
                                                position_ids=position_ids), name, False)
                 for name, mask in attention.items()}
        if args.unpacked:
            alone = unpacked(rows)
            sides["transformers sdpa, unpacked"] = (dict(
                input_ids=torch.from_numpy(alone.ids).long(), labels=torch_labels(alone),
                attention_mask=torch.from_numpy(alone.ids > 0).long()), "sdpa", False)
    else:
        inputs["attention_mask"] = torch.from_numpy(instance_ids > 0).long()
        sides = {f"transformers {name}": (inputs, name, False) for name in ("sdpa", "eager")}
    if args.compile:
        sides["torch.compile sdpa"] = (sides["transformers sdpa"][0], "sdpa", True)
    return sides


def modernbert_jax_step(rows: Rows, layers: int, precision_overrides: dict | None = None,
                        compiler_options: dict | None = None) -> JaxStep:
    """bert-jax's masked-LM steps of ModernBERT-base with `layers` layers on `rows`, with
    ModernBERT's StableAdamW (the module docstring)."""
    from bert_jax.models.presets import preset
    from bert_jax.tasks.masked_lm import MaskedLMTask
    task = MaskedLMTask(rows.ids.shape[1], MASK_RATE)
    return JaxStep(PRESET, jax_batch(rows, task.max_predictions), task=task,
                   model_overrides=dict(num_layers=layers,
                                        vocab_size=preset(PRESET).vocab_size),
                   precision_overrides=precision_overrides, compiler_options=compiler_options,
                   optimizer_overrides=dict(
                       name="stable_adamw", learning_rate=LEARNING_RATE, beta1=BETAS[0],
                       beta2=BETAS[1], epsilon=EPSILON, weight_decay=WEIGHT_DECAY,
                       decouple_learning_rate=True, clip_norm=0.0))


def jax_attention(rows: int, seq_len: int, window: int | None) -> str:
    """What bert-jax's attention does on this batch (precision.attention=auto, a CPU); a
    `window` of None: every layer full."""
    from bert_jax.models.layers import attention, attention_kernels, banded_attention
    implementation = attention_kernels.choose("auto", "cpu", 0.0, seq_len, "float32")
    chunks = attention.chunk_count(rows, seq_len, -1, "cpu")
    block = banded_attention.band_block(seq_len, window, "cpu")
    chunked = f"{implementation}, {chunks} chunk(s) of {rows // chunks} row(s)"
    if window is None:
        return chunked + ", every layer full"
    return (chunked + ", sliding layers " + (
        f"in bands ({block} queries x {block + 2 * window} keys)" if block else
        "on the full T x T scores"))


def summary_lines(mode: str, times: dict, real_tokens: int, faults: dict) -> list[str]:
    """Each side's median time, real tokens/s and page faults a call per round (time_rounds),
    and bert-jax's ratio to each transformers side per round (the faster of sdpa and eager is
    the peer)."""
    medians = {name: [statistics.median(r) for r in rounds] for name, rounds in times.items()}
    lines = []
    for name, values in medians.items():
        median = statistics.median(values)
        lines.append(f"  {mode:7s} {name:30s} {median * 1e3:9.1f} ms/step "
                     f"(rounds {min(values) * 1e3:.0f}-{max(values) * 1e3:.0f}) "
                     f"{real_tokens / median:8.0f} real tokens/s; page faults a call by round "
                     + " ".join(f"{count / 1e3:.0f}k" for count in faults[name]))
    peer = min(("transformers sdpa", "transformers eager"),
               key=lambda name: statistics.median(medians[name]))
    for name in medians:
        if name == "bert-jax":
            continue
        ratios = [theirs / ours for theirs, ours in zip(medians[name], medians["bert-jax"])]
        lines.append(f"  {mode:7s} bert-jax / {name}{' (the peer)' if name == peer else ''}: "
                     f"{statistics.median(ratios):.2f}x real tokens/s "
                     f"(rounds {min(ratios):.2f}-{max(ratios):.2f})")
    return lines


def compare(layout: str, seq_len: int, hf_config, directory: str, args) -> list[str]:
    """One layout at one length: losses at equal weights (those saved in `directory`), then
    each mode's timed rounds."""
    from bert_jax.interop import model_source
    window = hf_config.local_attention // 2
    rows = make_rows(layout, args.rows, seq_len, hf_config.local_attention,
                     hf_config.vocab_size, args.seed, mask_rate=MASK_RATE)
    params = model_source.in_directory(directory).load().params
    jax_step = modernbert_jax_step(rows, hf_config.num_hidden_layers)
    jax_step.load_params(params)
    reference = TorchModernBert(directory, args.compile)
    header = layout_line(layout, rows, jax_attention(args.rows, seq_len, window))
    others = xla_products_step(lambda options: modernbert_jax_step(
        rows, hf_config.num_hidden_layers, compiler_options=options), params, args)
    return compare_steps(header, rows, jax_step, reference, torch_sides(rows, window, args),
                         args, others)


def xla_products_step(make_step, params: dict, args) -> dict:
    """With `--xla-products`, {XLA_PRODUCTS: `make_step(compiler_options)` compiled with
    XLA's default matrix-product library and holding `params`}; else {}."""
    if not args.xla_products:
        return {}
    step = make_step(XLA_DEFAULT_OPTIONS)
    step.load_params(params)
    return {XLA_PRODUCTS: step}


def layout_line(layout: str, rows: Rows, attention: str) -> str:
    """A layout's first line: its rows, sequences, tokens, bert-jax's `attention`, the load."""
    count, (height, seq_len) = sum(len(row) for row in rows.sequences), rows.ids.shape
    return (f"{seq_len} tokens, {layout}: {height} rows x {seq_len}, {count} sequences, "
            f"{rows.real_tokens} real tokens ({100 * rows.real_tokens / rows.ids.size:.1f}%), "
            f"{rows.num_masked} masked; bert-jax attention {attention};"
            f" load average {os.getloadavg()[0]:.1f}")


def compare_steps(header: str, rows: Rows, jax_step: JaxStep, reference: TorchMaskedLM,
                  sides: dict, args, other_jax_steps: dict | None = None) -> list[str]:
    """`header`, the masked-LM loss of bert-jax, of its `other_jax_steps` (name -> JaxStep:
    the same step compiled otherwise) and of each of transformers' `sides` (at equal weights),
    then each mode's timed rounds; returns the lines it printed."""
    import functools
    other_jax_steps = other_jax_steps or {}
    lines = [header]
    losses = {"bert-jax": jax_step.forward(),
              **{name: step.forward() for name, step in other_jax_steps.items()},
              **{name: reference.forward(*side) for name, side in sides.items()}}
    worst = max(abs(loss - losses["bert-jax"]) for loss in losses.values())
    lines.append("  masked-LM loss at equal weights: " + ", ".join(
        f"{name} {loss:.5f}" for name, loss in losses.items()) + f"; largest difference "
        f"{worst:.1e}")
    print(*lines, sep="\n", flush=True)
    for mode in args.modes.split(","):
        run = {"forward": reference.forward, "train": reference.train_step}[mode]
        calls = {name: step.forward if mode == "forward" else step
                 for name, step in {"bert-jax": jax_step, **other_jax_steps}.items()}
        calls.update({name: functools.partial(run, *side) for name, side in sides.items()})
        warm_up(calls, args.warmup)
        faults = {}
        times = time_rounds(calls, args.rounds, {name: args.steps for name in calls}, faults)
        mode_lines = summary_lines(mode, times, rows.real_tokens, faults)
        print(*mode_lines, sep="\n", flush=True)
        lines += mode_lines
    tail = f"  load average after: {os.getloadavg()[0]:.1f}"
    print(tail, flush=True)
    return lines + [tail]


def argument_parser(description: str) -> argparse.ArgumentParser:
    """This bench's options, which bench/eurobert_step.py shares (with its own defaults)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--layers", type=int, default=22,
                        help="encoder layers (default %(default)s; ModernBERT-base has 22)")
    parser.add_argument("--seq-lens", default="512,1024", help="comma-separated row lengths")
    parser.add_argument("--rows", type=int, default=4, help="rows per batch")
    parser.add_argument("--layouts", default="padded,packed", help="padded and/or packed")
    parser.add_argument("--modes", default="forward,train", help="forward and/or train")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved timing rounds")
    parser.add_argument("--steps", type=int, default=1, help="timed calls per round and side")
    parser.add_argument("--warmup", type=int, default=1,
                        help="untimed calls at least (compilation; then until a call takes "
                             "no fresh memory: bench/timed_rounds.py's warm_up)")
    parser.add_argument("--seed", type=int, default=0, help="the batch's lengths, ids, masks")
    parser.add_argument("--unpacked", action="store_true",
                        help="packed layout: also transformers on the sequences unpacked")
    parser.add_argument("--compile", action="store_true", help="also torch.compile (sdpa)")
    parser.add_argument("--xla-products", action="store_true",
                        help=f"also bert-jax with its matrix products in XLA's default library "
                             f"({XLA_PRODUCTS!r}), compiled so in this process: where this "
                             f"CPU runs them in oneDNN (bert_jax/cpu_matmul.py), the choice's "
                             f"own ratio")
    return parser


def run_line(args, mask_rate: float) -> str:
    """The settings every masked-LM step bench prints after its model: masking, rounds,
    threads and versions."""
    import jax
    import torch
    import transformers
    return (f"float32, dropout off, {mask_rate:.0%} masked; {args.rounds} rounds x "
            f"{args.steps} call(s) a side; threads: torch {torch.get_num_threads()} "
            f"(OMP_WAIT_POLICY={os.environ['OMP_WAIT_POLICY']}), XLA {os.cpu_count()}; "
            f"jax {jax.__version__}, torch {torch.__version__}, transformers "
            f"{transformers.__version__}")


def compare_all(compare, hf_config, directory: str, args) -> None:
    """`compare` at every `--seq-lens` and `--layouts`."""
    for seq_len in (int(n) for n in args.seq_lens.split(",")):
        for layout in args.layouts.split(","):
            compare(layout, seq_len, hf_config, directory, args)


def main() -> None:
    args = argument_parser(__doc__.splitlines()[0]).parse_args()
    announce_host()  # the CPU, its ISA, threads and load: figures carry their host
    import torch
    torch.set_num_threads(os.cpu_count())
    print(f"ModernBERT ({args.layers} layers, hidden 768, MLP 1152, 12 heads, vocabulary "
          f"50,368), {run_line(args, MASK_RATE)}", flush=True)
    with tempfile.TemporaryDirectory(prefix="modernbert-bench-") as directory:
        compare_all(compare, save_initial_weights(args.layers, directory), directory, args)


if __name__ == "__main__":
    main()
