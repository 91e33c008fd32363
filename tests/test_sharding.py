"""The mesh, the logical-axis rule table, and layout invariance of the train step."""

import jax
import numpy as np
import pytest
from jax.sharding import PartitionSpec
from tolerances import ENCODER_STEPS, assert_close

from bert_jax import sharding
from bert_jax.tasks.pretraining import task_from_run_config
from bert_jax.training import train_step
from bert_jax.errors import UserError
from test_training_support import synthetic_batch, tiny_run_config


def test_mesh_sizes_fill_the_rest_and_reject_impossible_layouts():
    assert dict(sharding.make_mesh(2, -1, 2).shape) == {"data": 2, "fsdp": 2, "tensor": 2}
    assert dict(sharding.make_mesh(-1).shape) == {"data": 8, "fsdp": 1, "tensor": 1}
    explicit = sharding.make_mesh(1, 2, 1, devices=jax.devices()[2:4])
    assert list(explicit.devices.reshape(-1)) == jax.devices()[2:4]
    for sizes in [(3, -1, 1), (-1, -1, 1), (2, 2, 1), (0, 8, 1)]:
        with pytest.raises(UserError, match="mesh"):
            sharding.make_mesh(*sizes)


def _spec(bundle, *path):
    node = bundle.state_shardings.params
    for key in path:
        node = node[key]
    return node.spec


def test_rule_table_places_parameters_and_optimizer_moments():
    config = tiny_run_config()
    config.model.update(num_heads=2, vocab_size=64)
    bundle = train_step.build_train_step(config, sharding.make_mesh(2, 2, 2),
                                         task_from_run_config(config))
    query = _spec(bundle, "bert", "layer_0", "attention", "query", "kernel")
    assert query == PartitionSpec("fsdp", "tensor", None)  # (embed, heads, kv)
    assert _spec(bundle, "bert", "layer_0", "attention", "output", "kernel") == \
        PartitionSpec("tensor", None, "fsdp")  # (heads, kv, embed)
    assert _spec(bundle, "bert", "layer_0", "mlp", "intermediate", "kernel") == \
        PartitionSpec("fsdp", "tensor")  # (embed, mlp)
    assert _spec(bundle, "bert", "embeddings", "word_embeddings", "embedding") == \
        PartitionSpec(None, "fsdp")  # (vocab, embed): see the vocab rule's comment
    assert _spec(bundle, "bert", "embeddings", "layer_norm", "scale") == PartitionSpec("fsdp")
    # Adam's moments follow their parameters; the step counter is replicated.
    adam_state = bundle.state_shardings.opt_state[1][0]
    assert adam_state.mu["bert"]["layer_0"]["attention"]["query"]["kernel"].spec == query
    assert bundle.state_shardings.step.spec == PartitionSpec()
    assert bundle.batch_shardings["input_ids"].spec == PartitionSpec(("data", "fsdp"), None)


def test_activation_rules_keep_embed_whole_when_batch_takes_fsdp():
    import flax.linen as nn

    spec = nn.logical_to_mesh_axes(("batch", "seq", "embed"), sharding.LOGICAL_AXIS_RULES)
    assert tuple(spec) == (("data", "fsdp"), None, None)


def _losses(mesh, num_steps=5):
    config = tiny_run_config()
    bundle = train_step.build_train_step(config, mesh, task_from_run_config(config))
    state = bundle.init_state(jax.random.PRNGKey(0))
    rng = jax.random.PRNGKey(1)
    losses = []
    for position in range(num_steps):
        batch = synthetic_batch(position, config.batch_size, config.data.seq_len,
                                config.data.max_predictions)
        batch = {name: jax.device_put(value, bundle.batch_shardings[name])
                 for name, value in batch.items()}
        state, metrics = bundle.train_step(state, batch, rng)
        losses.append(float(metrics["loss"]))
    return np.array(losses)


def test_losses_do_not_depend_on_the_layout():
    reference = _losses(sharding.make_mesh(1, 1, 1, devices=jax.devices()[:1]))
    assert reference[-1] != reference[0]  # the parameters did move
    for sizes in [(8, 1, 1), (1, 8, 1), (2, 2, 2)]:
        losses = _losses(sharding.make_mesh(*sizes))
        # Another layout splits the same float32 sums between devices in another order
        # (ENCODER_STEPS of the loss's scale, per step), and five updates carry the
        # difference on through the parameters: 5 x ENCODER_STEPS.
        assert_close(losses, reference, 5 * ENCODER_STEPS, err_msg=str(sizes))
