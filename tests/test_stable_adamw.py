"""StableAdamW (bert_jax/training/stable_adamw.py) against torch-optimi's and a float64 numpy
reference, through `make_optimizer` (weight-decay mask, warmup-stable-decay schedule)."""

import jax
import numpy as np
import pytest

from bert_jax.run_config import base_config
from bert_jax.training import optimizer

STEPS = 8
SHAPES = {"dense/kernel": (6, 5), "dense/bias": (5,), "layer_norm/scale": (5,),
          "embeddings/embedding": (11, 4), "quiet/kernel": (3, 3)}
DECAYED = ("dense/kernel", "embeddings/embedding", "quiet/kernel")  # not biases, not norms


def _config(decouple: bool):
    """ModernBERT's StableAdamW (betas 0.9/0.98, eps 1e-6) with a rate and decay large
    enough to move the parameters visibly in 8 steps (decay: 1% of a weight per step at the
    peak either way); warm-up 2, stable 3, 1-sqrt decay 3."""
    config = base_config().optimizer
    config.update(name="stable_adamw", learning_rate=0.05, warmup_steps=2, schedule="wsd",
                  decay_steps=3, decay_shape="1-sqrt", beta1=0.9, beta2=0.98, epsilon=1e-6,
                  weight_decay=0.01 if decouple else 0.2, decouple_learning_rate=decouple,
                  clip_norm=0.0)
    return config


def _tree(flat: dict) -> dict:
    tree = {}
    for name, value in flat.items():
        group, leaf = name.split("/")
        tree.setdefault(group, {})[leaf] = value
    return tree


def _inputs():
    """Parameters and 8 steps of gradients; a spike at step 4 (RMS clip above 1), and a tensor
    whose gradients are far below eps (its g^2 / v meets the eps^2 floor)."""
    rng = np.random.default_rng(0)
    params = {name: rng.normal(size=shape).astype(np.float32) for name, shape in SHAPES.items()}
    grads = []
    for step in range(STEPS):
        scale = {name: 30.0 if step == 4 and name == "dense/kernel" else 1.0 for name in SHAPES}
        scale["quiet/kernel"] = 1e-8
        grads.append({name: (scale[name] * rng.normal(size=shape)).astype(np.float32)
                      for name, shape in SHAPES.items()})
    return params, grads


def _ours(config, params, grads):
    """Parameters after each step, and the learning rate of each step."""
    tx, schedule = optimizer.make_optimizer(config, total_steps=STEPS)
    update = jax.jit(tx.update)
    state, current, history = tx.init(_tree(params)), _tree(params), []
    for step_grads in grads:
        updates, state = update(_tree(step_grads), state, current)
        current = jax.tree.map(lambda p, u: p + u, current, updates)
        history.append(jax.device_get(current))
    return history, [float(schedule(step)) for step in range(STEPS)]


def _optimi(config, params, grads, rates):
    """torch-optimi's StableAdamW on the same parameters, groups and per-step rates."""
    torch = pytest.importorskip("torch")
    optimi = pytest.importorskip("optimi")
    tensors = {name: torch.tensor(value, requires_grad=True) for name, value in params.items()}
    groups = [{"params": [tensors[name] for name in SHAPES if name in DECAYED],
               "weight_decay": config.weight_decay},
              {"params": [tensors[name] for name in SHAPES if name not in DECAYED],
               "weight_decay": 0.0}]
    reference = optimi.StableAdamW(
        groups, lr=config.learning_rate, betas=(config.beta1, config.beta2),
        eps=config.epsilon, decouple_lr=config.decouple_learning_rate,
        max_lr=config.learning_rate, foreach=False, triton=False)
    history = []
    for rate, step_grads in zip(rates, grads):
        for group in reference.param_groups:
            group["lr"] = rate
        for name, tensor in tensors.items():
            tensor.grad = torch.tensor(step_grads[name])
        reference.step()
        history.append(_tree({name: tensor.detach().numpy().copy()
                              for name, tensor in tensors.items()}))
    return history


def _worst(history, expected):
    return max(float(np.max(np.abs(np.asarray(a, np.float64) - b)))
               for step_a, step_b in zip(history, expected)
               for a, b in zip(jax.tree.leaves(step_a), jax.tree.leaves(step_b)))


def _bound(params) -> float:
    """Both sides compute each step in float32 from the same gradients, with the same
    operations in another order (optimi: p (1 - lr wd) then p - lr m / d; here p + (-lr (m / d
    + wd p)); optimi's debiased betas in float64, ours in float32): each step may differ by a
    few float32 roundings of the largest parameter, and the differences add up over the steps
    (the gradients are given, so no difference feeds back). 4 roundings a step, |p| <= 4."""
    largest = max(4.0, max(float(np.max(np.abs(value))) for value in params.values()))
    return STEPS * 4 * float(np.finfo(np.float32).eps) * largest


