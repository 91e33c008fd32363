"""Every collective of the compiled train step is one the mesh layout calls for.

The AOT compile runs in a subprocess (aot_helpers.py), as in tests/test_aot.py (libtpu beside conftest's eight
simulated CPU devices); tests/test_aot.py checks the data-parallel layout, this file FSDP.
"""

import pytest
from aot_helpers import compile_report

from bert_jax.compiler import aot_collectives, aot_hlo
from bert_jax.compiler.aot_hlo import Collective

FSDP = {"data": 1, "fsdp": 4, "tensor": 1}
DATA = {"data": 4, "fsdp": 1, "tensor": 1}
# bf16 and no attention dropout (splash attention), as configs/bert_base_fast.py, at tiny size.
TINY_FAST_CONFIG = """
from bert_jax.run_config import base_config

def get_config():
    config = base_config("tiny")
    config.model.vocab_size = 1024
    config.model.attention_dropout_rate = 0.0
    config.precision.dtype = "bfloat16"
    config.batch_size = 8
    config.data.seq_len = 128
    config.data.max_predictions = 10
    config.mesh.data = 1
    config.mesh.fsdp = -1
    return config
"""


def op(kind, op_name):
    return Collective(kind, op_name, group_size=4, bytes_sent=1.0)


BACKWARD = "jit(step_fn)/transpose(jvp(BertForPreTraining))/"
FORWARD = "jit(step_fn)/jvp(BertForPreTraining)/"


@pytest.mark.parametrize("collective, mesh_shape, explained", [
    (op("all-reduce", "jit(step_fn)/jvp()/reduce_sum"), DATA, True),  # the loss sums
    (op("all-reduce", ""), DATA, True),  # gradients, combined by XLA
    (op("all-reduce", FORWARD + "bert/layer_0/mlp/output/dot_general"), FSDP, False),
    (op("all-reduce", FORWARD + "bert/layer_0/mlp/output/dot_general"),
     {"data": 2, "fsdp": 1, "tensor": 2}, True),  # Megatron's partial sums
    (op("all-gather", FORWARD + "bert/layer_0/mlp/output/dot_general"), FSDP, True),
    (op("all-gather", FORWARD + "bert/layer_0/mlp/output/dot_general"), DATA, False),
    (op("collective-permute", BACKWARD + "bert/layer_0/mlp/output/dot_general"), FSDP, True),
    # What the masked-position gather and the MLM head's LayerNorm did before their rows were
    # pinned to the batch layout (bert_jax/models/bert.py, batch_split):
    (op("collective-permute", FORWARD + "jit(_take_along_axis)/gather"), FSDP, False),
    (op("all-to-all", BACKWARD + "mlm_head/layer_norm/mul"), FSDP, False),
    (op("all-to-all", FORWARD + "bert/embeddings/word_embeddings/jit(_take)/gather"), FSDP, True),
    (op("all-to-all", FORWARD + "bert/embeddings/word_embeddings/jit(_take)/gather"), DATA,
     False),
])
def test_each_collective_is_explained_by_its_layout_or_not(collective, mesh_shape, explained):
    assert aot_collectives.is_explained(collective, mesh_shape) == explained
    listed = aot_collectives.unexplained([collective, collective], mesh_shape)
    assert listed == ([] if explained else
                      [f"{collective.kind} x2 at {collective.op_name or '(combined)'}"])


def test_every_kind_has_a_reason():
    assert set(aot_collectives.WHY) == set(aot_hlo.COLLECTIVES)
    assert "tensor" in aot_collectives.why("all-reduce", {"tensor": 2})


def test_reordered_device_groups_give_their_own_size():
    hlo = ("  %ar = f32[8]{0} all-reduce(%p), channel_id=3, replica_groups=mesh['axis_0'=2,"
           "'axis_1'=1,'axis_2'=2], device_ids=([2,2]T(1,0)) {'axis_0'}, to_apply=%add, "
           'metadata={op_name="jit(step_fn)/reduce_sum"}')
    (collective,) = aot_hlo.collective_ops(hlo, num_devices=4)
    assert collective.group_size == 2 and collective.bytes_sent == 2 * 1 / 2 * 32
    assert collective.op_name == "jit(step_fn)/reduce_sum"


@pytest.fixture(scope="module")
def tiny_fsdp(tmp_path_factory):
    return compile_report(tmp_path_factory.mktemp("aot_fsdp"), TINY_FAST_CONFIG, "--topology", "v5e:2x2")


def test_fsdp_step_holds_only_the_collectives_its_layout_calls_for(tiny_fsdp):
    report, stdout = tiny_fsdp
    assert report["mesh_shape"] == FSDP and report["attention"] == "splash (Pallas)"
    assert report["unexplained_collectives"] == []
    counts = report["collectives"]
    # Parameters gathered and gradients scattered (as permutes or reduce-scatters); the
    # word-embedding lookup and its gradient are the only all-to-alls.
    assert counts["all-gather"] > 0 and counts["all-to-all"] == 2
    assert counts["collective-permute"] + counts["reduce-scatter"] > 0
    for kind in aot_hlo.COLLECTIVES:
        assert (aot_collectives.WHY[kind] in stdout) == (counts[kind] > 0)
    assert "NOT called for" not in stdout
