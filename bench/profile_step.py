"""Where a CPU train step spends its time: a jax.profiler trace grouped by model part.

Traces a few steps of the real jitted `train_step`, then adds up the time of every XLA
operation (fusion) on the XLA worker threads and files it under the model part its HLO metadata names: attention
(score and context products, softmax, dropout), the dense matmuls, LayerNorm, GELU,
dropout random bits, the masked-LM head and vocabulary projection, the loss, and the
optimizer update. Matmuls (YNNPACK/oneDNN dot fusions) are shown apart from the
elementwise work in each part. Times are each operation's share of the wall clock per step:
XLA's CPU runtime runs independent operations on its threads at once (the masked-LM head's two
gradient products, each on one thread), and an instant k operations share counts 1/k to each,
so the times add up to the time some operation ran, at most the wall time. (Summed thread
times, printed beside, count such an instant k times.)

Two steps can be traced:
- `--task pretrain` (the default): a pre-training step of `--preset` (batch 8 x 128, 20
  predictions, as `bench/model_step.py`);
- `--task qa`: a SQuAD step of `finetune qa` on the MiniLM weights, full windows of
  `--seq-len` (batch 32 x 256 by default, as `bench/finetune.py --sections squad`);
- `--task modernbert`: the masked-LM step of bench/modernbert_step.py (ModernBERT-base's
  widths, `--layers` of them, `--layout` padded or packed rows). `--peer` then profiles
  transformers' step on the same rows and weights beside it (sdpa, torch-optimi's
  StableAdamW; torch.profiler) and prints both steps split by kind of work: the matrix
  products, the attention core, the optimizer, the rest (elementwise passes and
  reductions);
- `--task eurobert`: the masked-LM step of bench/eurobert_step.py (EuroBERT-210m's widths,
  `--layers` of them, every position a slot of its 128,256-word head); `--peer` as for
  modernbert, beside transformers' EuroBertForMaskedLM and torch's AdamW;
- `--task embed`: one batch of `bert-jax embed` (`embed_batch`: MiniLM's forward, mean
  pooling, normalisation) on `--batch` x `--seq-len` random ids (32 x 48 by default), no
  gradient; `--peer` profiles sentence-transformers' forward of the same batch beside it.

torch's profiler times each operation on the thread that calls it (its intra-op threads work
inside it, one operation at a time), while XLA's operations are spread over its threads (and
YNNPACK's helper tasks are not traced), so with `--peer` each side's kinds are given as shares
of its own busy time and as those shares of its step's wall time; process CPU / wall says how
busy each side keeps the cores.

Usage: python bench/profile_step.py [--task pretrain|qa|modernbert|eurobert|embed] [--preset base]
       [--batch B] [--seq-len T] [--steps 2] [--layers 22] [--layout padded] [--peer] [--scan]
"""

import argparse
import collections
import os
import re
import sys
import tempfile
import time

import numpy as np

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from host import announce_host  # noqa: E402  (bench/ is on the path here)
from timed_rounds import warm_up  # noqa: E402
from xla_cpu_trace import op_names, read_threads, thread_times, wall_times  # noqa: E402

# (part, pattern on the HLO op_name), first match wins; op_names carry the flax module path
# and named scopes (`dropout` in bert_jax/models/layers/dropout.py, also inside attention chunks).
PARTS = (
    ("dropout random bits", r"random_bits|threefry|random_wrap|random_unwrap|_fold_in"),
    ("attention q/k/v/output dense", r"attention/(query|key|value|qkv|output)"),
    ("rotary positions", r"rotary|rotate"),
    ("attention scores/context products", r"attention/.*(bqhd,bkhd|bhqk,bkhd)"),
    ("attention softmax", r"attention/.*(softmax|reduce_max|exp|reduce_sum|sub|div)"),
    ("attention-probability dropout", r"attention/.*dropout"),
    ("feed-forward dense", r"mlp/(intermediate|input|output|gate|up|down)"),  # down: SwiGLU's
    ("feed-forward activation (GELU, SiLU)", r"mlp/|gelu|erf|silu|logistic"),
    ("LayerNorm", r"layer_norm|_norm/|/norm/"),
    ("hidden-state dropout", r"dropout"),
    ("MLM head + vocabulary projection", r"mlm_head|word_logits|nsp_head|take_along_axis|"
                                         r"pooler|/head/"),
    ("span head (qa_outputs)", r"qa_outputs|span"),
    ("embeddings", r"embeddings"),
)


