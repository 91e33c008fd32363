"""The optimizer update alone on a BERT's parameters: StableAdamW against optax's AdamW and
torch-optimi's StableAdamW (ModernBERT's), side by side in one process.

Each side updates the same parameter shapes (the preset's BertForPreTraining, float32) from
the same random gradients: bert-jax's `make_optimizer` (StableAdamW, weight decay masked, the
schedule evaluated in the update, no global clip) and `optax.adamw` jitted with donated state
as the train step runs them; torch-optimi's `StableAdamW` with its foreach implementation
(its fastest on a CPU; Triton needs a GPU) on two parameter groups (decay, no decay).
Timed in interleaved rounds so that load hits all three; the ratio per round is what counts.

Usage: python bench/optimizer_step.py [--preset base] [--rounds 5] [--steps 5]
"""

import argparse
import os
import statistics
import sys
import time

import numpy as np

os.environ.setdefault("JAX_PLATFORMS", "cpu")  # no TPU probing on a CPU host
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as bench/model_step.py, for torch
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench.host import announce_host  # noqa: E402


def _shapes(preset: str) -> dict:
    from bert_jax.interop.tensor_map import parameter_shapes
    from bert_jax.models.presets import preset as model_preset

    return {"/".join(path): shape
            for path, shape in parameter_shapes(model_preset(preset, vocab_size=30522)).items()}


def _jax_updater(transform, params, grads):
    """A function running one jitted update (state donated), and the time of each call."""
    import jax
    import optax

    @jax.jit
    def step(params, state, grads):
        updates, state = transform.update(grads, state, params)
        return optax.apply_updates(params, updates), state

    step = jax.jit(step, donate_argnums=(0, 1))
    box = {"params": jax.tree.map(jax.numpy.asarray, params),
           "state": transform.init(params)}

    def run():
        box["params"], box["state"] = step(box["params"], box["state"], grads)
        jax.block_until_ready(box["params"])
    run()  # compile
    return run


def _torch_updater(params, grads, decayed):
    import torch
    from optimi import StableAdamW

    tensors = {name: torch.tensor(value, requires_grad=True) for name, value in params.items()}
    for name, tensor in tensors.items():
        tensor.grad = torch.tensor(grads[name])
    groups = [{"params": [tensors[name] for name in tensors if decayed[name]]},
              {"params": [tensors[name] for name in tensors if not decayed[name]],
               "weight_decay": 0.0}]
    optimizer = StableAdamW(groups, lr=8e-4, betas=(0.9, 0.98), eps=1e-6, weight_decay=1e-5,
                            decouple_lr=True, foreach=True, triton=False)
    optimizer.step()  # creates its state
    return optimizer.step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="base")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=5, help="updates per side per round")
    args = parser.parse_args()
    announce_host()  # the CPU, its ISA, threads and load: figures carry their host

    import flax
    import jax
    import optax

    from bert_jax.run_config import base_config
    from bert_jax.training import optimizer

    shapes = _shapes(args.preset)
    rng = np.random.default_rng(0)
    flat = {name: rng.normal(0, 0.02, shape).astype(np.float32) for name, shape in shapes.items()}
    flat_grads = {name: rng.normal(0, 1e-3, shape).astype(np.float32)
                  for name, shape in shapes.items()}
    tree = flax.traverse_util.unflatten_dict({tuple(k.split("/")): v for k, v in flat.items()})
    grads = jax.tree.map(jax.numpy.asarray, flax.traverse_util.unflatten_dict(
        {tuple(k.split("/")): v for k, v in flat_grads.items()}))
    config = base_config().optimizer
    config.update(name="stable_adamw", learning_rate=8e-4, beta2=0.98, weight_decay=1e-5,
                  decouple_learning_rate=True, schedule="wsd", warmup_steps=0, clip_norm=0.0)
    stable, _ = optimizer.make_optimizer(config, total_steps=10_000)
    adamw = optax.adamw(8e-4, b1=0.9, b2=0.98, eps=1e-6, weight_decay=1e-5,
                        mask=optimizer.decay_mask)
    decayed = {"/".join(path): value for path, value in flax.traverse_util.flatten_dict(
        optimizer.decay_mask(tree)).items()}
    sides = {"bert-jax StableAdamW": _jax_updater(stable, tree, grads),
             "optax.adamw": _jax_updater(adamw, tree, grads),
             "torch-optimi StableAdamW (foreach)": _torch_updater(flat, flat_grads, decayed)}
    times = {name: [] for name in sides}
    for _ in range(args.rounds):
        for name, run in sides.items():
            began = time.perf_counter()
            for _ in range(args.steps):
                run()
            times[name].append((time.perf_counter() - began) / args.steps * 1e3)
    count = sum(int(np.prod(shape)) for shape in shapes.values())
    print(f"optimizer update of BERT-{args.preset} ({count / 1e6:.1f}M float32 parameters), "
          f"{args.rounds} rounds x {args.steps} updates, load {os.getloadavg()[0]:.1f}:")
    ours = times["bert-jax StableAdamW"]
    for name, values in times.items():
        ratios = [other / mine for other, mine in zip(values, ours)]
        print(f"  {name:36s} {statistics.median(values):8.1f} ms/update "
              f"({min(values):.1f}-{max(values):.1f}); its time / bert-jax StableAdamW's: "
              f"median {statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})")


if __name__ == "__main__":
    main()
