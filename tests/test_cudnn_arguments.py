"""What cuDNN's fused attention is handed, read on a CPU (bert_jax/models/layers/attention_kernels.py).

cuDNN cannot be traced without a GPU, so both of its entries (JAX's public
`dot_product_attention(implementation='cudnn')` and the private segment entry beneath it)
are replaced by a fake that records its arguments and computes what cuDNN's documented
layout means (a query sees the keys of its own segment; offsets and lengths -1 past a row's
segments) with XLA's attention. The fake's output is held to the reference core on real
tokens, so the arguments must mean the rows' instances, not just have the right shapes; and
no path hands cuDNN the sequence length as its slot count (4.5x slower on an H100).
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax._src.cudnn import fused_attention_stablehlo

from bert_jax.errors import UserError
from bert_jax.models.layers import attention, attention_kernels
from bert_jax.models.bert import BertModel
from bert_jax.models.config import Precision
from bert_jax.tasks.pretraining import PretrainingTask
from input_pipeline import packing
from test_packed_training import CONFIG, PER_ROW, PREDICTIONS, ROWS, SEQ_LEN, instances

BF16 = Precision(dtype="bfloat16")
XLA_ATTENTION = jax.nn.dot_product_attention  # the real one, before the fixture replaces it


def _segments(seq_len, q_seqlen, q_offsets=None):
    """(B, T) the segment each token is in under cuDNN's layout, -1 outside every one."""
    positions = jnp.arange(seq_len)
    if q_offsets is None:  # per-row lengths: one segment from token 0
        return jnp.where(positions[None] < q_seqlen[:, None], 0, -1)
    starts, lengths = q_offsets[:, :-1, None], q_seqlen[..., None]  # (B, M, 1)
    inside = (positions >= starts) & (positions < starts + lengths) & (lengths > 0)  # (B, M, T)
    return jnp.where(inside.any(axis=1), jnp.argmax(inside, axis=1), -1)


def _as_cudnn_would(query, key, value, q_seqlen, q_offsets=None):
    segments = _segments(query.shape[1], q_seqlen, q_offsets)
    mask = ((segments[:, None, :, None] == segments[:, None, None, :])
            & (segments[:, None, None, :] >= 0))  # (B, 1, T, T)
    return XLA_ATTENTION(query, key, value, mask=mask, scale=1.0, implementation="xla")



@pytest.fixture
def cudnn_calls(monkeypatch):
    """Every call to either cuDNN entry: (entry, its keyword arguments); a GPU is traced."""
    calls = []

    def public(query, key, value, *args, implementation=None, **options):
        if implementation != "cudnn":
            return XLA_ATTENTION(query, key, value, *args, implementation=implementation,
                                 **options)
        calls.append(("public", options))
        return _as_cudnn_would(query, key, value, options["query_seq_lengths"])

    def private(query, key, value, **options):
        calls.append(("segments", options))
        return _as_cudnn_would(query, key, value, options["q_seqlen"], options.get("q_offsets"))

    monkeypatch.setattr(jax.nn, "dot_product_attention", public)
    monkeypatch.setattr(fused_attention_stablehlo, "dot_product_attention", private)
    monkeypatch.setattr(attention, "traced_platform", lambda: "gpu")
    return calls


def test_unpacked_rows_are_per_row_lengths_and_packed_rows_their_slots():
    ids = jnp.asarray([[1, 1, 1, 0, 0, 0], [1, 1, 2, 2, 2, 3]], jnp.int32)
    unpacked = attention_kernels.cudnn_arguments(ids[:1], 1)
    assert sorted(unpacked) == ["kv_seqlen", "q_seqlen"]
    np.testing.assert_array_equal(unpacked["q_seqlen"], [3])
    packed = attention_kernels.cudnn_arguments(ids, 3)
    np.testing.assert_array_equal(packed["q_offsets"], [[0, -1, -1, -1], [0, 2, 5, -1]])
    np.testing.assert_array_equal(packed["q_seqlen"], [[3, -1, -1], [2, 3, 1]])
    np.testing.assert_array_equal(packed["kv_offsets"], packed["q_offsets"])
    with pytest.raises(UserError, match="max_sequences_per_row"):
        attention_kernels.cudnn_arguments(ids, None)  # never a guess, never T slots
    # A filler row (padding only) gets a one-token segment, so its outputs stay finite.
    filler = jnp.zeros((1, 6), jnp.int32)
    np.testing.assert_array_equal(attention_kernels.cudnn_arguments(filler, 1)["q_seqlen"], [1])
    packed_filler = attention_kernels.cudnn_arguments(filler, 3)
    np.testing.assert_array_equal(packed_filler["q_offsets"], [[0, -1, -1, -1]])
    np.testing.assert_array_equal(packed_filler["q_seqlen"], [[1, -1, -1]])


def _params(config=CONFIG, shapes_only=False):
    task, batch = PretrainingTask(PREDICTIONS), instances()
    init = task.build_model(config, Precision()).init
    arguments = (jax.random.PRNGKey(0), *task.model_inputs(batch))
    if shapes_only:
        return jax.eval_shape(init, *arguments)["params"]
    return jax.jit(init)(*arguments)["params"]