# What no pattern names: a train step's optimizer (its op names carry no model path), and in
# a forward-only program the few operations with no op name (copies, conversions).
OTHER_PART = "optimizer update, clipping, state select (or unnamed)"


# The kinds of work both sides' profiles are split into (`--peer`): the parts above whose
# matrix products are the attention core's go there, every other part's products are
# "matrix products", and the rest of each part is "elementwise and reductions".
ATTENTION_PARTS = ("attention scores/context products", "attention softmax",
                   "attention-probability dropout")
KINDS = ("matrix products", "attention core", "optimizer", "elementwise and reductions")


def kind_of(part: str, matmul: bool) -> str:
    if part in ATTENTION_PARTS:
        return "attention core"
    if part == OTHER_PART:
        return "optimizer"
    return "matrix products" if matmul else "elementwise and reductions"


def torch_kind(name: str, under_optimizer: bool) -> str:
    """The kind of a torch operation (an aten op name), or of any inside the optimizer."""
    if under_optimizer:
        return "optimizer"
    if "scaled_dot_product" in name or "flash_attention" in name:
        return "attention core"
    if name in ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"):
        return "matrix products"
    return "elementwise and reductions"


def torch_profile(step, steps: int) -> tuple[collections.Counter, float, float]:
    """(microseconds per step of each kind, wall and process CPU seconds per step) of
    `steps` calls of `step` under torch.profiler: each operation's own time, on the thread
    that called it (torch's intra-op threads work inside it)."""
    import torch
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        start, cpu_start = time.perf_counter(), time.process_time()
        for _ in range(steps):
            step()
        wall = (time.perf_counter() - start) / steps
        cpu = (time.process_time() - cpu_start) / steps
    kinds = collections.Counter()
    for event in profile.events():
        parent, under_optimizer = event.cpu_parent, False
        while parent is not None and not under_optimizer:
            under_optimizer = parent.name.startswith("Optimizer.")
            parent = parent.cpu_parent
        if event.name.startswith("Optimizer."):
            under_optimizer = True
        kinds[torch_kind(event.name, under_optimizer)] += event.self_cpu_time_total / steps
    return kinds, wall, cpu


def peer_step(rows, layers: int, jax_step, family: str = "modernbert"):
    """transformers' train step (sdpa) on `rows` with the weights `jax_step` is given too:
    ModernBERT's (torch-optimi's StableAdamW) or EuroBERT's (torch's AdamW), as
    bench/modernbert_step.py and bench/eurobert_step.py build them."""
    import types
    import torch
    import transformers
    from modernbert_step import TorchModernBert, save_initial_weights, torch_sides
    from eurobert_step import TorchEuroBert, hf_model_config
    from bert_jax.interop import model_source
    with tempfile.TemporaryDirectory(prefix="profile-peer-") as directory:
        if family == "eurobert":
            torch.manual_seed(0)
            transformers.EuroBertForMaskedLM(hf_model_config(layers)).save_pretrained(directory)
            window, reference_class = None, TorchEuroBert  # every layer global
        else:
            window = save_initial_weights(layers, directory).local_attention // 2
            reference_class = TorchModernBert
        jax_step.load_params(model_source.in_directory(directory).load().params)
        reference = reference_class(directory)  # the weights are read into memory
    sides = torch_sides(rows, window, types.SimpleNamespace(unpacked=False, compile=False))
    return lambda: reference.train_step(*sides["transformers sdpa"])


