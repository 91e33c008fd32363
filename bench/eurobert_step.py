"""EuroBERT on the CPU, bert-jax against transformers' `EuroBertForMaskedLM`: the forward
pass and the train step at EuroBERT-210m's widths, like for like, timed in one process.

The design is bench/modernbert_step.py's, and so is most of the code (imported from it
and from bench/masked_lm_rows.py, the rows both benches feed their sides):
both sides hold the same weights (transformers' random initialisation, saved to a temporary
directory and read into bert-jax through its Hugging Face reader `bert_jax.interop.
model_source`) and see the same batch: the same rows, the same masked positions (50% of
each sequence's tokens, EuroBERT's pre-training rate; token values do not change the work,
so the ids are random and a masked token keeps its id), float32, dropout off. Before timing
each side's masked-LM loss on the batch is printed, with the largest difference: equal
weights and equal inputs give equal losses, which is what makes the times comparable.

  model         preset "eurobert-210m" (hidden 768, 12 query and 12 key/value heads, SwiGLU
                3,072, RMSNorm, rotary theta 250,000, untied 128,256-token decoder) with
                `--layers` of its 12 layers.
  the work      transformers' EuroBertForMaskedLM has no sparse prediction: its head scores
                every position (T x 128,256 logits a row) and the loss keeps the masked
                ones (`labels` -100 elsewhere). bert-jax's head scores the slots the task
                gathers, so it is given T slots a row, slot t at position t, weighing 1
                only where t is masked (`MaskedLMTask(T, masked_lm_prob=1.0)`, whose
                max_predictions is T; `jax_batch(..., every_position=True)`): the same
                vocabulary projection, the same loss. `--sparse` gives bert-jax only the
                ceil(0.5 T) masked slots instead: less work than transformers does, for
                information, not a like-for-like figure.
  bert-jax      the project's jitted `eval_step` and `train_step` (masked-LM task) with
                EuroBERT's AdamW as its recipe ships it (`bert_jax/run_config/
                eurobert_recipe.eurobert_optimizer`: lr 3.6e-4, betas 0.9/0.95, eps 1e-5,
                weight decay 0.1 on all but norms and biases), without the recipe's
                global clip (neither side clips). The learning rate's schedule is a
                scalar: it does not change the work. Attention: `precision.attention=auto`.
  transformers  EuroBertForMaskedLM, forward under `torch.no_grad()`; train step: backward
                and `torch.optim.AdamW(foreach=True)`, the same hyper-parameters, no decay
                on norms (bert-jax's `decay_mask`; EuroBERT has no biases). Attention as
                `attn_implementation` "sdpa" and "eager", each timed: the faster is the
                peer. `--compile` adds `torch.compile` (sdpa), as information.

Layouts (`--layouts`), each at every `--seq-lens`: `padded`, `--rows` rows of one sequence
each (one under SHORT tokens, one the full length) padded to T; `packed`, sequences of the
same mix packed first-fit into `--rows` rows; bert-jax gets instance ids and positions
restarting at each sequence, transformers the same rows with a 4-D boolean attention mask
(each sequence sees only itself; EuroBERT has only full attention, and transformers' 5.x
`create_bidirectional_mask` passes a 4-D mask through as it is) and the same restarting
`position_ids`. Equal losses in both layouts show the computations are the same.
Throughput is in real (not padding) tokens a second. The sides alternate in `--rounds`
rounds of `--steps` calls; a ratio is the median of the per-round ratios, with their range.

Usage: python bench/eurobert_step.py [--layers 3] [--seq-lens 1024] [--rows 2]
       [--layouts padded,packed] [--modes forward,train] [--rounds 3] [--steps 1]
       [--sparse] [--unpacked] [--compile]
"""

import os
import sys
import tempfile

os.environ.setdefault("JAX_PLATFORMS", "cpu")  # no TPU probing on a CPU host
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as bench/model_step.py, for torch
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.host import announce_host  # noqa: E402
from bench.model_step import JaxStep  # noqa: E402
from bench.masked_lm_rows import Rows, jax_batch, make_rows  # noqa: E402
from bench.modernbert_step import (  # noqa: E402
    TorchMaskedLM, argument_parser, compare_all, compare_steps, decay_groups, jax_attention,
    layout_line, run_line, torch_sides, xla_products_step)

PRESET = "eurobert-210m"
MASK_RATE = 0.5  # EuroBERT's pre-training masking rate
SHORT = 128  # tokens: a quarter of the sequences are shorter (modernbert_step's mix)


