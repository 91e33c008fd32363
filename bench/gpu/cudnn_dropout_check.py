"""Does cuDNN's fused attention dropout draw a new mask every step? A check for a GPU session.

jax's cuDNN entry takes its dropout seed at compile time (jax 0.10.2:
`fused_attention_stablehlo.dot_product_attention(..., seed=42)`); XLA's cuDNN graph adds a
random offset that it advances at every call. Whether that gives each step, row, head and
layer its own mask, and the backward pass the forward's, nobody has checked on a GPU, so
bert-jax takes cuDNN's dropout only with `precision.fused_attention_dropout` (opt-in). This
script reads the masks: with zero queries every kept probability is 1/T, and with identity
values (head size = T) query q's context is row q of the dropped-out probabilities, so an
entry is 0 where the mask dropped it. Checks (each printed PASS or FAIL; exit 1 on a FAIL):
  kept      the kept fraction is 1 - rate, within 4 standard deviations
  steps     two calls of one compiled forward+backward function: different masks
  rows      the rows of a batch, and the heads of a row, have different masks
  layers    two kernels in one function, seeded as bert-jax seeds two layers: different masks
  backward  the values' gradient is the forward's dropped probabilities: one mask both ways
  train     two train steps from the same state, batch and key (BERT-tiny, bf16, hidden
            dropout 0): different losses, where the reference path gives equal ones
--smoke runs it on the CPU with the reference dropout drawn from a new key per call (what
cuDNN should do): it checks the script, not cuDNN; `train` is printed, not enforced.

Usage: python bench/gpu/cudnn_dropout_check.py [--rate 0.1]
       python bench/gpu/cudnn_dropout_check.py --smoke
"""

import argparse
import os
import sys
import zlib

SMOKE = "--smoke" in sys.argv
os.environ.setdefault("JAX_PLATFORMS", "cpu" if SMOKE else "cuda")
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
_REPOSITORY = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, _REPOSITORY)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

BATCH, SEQ_LEN, HEADS = 4, 64, 4  # head size = SEQ_LEN: identity values read the mask out


def kernel(smoke: bool, rate: float):
    """(query, key, value, seed, call) -> context (B, T, nh, T): cuDNN's fused attention with
    its own dropout, or in --smoke the reference's dropout from a key per (seed, call)."""
    from bert_jax.models.layers import attention, attention_kernels

    ids = jnp.ones((BATCH, SEQ_LEN), jnp.int32)

    def fused(query, key, value, seed, call):
        del call  # cuDNN's offset is its own counter: nothing from the caller
        return attention_kernels.fused_context("cudnn", query, key, value, ids, 1, rate, seed)

    def reference(query, key, value, seed, call):
        dropout_key = jax.random.fold_in(jax.random.PRNGKey(seed), call)
        probabilities = attention.attention_probabilities(query, key, ids)
        return attention.attend(probabilities, value, rate, dropout_key, value.dtype)

    return reference if smoke else fused


def masks_and_gradient(smoke: bool, rate: float):
    """A jitted 'step': two layers' contexts and the first one's value gradient."""
    attend = kernel(smoke, rate)
    seeds = [zlib.crc32(name.encode()) for name in ("layer_0/attention", "layer_1/attention")]
    query = jnp.zeros((BATCH, SEQ_LEN, HEADS, SEQ_LEN), jnp.bfloat16)
    value = jnp.broadcast_to(jnp.eye(SEQ_LEN, dtype=jnp.bfloat16)[None, :, None, :],
                             query.shape)  # (B, T keys, nh, T): value of key k is e_k

    @jax.jit
    def step(call):
        first, pullback = jax.vjp(lambda v: attend(query, query, v, seeds[0], call), value)
        (value_gradient,) = pullback(jnp.ones_like(first))
        second = attend(query, query, value, seeds[1], call)
        return first, second, value_gradient

    return step


def mask(context):
    """(B, nh, T, T) kept entries from a context (B, T queries, nh, T keys)."""
    return np.transpose(np.asarray(context, np.float32) > 0, (0, 2, 1, 3))