def print_kinds(sides: dict) -> None:
    """Each side's kinds of work: ms of its own clock, share of that, the share of wall."""
    print(f"{'kind of work':28s}" + "".join(f" {name + ' ms':>24s} {'share':>6s} {'of wall':>8s}"
                                            for name in sides))
    for kind in KINDS:
        line = f"{kind:28s}"
        for kinds, wall, _ in sides.values():
            share = kinds[kind] / sum(kinds.values())
            line += f" {kinds[kind] / 1e3:24.1f} {100 * share:5.1f}% {share * wall * 1e3:6.0f}ms"
        print(line)
    print("wall ms/step, process CPU / wall: " + "; ".join(
        f"{name} {wall * 1e3:.0f}, {cpu / wall:.2f}" for name, (_, wall, cpu) in sides.items()))


def part_of(op_name: str) -> str:
    for part, pattern in PARTS:
        if re.search(pattern, op_name):
            return part
    if re.search(r"BertFor|Bert\b|encoder|modernbert", op_name):
        return "encoder other (residual adds, masks)"
    if "jvp(" in op_name or "transpose(" in op_name:
        return "loss (log-softmax, NLL)"
    if "embed_batch" in op_name:
        return "pooling and normalisation"
    return OTHER_PART


class QuestionAnsweringStep:
    """`finetune qa`'s jitted train step on MiniLM, full windows of random ids."""

    def __init__(self, batch_size: int, seq_len: int):
        import jax
        from finetune_recipe import minilm_directory
        from bert_jax import sharding
        from bert_jax.interop import model_source
        from bert_jax.tasks.question_answering import QuestionAnsweringTask
        from bert_jax.training import finetune, train_step
        model_config = model_source.resolve(minilm_directory()).load().config
        task = QuestionAnsweringTask()
        config = finetune.run_config_for(
            model_config, finetune.Settings(epochs=1, batch_size=batch_size, max_seq_len=seq_len))
        finetune.schedule_steps(config, 100 * batch_size)
        self.bundle = train_step.build_train_step(
            config, sharding.make_mesh(devices=jax.devices()[:1]), task=task)
        self.state = self.bundle.init_state(jax.random.PRNGKey(0))
        rng = np.random.default_rng(0)
        batch = {name: np.zeros(shape_of(batch_size, seq_len), dtype)
                 for name, (dtype, shape_of) in task.batch_schema().items()}
        batch["input_ids"] = rng.integers(1000, 20000, (batch_size, seq_len)).astype(np.int32)
        batch["input_mask"] = np.ones((batch_size, seq_len), np.int32)
        batch["start_positions"] = rng.integers(0, seq_len, batch_size).astype(np.int32)
        batch["end_positions"] = batch["start_positions"]
        batch["weights"] = np.ones(batch_size, np.float32)
        self.batch = jax.device_put(batch, self.bundle.batch_shardings)
        self.rng = jax.random.PRNGKey(1)

    def __call__(self) -> float:
        self.state, metrics = self.bundle.train_step(self.state, self.batch, self.rng)
        return float(metrics["loss"])  # waits for the step