@pytest.fixture(scope="module")
def params():
    return _params()


def _model_calls(task, batch, precision, params, cudnn_calls, train=False, config=CONFIG,
                 run=True):
    """The task's outputs (jitted; shapes only unless `run`) and the cuDNN calls their trace
    made (their arguments' shapes)."""
    model = task.build_model(config, precision)
    cudnn_calls.clear()

    def apply(params):
        return task.apply(model, params, batch, train=train, key=jax.random.PRNGKey(1))

    outputs = jax.jit(apply)(params) if run else jax.eval_shape(apply, params)
    return outputs, list(cudnn_calls)


def test_pretraining_hands_cudnn_lengths_unpacked_and_max_sequences_per_row_packed(
        params, cudnn_calls):
    unpacked = instances()
    packed = packing.pack_features(unpacked, ROWS, SEQ_LEN, PER_ROW)
    unpacked_task = PretrainingTask(PREDICTIONS)
    packed_task = PretrainingTask(PREDICTIONS, PER_ROW)
    rows = len(ROWS)
    _, calls = _model_calls(unpacked_task, unpacked, BF16, params, cudnn_calls, run=False)
    assert [entry for entry, _ in calls] == ["public"] * CONFIG.num_layers
    assert calls[0][1]["query_seq_lengths"].shape == (len(unpacked["input_mask"]),)
    # auto leaves packed rows to XLA's attention (cuDNN segments unmeasured there) ...
    assert _model_calls(packed_task, packed, BF16, params, cudnn_calls, run=False)[1] == []
    # ... and precision.attention=cudnn gives them data.max_sequences_per_row slots.
    forced = dataclasses.replace(BF16, attention="cudnn")
    outputs, calls = _model_calls(packed_task, packed, forced, params, cudnn_calls)
    assert [entry for entry, _ in calls] == ["segments"] * CONFIG.num_layers
    for _, options in calls:
        assert options["q_offsets"].shape == (rows, PER_ROW + 1) != (rows, SEQ_LEN + 1)
        assert options["q_seqlen"].shape == (rows, PER_ROW)
    # What those slots mean is each row's instances: the reference's outputs.
    reference = dataclasses.replace(BF16, attention="reference")
    expected, _ = _model_calls(packed_task, packed, reference, params, cudnn_calls)
    for output, want in zip(outputs, expected):  # MLM (B, P, V) and NSP (B, N, 2) logits
        # bfloat16 logits of a few units: a bfloat16 step there is 2**-7 x 4 = 0.03; 0.05
        # allows the two attention paths to round a step apart.
        np.testing.assert_allclose(np.asarray(output, np.float32),
                                   np.asarray(want, np.float32), atol=0.05)


def test_rows_whose_instance_count_is_unknown_never_reach_cudnn(cudnn_calls):
    batch = instances()
    ids = jnp.asarray(batch["input_mask"])
    inputs = (jnp.asarray(batch["input_ids"]), jnp.asarray(batch["segment_ids"]), ids)
    params = jax.eval_shape(BertModel(CONFIG).init, jax.random.PRNGKey(0), *inputs)
    cudnn_calls.clear()
    # As domain MLM calls it (instance ids, no count): auto takes XLA's attention.
    jax.eval_shape(lambda params: BertModel(CONFIG, BF16).apply(params, *inputs,
                                                                instance_ids=ids), params)
    assert cudnn_calls == []
    forced = BertModel(CONFIG, dataclasses.replace(BF16, attention="cudnn"))
    with pytest.raises(UserError, match="max_sequences_per_row"):
        jax.eval_shape(lambda params: forced.apply(params, *inputs, instance_ids=ids), params)


def test_fused_attention_dropout_is_opt_in_and_seeds_each_layer_apart(cudnn_calls):
    config = dataclasses.replace(CONFIG, num_layers=2, attention_dropout_rate=0.1)
    batch, task = instances(), PretrainingTask(PREDICTIONS)
    params = _params(config, shapes_only=True)
    options = dict(config=config, run=False)
    _, calls = _model_calls(task, batch, BF16, params, cudnn_calls, train=True, **options)
    assert calls == []  # dropout 0.1 without the opt-in: the reference's dropout
    opted = dataclasses.replace(BF16, fused_attention_dropout=True)
    _, calls = _model_calls(task, batch, opted, params, cudnn_calls, train=True, **options)
    assert [entry for entry, _ in calls] == ["segments"] * 2  # only the private entry drops
    assert [options["dropout_rate"] for _, options in calls] == [0.1, 0.1]
    assert "q_offsets" not in calls[0][1]  # unpacked rows: still per-row lengths
    seeds = [options["seed"] for _, options in calls]
    assert seeds[0] != seeds[1] and all(isinstance(seed, int) for seed in seeds)
    _, evaluation = _model_calls(task, batch, opted, params, cudnn_calls, **options)
    assert [options.get("dropout_rate") for _, options in evaluation] == [None, None]
