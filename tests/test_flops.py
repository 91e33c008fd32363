"""The analytic FLOPs count against two independent counts: the jaxpr's and XLA's."""

import math

import jax
import jax.extend.core as jax_core
import numpy as np
import pytest
from flax.linen import meta

from bert_jax.compiler import flops
from bert_jax import losses
from bert_jax.models.presets import preset
from bert_jax.models.bert import BertForPreTraining

BATCH, SEQ_LEN, PREDICTIONS = 2, 32, 5


def _dot_flops(jaxpr) -> int:
    """2 x multiply-adds of every dot_general in a (closed) jaxpr, sub-jaxprs included."""
    total = 0
    for equation in jaxpr.eqns:
        if equation.primitive.name == "dot_general":
            (lhs_contracting, _), _ = equation.params["dimension_numbers"]
            lhs_shape = equation.invars[0].aval.shape
            contracted = math.prod(lhs_shape[axis] for axis in lhs_contracting)
            total += 2 * contracted * math.prod(equation.outvars[0].aval.shape)
        for sub in jax_core.jaxprs_in_params(equation.params):
            total += _dot_flops(sub)
    return total


@pytest.fixture(scope="module")
def setup():
    config = preset("tiny", vocab_size=1000)
    rng = np.random.default_rng(0)
    batch = dict(
        input_ids=rng.integers(0, config.vocab_size, (BATCH, SEQ_LEN)).astype(np.int32),
        segment_ids=np.zeros((BATCH, SEQ_LEN), np.int32),
        input_mask=np.ones((BATCH, SEQ_LEN), np.int32),
        masked_lm_positions=rng.integers(0, SEQ_LEN, (BATCH, PREDICTIONS)).astype(np.int32),
        masked_lm_ids=rng.integers(0, config.vocab_size, (BATCH, PREDICTIONS)).astype(np.int32),
        masked_lm_weights=np.ones((BATCH, PREDICTIONS), np.float32),
        next_sentence_labels=np.array([0, 1], np.int32))
    model = BertForPreTraining(config)

    def forward(params):
        return model.apply({"params": params}, batch["input_ids"], batch["segment_ids"],
                           batch["input_mask"], batch["masked_lm_positions"])

    def loss(params):
        mlm_logits, nsp_logits = forward(params)
        return losses.pretraining_loss(mlm_logits, nsp_logits, batch["masked_lm_ids"],
                                       batch["masked_lm_weights"],
                                       batch["next_sentence_labels"])[0]

    params = meta.unbox(model.init(jax.random.PRNGKey(0), batch["input_ids"],
                                   batch["segment_ids"], batch["input_mask"],
                                   batch["masked_lm_positions"])["params"])
    return config, params, forward, loss


def test_forward_flops_equal_the_jaxpr_matmuls(setup):
    config, params, forward, _ = setup
    counted = _dot_flops(jax.make_jaxpr(forward)(params).jaxpr)
    assert flops.forward_flops(config, BATCH, SEQ_LEN, PREDICTIONS) == counted


def test_train_step_flops_equal_the_gradient_jaxpr_matmuls(setup):
    # Backward = 2x forward holds exactly: every product needs both its input gradients.
    config, params, _, loss = setup
    counted = _dot_flops(jax.make_jaxpr(jax.value_and_grad(loss))(params).jaxpr)
    assert flops.train_step_flops(config, BATCH, SEQ_LEN, PREDICTIONS) == counted


def test_forward_flops_match_xla_cost_analysis(setup):
    # XLA also counts the elementwise work (softmax, GELU, LayerNorm): a few percent more.
    config, params, forward, _ = setup
    cost = jax.jit(forward).lower(params).compile().cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    analytic = flops.forward_flops(config, BATCH, SEQ_LEN, PREDICTIONS)
    assert analytic <= cost["flops"] <= 1.15 * analytic


def test_base_step_flops_by_hand():
    # BERT-base, 8 x 128 tokens, 20 predictions: per token 12 layers x (8*768^2 [q,k,v,o]
    # + 4*768*3072 [mlp] + 4*128*768 [attention]), plus pooler, MLM head and NSP head.
    config = preset("base")
    per_token = 12 * (8 * 768**2 + 4 * 768 * 3072 + 4 * 128 * 768)
    per_sequence = (128 * per_token + 2 * 768**2
                    + 20 * (2 * 768**2 + 2 * 768 * 30522) + 2 * 768 * 2)
    assert flops.train_step_flops(config, 8, 128, 20) == 3 * 8 * per_sequence
    assert flops.train_step_flops(config, 8, 128, 20) == 559_431_917_568  # ~0.56 TFLOP


def test_real_token_flops_count_each_instance_at_its_own_length():
    config = preset("mini", vocab_size=1000)
    # One instance filling its row: exactly the padded step's count.
    assert flops.real_token_train_flops(config, [SEQ_LEN], PREDICTIONS) == \
        flops.train_step_flops(config, 1, SEQ_LEN, PREDICTIONS)
    # Instances of 20 and 12 tokens (one packed row or two padded ones): each alone at its
    # length, so less than a row of 32 (attention is quadratic) and more than nothing.
    alone = sum(flops.train_step_flops(config, 1, length, 0) for length in (20, 12))
    with_heads = alone + flops.train_step_flops(config, 1, 1, PREDICTIONS) - \
        flops.train_step_flops(config, 1, 1, 0)
    assert flops.real_token_train_flops(config, [20, 12], PREDICTIONS) == with_heads
    assert with_heads < flops.train_step_flops(config, 2, SEQ_LEN, PREDICTIONS)