class EmbeddingStep:
    """`bert-jax embed`'s jitted batch (`embed_batch`) on the MiniLM weights, random ids."""

    def __init__(self, batch_size: int, seq_len: int):
        from finetune_recipe import minilm_directory
        from bert_jax.embeddings.encoder import embed_batch, load_embedding_model
        self.directory = minilm_directory()
        self.model = load_embedding_model(self.directory)
        ids = np.random.default_rng(0).integers(1000, 20000, (batch_size, seq_len))
        self.inputs = (ids.astype(np.int32), np.zeros_like(ids, np.int32),
                       np.ones_like(ids, np.int32))
        settings = self.model.settings
        self.embed_batch = embed_batch
        self.static = dict(config=self.model.config, pooling=settings.pooling,
                           normalize=settings.normalize)

    def hlo_text(self) -> str:
        return self.embed_batch.lower(self.model.params, *self.inputs,
                                      **self.static).compile().as_text()

    def __call__(self) -> None:
        np.asarray(self.embed_batch(self.model.params, *self.inputs, **self.static))  # waits

    def peer(self):
        """sentence-transformers' forward of the same batch, under no_grad."""
        import torch
        from sentence_transformers import SentenceTransformer
        reference = SentenceTransformer(self.directory, device="cpu")
        ids, segments, mask = (torch.from_numpy(array).long() for array in self.inputs)

        def forward():
            with torch.no_grad():
                reference(dict(input_ids=ids, token_type_ids=segments,
                               attention_mask=mask))["sentence_embedding"]
        return forward

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", choices=("pretrain", "qa", "modernbert", "eurobert", "embed"),
                        default="pretrain")
    parser.add_argument("--layers", type=int, default=22,
                        help="modernbert, eurobert: encoder layers")
    parser.add_argument("--layout", choices=("padded", "packed"), default="padded",
                        help="modernbert, eurobert: the rows of bench/modernbert_step.py")
    parser.add_argument("--preset", default="base", help="the pre-training step's model")
    parser.add_argument("--batch", type=int, help="rows (default 8 pretrain, 32 qa)")
    parser.add_argument("--seq-len", type=int, help="tokens per row (default 128 pretrain, "
                                                    "256 qa)")
    parser.add_argument("--steps", type=int, default=2,
                        help="traced steps (after a warm-up of at least 2 to a steady heap)")
    parser.add_argument("--scan", action="store_true",
                        help="pretrain: the layer stack scanned (precision.scan_layers)")
    parser.add_argument("--top", type=int, default=0, help="also the N slowest operations")
    parser.add_argument("--peer", action="store_true",
                        help="modernbert, eurobert, embed: also transformers' step (or "
                             "sentence-transformers' forward) on the same inputs, by kind")
    args = parser.parse_args()
    if args.peer and args.task not in ("modernbert", "eurobert", "embed"):
        parser.error("--peer profiles transformers' ModernBERT or EuroBERT step or "
                     "sentence-transformers' embedding: use it with --task modernbert, "
                     "eurobert or embed")
    announce_host()  # the CPU, its ISA, threads and load: figures carry their host
    import jax
    if args.task == "qa":
        step = QuestionAnsweringStep(args.batch or 32, args.seq_len or 256)
        title = f"qa (MiniLM) {args.batch or 32} x {args.seq_len or 256}"
    elif args.task == "modernbert":
        from modernbert_step import MASK_RATE, make_rows, modernbert_jax_step
        batch, seq_len = args.batch or 4, args.seq_len or 1024
        rows = make_rows(args.layout, batch, seq_len, window=128, vocab_size=50368,
                         mask_rate=MASK_RATE)
        step = modernbert_jax_step(rows, args.layers)
        peer = peer_step(rows, args.layers, step) if args.peer else None
        title = f"ModernBERT-base ({args.layers} layers) {batch} x {seq_len} {args.layout}"
    elif args.task == "eurobert":
        from eurobert_step import MASK_RATE as EUROBERT_MASK_RATE, SHORT, eurobert_jax_step
        from masked_lm_rows import make_rows
        from bert_jax.models.presets import preset
        batch, seq_len = args.batch or 2, args.seq_len or 1024
        rows = make_rows(args.layout, batch, seq_len, SHORT, preset("eurobert-210m").vocab_size,
                         mask_rate=EUROBERT_MASK_RATE)
        step = eurobert_jax_step(rows, args.layers, sparse=False)
        peer = peer_step(rows, args.layers, step, "eurobert") if args.peer else None
        title = f"EuroBERT-210m ({args.layers} layers) {batch} x {seq_len} {args.layout}"
    elif args.task == "embed":
        step = EmbeddingStep(args.batch or 32, args.seq_len or 48)
        peer = step.peer() if args.peer else None
        title = f"embed (MiniLM forward) {args.batch or 32} x {args.seq_len or 48}"
    else:
        from model_step import JaxStep, make_batch
        step = JaxStep(args.preset, make_batch(args.batch or 8, args.seq_len or 128, 20),
                       precision_overrides={"scan_layers": args.scan})
        title = (f"{args.preset} {args.batch or 8} x {args.seq_len or 128}"
                 + (", scanned" if args.scan else ""))
    if isinstance(step, EmbeddingStep):
        hlo = step.hlo_text()
    else:
        hlo = step.bundle.train_step.lower(step.state, step.batch, step.rng).compile().as_text()
    names = op_names(hlo)
    # Both sides, alternating as the benches time them, until the heap holds still: a step
    # traced while the heap still grows is timed with its page faults (bench/timed_rounds.py).
    warm_up({"bert-jax": step, **({"reference": peer} if args.peer else {})}, minimum=2)
    with tempfile.TemporaryDirectory() as trace_dir:
        start, cpu_start = time.perf_counter(), time.process_time()
        jax.profiler.start_trace(trace_dir)
        for _ in range(args.steps):
            step()
        jax.profiler.stop_trace()
        wall = (time.perf_counter() - start) / args.steps
        cpu = (time.process_time() - cpu_start) / args.steps
        threads = read_threads(trace_dir)
        totals = wall_times(threads, args.steps)
        thread_total = sum(thread_times(threads, args.steps).values())
    parts, matmuls = collections.Counter(), collections.Counter()
    for name, nanoseconds in totals.items():
        part = part_of(names.get(name, ""))
        parts[part] += nanoseconds
        if re.match(r"(ynn|xnn|onednn)_fusion|dot", name) and "reduce" not in names.get(name, ""):
            matmuls[part] += nanoseconds
    total = sum(parts.values())
    print(f"{title}: wall {wall * 1e3:.0f} ms/step, process CPU {cpu * 1e3:.0f} ms/step, "
          f"XLA operations running {total / 1e6:.0f} ms/step of the wall (their summed thread "
          f"time {thread_total / 1e6:.0f}; with profiling on)")
    print(f"{'part':40s} {'ms/step':>9s} {'share':>6s} {'of it matmul':>13s}")
    for part, nanoseconds in parts.most_common():
        print(f"{part:40s} {nanoseconds / 1e6:9.1f} {100 * nanoseconds / total:5.1f}% "
              f"{matmuls[part] / 1e6:12.1f}")
    print(f"{'all matmuls':40s} {sum(matmuls.values()) / 1e6:9.1f} "
          f"{100 * sum(matmuls.values()) / total:5.1f}%")
    for name, nanoseconds in totals.most_common(args.top):
        print(f"{nanoseconds / 1e6:9.1f} ms {name:32s} {names.get(name, '')[-110:]}")
    if args.peer:
        kinds = collections.Counter()
        for part, nanoseconds in parts.items():
            kinds[kind_of(part, False)] += (nanoseconds - matmuls[part]) / 1e3
            kinds[kind_of(part, True)] += matmuls[part] / 1e3
        print("\nBy kind of work, beside the reference on the same inputs and weights "
              "(transformers' step with sdpa, or sentence-transformers' forward); bert-jax: each XLA "
              "operation's share of the wall clock (YNNPACK's helper threads untraced), the "
              "reference: each operation's own time on its calling thread")
        reference = "sentence-transformers" if args.task == "embed" else "transformers"
        print_kinds({"bert-jax": (kinds, wall, cpu), reference: torch_profile(peer, args.steps)})


if __name__ == "__main__":
    main()