def kernel_checks(smoke: bool, rate: float) -> dict[str, tuple[bool, str]]:
    step = masks_and_gradient(smoke, rate)
    first, second, gradient = step(0)
    again, _, _ = step(1)
    masks, masks_again, layer_two = mask(first), mask(again), mask(second)
    kept = masks.mean()
    spread = 4 * np.sqrt(rate * (1 - rate) / masks.size)
    # sum over queries of the dropped probabilities, from the forward and from the gradient
    column_sums = np.asarray(first, np.float32).sum(axis=1)  # (B, nh, T keys)
    from_gradient = np.asarray(gradient, np.float32)[..., 0]  # (B, T keys, nh): any column
    backward_error = np.abs(column_sums - np.transpose(from_gradient, (0, 2, 1))).max()
    return {
        "kept": (abs(kept - (1 - rate)) <= spread, f"kept {kept:.4f}, expected "
                 f"{1 - rate:.4f} +- {spread:.4f}"),
        "steps": ((masks != masks_again).mean() > 0.5 * rate,
                  f"{(masks != masks_again).mean():.3f} of entries differ between two calls"),
        "rows": (min((masks[0] != masks[1]).mean(), (masks[:, 0] != masks[:, 1]).mean())
                 > 0.5 * rate, f"rows 0/1 differ in {(masks[0] != masks[1]).mean():.3f}, "
                 f"heads 0/1 in {(masks[:, 0] != masks[:, 1]).mean():.3f}"),
        "layers": ((masks != layer_two).mean() > 0.5 * rate,
                   f"{(masks != layer_two).mean():.3f} of entries differ between two layers"),
        "backward": (backward_error < 0.05, f"forward vs gradient column sums differ by at "
                     f"most {backward_error:.4f}"),
    }


def train_losses(rate: float, fused: bool) -> tuple[float, float]:
    """Two BERT-tiny bf16 train steps from one state, batch and key: their losses."""
    from bench.model_step import JaxStep, make_batch

    step = JaxStep("tiny", make_batch(4, 128, 8), "bfloat16",
                   {"dropout_rate": 0.0, "attention_dropout_rate": rate},
                   precision_overrides={"fused_attention_dropout": fused})
    losses = []
    for _ in range(2):
        state = jax.tree.map(jnp.copy, step.state)  # the step donates its state
        _, metrics = step.bundle.train_step(state, step.batch, step.rng)
        losses.append(float(metrics["loss"]))
    return losses[0], losses[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=0.1, help="attention dropout rate")
    parser.add_argument("--smoke", action="store_true",
                        help="on the CPU, the reference's dropout: checks the script only")
    args = parser.parse_args()
    print(f"jax {jax.__version__} on {jax.devices()[0].device_kind}; attention dropout "
          f"{args.rate}; {'smoke (reference dropout, CPU)' if args.smoke else 'cuDNN'}")
    results = kernel_checks(args.smoke, args.rate)
    fused = train_losses(args.rate, fused=True)
    control = train_losses(0.0, fused=True)
    results["train"] = (fused[0] != fused[1] and control[0] == control[1],
                        f"rate {args.rate}: losses {fused[0]:.6f}, {fused[1]:.6f}; "
                        f"rate 0 (control): {control[0]:.6f}, {control[1]:.6f}")
    failed = []
    for name, (passed, detail) in results.items():
        enforced = not (args.smoke and name == "train")
        print(f"{'PASS' if passed else 'FAIL' if enforced else 'n/a '} {name:9s} {detail}")
        if enforced and not passed:
            failed.append(name)
    if failed:
        print(f"cuDNN's attention dropout fails: {', '.join(failed)}; keep "
              "precision.fused_attention_dropout off (the reference path drops correctly)")
        sys.exit(1)
    print("every check passed" + (" (smoke: the script, not cuDNN)" if args.smoke else ""))


if __name__ == "__main__":
    main()
