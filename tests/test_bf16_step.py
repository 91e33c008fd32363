"""bf16 that pays: the bf16 train step's matmuls and activations are bf16, its parameters,
optimizer state, LayerNorm statistics, softmax and losses float32.

The step is lowered on the CPU (tiny model, dropout on) and its StableHLO read: what the
program asks each op to compute in, before any backend rewrites it.
"""

import re
from collections import Counter

import jax
import numpy as np
import pytest

from bert_jax import sharding
from bert_jax.tasks.pretraining import task_from_run_config
from bert_jax.training import train_step
from test_training_support import synthetic_batch, tiny_run_config

# float32 matmuls the bf16 step may hold, by (lhs, rhs, result) type, with the reason.
# None today: the MLM decoder and the NSP head run in bf16 and their logits are scored in
# float32 by the loss (losses.py), as autocast does.
ALLOWED_FLOAT32_DOTS: dict[tuple[str, str, str], str] = {}
_DOT = re.compile(r"stablehlo\.dot_general.*:\s*\((tensor<[^>]*>), (tensor<[^>]*>)\)\s*->\s*"
                  r"(tensor<[^>]*>)")
_TENSOR = re.compile(r"tensor<[^>]*>")


@pytest.fixture(scope="module")
def bf16_step():
    config = tiny_run_config()
    config.precision.dtype = "bfloat16"
    mesh = sharding.make_mesh(1, 1, 1, devices=jax.devices()[:1])
    bundle = train_step.build_train_step(config, mesh, task_from_run_config(config))
    text = bundle.train_step.lower(bundle.abstract_state, bundle.abstract_batch,
                                   bundle.abstract_rng).as_text()
    return config, bundle, text


def _dots(text: str) -> list[tuple[str, str, str]]:
    return [match.groups() for match in map(_DOT.search, text.splitlines()) if match]


def test_every_matmul_is_bf16_but_the_listed_ones(bf16_step):
    config, _, text = bf16_step
    dots = _dots(text)
    not_bf16 = Counter(dot for dot in dots if not all(t.endswith("xbf16>") for t in dot[:2]))
    assert set(not_bf16) <= set(ALLOWED_FLOAT32_DOTS), (
        f"float32 matmuls in the bf16 step: {dict(not_bf16)}; make them bf16 or list them "
        f"with a reason in ALLOWED_FLOAT32_DOTS")
    # Forward: q, k, v, output, 2 feed-forward, 2 attention products per layer, plus the
    # pooler, NSP, MLM transform and decoder; the backward pass holds two per forward one.
    forward = 8 * config.model.num_layers + 4
    assert len(dots) >= 3 * forward


def test_softmax_statistics_sums_and_losses_are_float32(bf16_step):
    config, _, text = bf16_step
    batch, heads, seq_len = config.batch_size, config.model.num_heads, config.data.seq_len
    exponentials = Counter(_TENSOR.findall(line)[-1] for line in text.splitlines()
                           if "stablehlo.exponential" in line)
    # The attention softmax, (B, nh, T, T), and the MLM log-softmax over the vocabulary.
    assert exponentials[f"tensor<{batch}x{heads}x{seq_len}x{seq_len}xf32>"] >= 1
    vocab, predictions = config.model.vocab_size, config.data.max_predictions
    assert exponentials[f"tensor<{batch}x{predictions}x{vocab}xf32>"] >= 1
    # Every sum is float32: LayerNorm statistics, softmax denominators, losses, and the
    # gradients of biases and embeddings (summed over the batch's rows).
    sums = [line for line in text.splitlines()
            if "stablehlo.reduce" in line and "applies stablehlo.add" in line]
    assert any(f"-> tensor<{batch}x{seq_len}xf32>" in line for line in sums)  # LayerNorm
    assert not [line.strip() for line in sums if "xbf16>" in line]


def test_activations_bf16_parameters_and_optimizer_state_float32(bf16_step):
    config, bundle, _ = bf16_step
    state = jax.eval_shape(bundle.init_state, jax.random.PRNGKey(0))
    dtypes = {leaf.dtype for leaf in jax.tree.leaves((state.params, state.opt_state))
              if leaf.ndim}
    assert dtypes == {np.dtype("float32")}
    batch = synthetic_batch(0, config.batch_size, config.data.seq_len,
                            config.data.max_predictions)
    inputs = bundle.task.model_inputs(batch)
    _, intermediates = jax.eval_shape(
        lambda params: bundle.model.apply({"params": params}, *inputs,
                                          mutable=["intermediates"]), state.params)
    hidden = intermediates["intermediates"]["bert"]["hidden_states"]
    assert {leaf.dtype for leaf in hidden} == {np.dtype("bfloat16")}  # the residual stream