def recipe_optimizer() -> dict:
    """EuroBERT's AdamW as bert-jax's recipe sets it, without the global clip."""
    import ml_collections
    from bert_jax.run_config.eurobert_recipe import eurobert_optimizer
    recipe = ml_collections.ConfigDict({"optimizer": ml_collections.ConfigDict()})
    eurobert_optimizer(recipe, learning_rate=3.6e-4)  # the 210m run's peak
    keys = ("name", "learning_rate", "beta1", "beta2", "epsilon", "weight_decay")
    return dict({key: recipe.optimizer[key] for key in keys}, clip_norm=0.0)


class TorchEuroBert(TorchMaskedLM):
    """transformers' EuroBertForMaskedLM and torch's AdamW, the recipe's hyper-parameters."""

    def __init__(self, directory: str, compile_model: bool = False):
        import torch
        import transformers
        model = transformers.EuroBertForMaskedLM.from_pretrained(directory)
        optimizer = recipe_optimizer()
        assert optimizer["name"] == "adamw"
        super().__init__(model, torch.optim.AdamW(
            decay_groups(model), lr=optimizer["learning_rate"],
            betas=(optimizer["beta1"], optimizer["beta2"]), eps=optimizer["epsilon"],
            weight_decay=optimizer["weight_decay"], foreach=True), compile_model)


def eurobert_jax_step(rows: Rows, layers: int, sparse: bool,
                      compiler_options: dict | None = None) -> JaxStep:
    """bert-jax's masked-LM steps of EuroBERT-210m with `layers` layers on `rows`: every
    position a slot (unless `sparse`: the masked ones), EuroBERT's AdamW."""
    from bert_jax.models.presets import preset
    from bert_jax.tasks.masked_lm import MaskedLMTask
    seq_len = rows.ids.shape[1]
    task = MaskedLMTask(seq_len, MASK_RATE if sparse else 1.0)  # 1.0: T slots a row
    return JaxStep(PRESET, jax_batch(rows, task.max_predictions, every_position=not sparse),
                   task=task, model_overrides=dict(num_layers=layers,
                                                   vocab_size=preset(PRESET).vocab_size),
                   optimizer_overrides=recipe_optimizer(), compiler_options=compiler_options)


def hf_model_config(layers: int):
    """transformers' EuroBertConfig of the preset with `layers` layers, field by field from
    bert-jax's (the HF reader's key map)."""
    import transformers
    from bert_jax.interop.hf_eurobert import CONFIG_KEYS
    from bert_jax.models.presets import preset
    ours = preset(PRESET, num_layers=layers)
    return transformers.EuroBertConfig(
        **{key: getattr(ours, field) for key, field in CONFIG_KEYS.items()},
        rope_parameters={"rope_type": "default", "rope_theta": ours.rope_theta})


def compare(layout: str, seq_len: int, hf_config, directory: str, args) -> list[str]:
    """One layout at one length: losses at equal weights (those saved in `directory`), then
    each mode's timed rounds."""
    from bert_jax.interop import model_source
    rows = make_rows(layout, args.rows, seq_len, SHORT, hf_config.vocab_size, args.seed,
                     mask_rate=MASK_RATE)
    params = model_source.in_directory(directory).load().params
    jax_step = eurobert_jax_step(rows, hf_config.num_hidden_layers, args.sparse)
    jax_step.load_params(params)
    others = xla_products_step(lambda options: eurobert_jax_step(
        rows, hf_config.num_hidden_layers, args.sparse, options), params, args)
    reference = TorchEuroBert(directory, args.compile)
    slots = ("the masked slots only (--sparse: less work than transformers')" if args.sparse
             else f"all {seq_len} positions of a row, as transformers")
    header = layout_line(layout, rows, jax_attention(args.rows, seq_len, None)
                         + f"; bert-jax's MLM head scores {slots}")
    return compare_steps(header, rows, jax_step, reference, torch_sides(rows, None, args),
                         args, others)


def main() -> None:
    parser = argument_parser(__doc__.splitlines()[0])
    parser.set_defaults(layers=3, seq_lens="1024", rows=2)
    parser.add_argument("--sparse", action="store_true",
                        help="bert-jax scores only the masked slots (different work)")
    args = parser.parse_args()
    announce_host()  # the CPU, its ISA, threads and load: figures carry their host
    import torch
    import transformers
    torch.set_num_threads(os.cpu_count())
    print(f"EuroBERT-210m's widths ({args.layers} of its 12 layers, hidden 768, 12 heads, 12 "
          f"key/value heads, SwiGLU 3,072, vocabulary 128,256), {run_line(args, MASK_RATE)}",
          flush=True)
    with tempfile.TemporaryDirectory(prefix="eurobert-bench-") as directory:
        torch.manual_seed(0)
        hf_config = hf_model_config(args.layers)
        transformers.EuroBertForMaskedLM(hf_config).save_pretrained(directory)
        compare_all(compare, hf_config, directory, args)


if __name__ == "__main__":
    main()