# optimi warns that 1e-2 is a large fully decoupled decay: chosen so that 8 steps show it.
@pytest.mark.filterwarnings("ignore:You are using weight_decay")
@pytest.mark.parametrize("decouple", [True, False], ids=["decouple_lr", "decoupled"])
def test_stable_adamw_equals_torch_optimi(decouple):
    config = _config(decouple)
    params, grads = _inputs()
    history, rates = _ours(config, params, grads)
    assert rates[0] == 0.0 and rates[2] == np.float32(config.learning_rate) > rates[6] > 0.0
    expected = _optimi(config, params, grads, rates)
    worst = _worst(history, expected)
    print(f"StableAdamW vs torch-optimi ({'decouple_lr' if decouple else 'decoupled'} "
          f"weight decay), {STEPS} steps: max |param difference| {worst:.3g} "
          f"(bound {_bound(params):.3g})")
    assert worst <= _bound(params)
    # The parameters moved by far more than the bound, so the comparison can fail.
    assert _worst(history[-1:], [_tree(params)]) > 1000 * _bound(params)


def _numpy_reference(config, params, grads, rates):
    """The formula in float64 with Adam's usual bias correction (m / (1 - b1^t)), a form
    other than optimi's debiased betas; returns the parameters after each step and each
    step's per-tensor RMS."""
    b1, b2, eps, peak = config.beta1, config.beta2, config.epsilon, config.learning_rate
    p = {name: value.astype(np.float64) for name, value in params.items()}
    m = {name: np.zeros_like(value) for name, value in p.items()}
    v = {name: np.zeros_like(value) for name, value in p.items()}
    history, rms_seen = [], []
    for t, (rate, step_grads) in enumerate(zip(rates, grads), start=1):
        rms_of_step = {}
        for name in p:
            g = step_grads[name].astype(np.float64)
            m[name] = b1 * m[name] + (1 - b1) * g
            v[name] = b2 * v[name] + (1 - b2) * g * g
            m_hat, v_hat = m[name] / (1 - b1 ** t), v[name] / (1 - b2 ** t)
            rms = np.sqrt(np.mean(g * g / np.maximum(v_hat, eps * eps)))
            lr = rate / max(1.0, rms)
            decay = config.weight_decay * (lr / peak if config.decouple_learning_rate else lr)
            if name in DECAYED:
                p[name] = p[name] * (1 - decay)
            p[name] = p[name] - lr * m_hat / (np.sqrt(v_hat) + eps)
            rms_of_step[name] = rms
        history.append(_tree(dict(p)))
        rms_seen.append(rms_of_step)
    return history, rms_seen


def test_stable_adamw_equals_the_formula_in_float64():
    config = _config(decouple=True)
    params, grads = _inputs()
    history, rates = _ours(config, params, grads)
    expected, rms_seen = _numpy_reference(config, params, grads, rates)
    # The spike clips the kernel's step (RMS > 1), and the quiet tensor's v (~1e-16) is
    # floored at eps^2 = 1e-12, so its g^2 / v is ~1e-4 instead of ~1: both branches compared.
    assert rms_seen[4]["dense/kernel"] > 1.5
    assert rms_seen[3]["quiet/kernel"] < 0.1
    worst = _worst(history, expected)
    print(f"StableAdamW vs float64 numpy, {STEPS} steps: max |param difference| {worst:.3g}")
    # float32 against float64: each step rounds the parameter and the update (relative
    # 2^-24 each, and the moments a few times more); the same per-step budget as above.
    assert worst <= _bound(params)


def test_modernbert_recipe_is_a_run_config():
    """What a `modernbert_base` config will say (ModernBERT's training configs): StableAdamW
    lr 8e-4, betas 0.9/0.98, eps 1e-6, weight decay 1e-5 fully decoupled, none on biases and
    norms; WSD with a 1-sqrt decay; the batch from 768 to 4,608 sequences."""
    from bert_jax.run_config import load_run_config
    from bert_jax.training import batch_warmup

    overrides = {
        "optimizer.name": "stable_adamw", "optimizer.learning_rate": "8e-4",
        "optimizer.beta1": "0.9", "optimizer.beta2": "0.98", "optimizer.epsilon": "1e-6",
        "optimizer.weight_decay": "1e-5", "optimizer.decouple_learning_rate": "true",
        "optimizer.schedule": "wsd", "optimizer.decay_shape": "1-sqrt",
        "optimizer.warmup_steps": "300", "optimizer.decay_steps": "2000",
        "batch_size": "4608", "grad_accum_steps": "6", "batch_warmup.steps": "1000",
        "batch_warmup.start_batch_size": "768", "num_train_steps": "10000"}
    config = load_run_config("demo", [f"--config.{key}={value}"
                                      for key, value in overrides.items()])
    _, schedule = optimizer.make_optimizer(config.optimizer, config.num_train_steps)
    assert float(schedule(300)) == float(schedule(7999)) == np.float32(8e-4)
    np.testing.assert_allclose(float(schedule(9000)), 8e-4 * (1 - 0.5 ** 0.5), rtol=1e-6)
    warmup = batch_warmup.from_run_config(config)
    assert (warmup.batch_size(0), warmup.batch_size(1000)) == (768, 4608)
