"""`bert-jax aot`: the real train step compiled for a TPU topology (libtpu compile-only devices).

The compile runs in a subprocess (aot_helpers.py): libtpu initialisation in the test process would meet the
eight simulated CPU devices of conftest and, on a shared host, libtpu's process lock.
"""

import dataclasses
import json

import pytest
from aot_helpers import compile_report

from bert_jax.compiler import aot, aot_hlo, aot_report
from bert_jax.errors import UserError

TINY = dict(vocab_size=1024, hidden_dim=128, num_layers=2, mlp_dim=512, max_positions=512,
            num_segments=2)
# Length 128 (whole splash blocks) and no attention dropout: the step takes splash attention.
BATCH, SEQ_LEN, PREDICTIONS, DEVICES = 8, 128, 10, 4  # v5e:2x2 = 4 chips, 1 device each
V5E_PEAK, V5E_HBM, V5E_ICI = 197e12, 819e9, 200e9

TINY_CONFIG = f"""
from bert_jax.run_config import base_config

def get_config():
    config = base_config("tiny")
    config.model.vocab_size = {TINY['vocab_size']}
    config.batch_size = {BATCH}
    config.data.seq_len = {SEQ_LEN}
    config.data.max_predictions = {PREDICTIONS}
    config.num_train_steps = 1000
    config.model.attention_dropout_rate = 0.0
    return config
"""


def bert_parameter_count(vocab_size, hidden_dim, num_layers, mlp_dim, max_positions,
                         num_segments):
    """Parameters of BertForPreTraining, counted by hand from the paper's architecture."""
    h = hidden_dim
    embeddings = (vocab_size + max_positions + num_segments) * h + 2 * h  # + LayerNorm
    layer = 4 * (h * h + h) + (h * mlp_dim + mlp_dim) + (mlp_dim * h + h) + 2 * 2 * h
    pooler = h * h + h
    mlm_head = (h * h + h) + 2 * h + vocab_size  # transform, LayerNorm, output bias
    nsp_head = 2 * h + 2
    return embeddings + num_layers * layer + pooler + mlm_head + nsp_head


@pytest.fixture(scope="module")
def tiny_v5e(tmp_path_factory):
    return compile_report(tmp_path_factory.mktemp("aot"), TINY_CONFIG, "--topology", "v5e:2x2", "--mfu", "0.5")


def test_memory_per_device_is_the_training_state(tiny_v5e):
    report, _ = tiny_v5e
    # Data parallel over 4 devices: every device holds the float32 parameters and Adam's
    # two moments (12 bytes per parameter), plus a quarter of the batch.
    state_bytes = 12 * bert_parameter_count(**TINY)
    batch_bytes = (3 * SEQ_LEN * 4 + 3 * PREDICTIONS * 4 + 4) * BATCH // DEVICES
    assert state_bytes + batch_bytes <= report["argument_bytes"] <= 1.01 * state_bytes + 2**16
    # The state is donated: the new state is written over the old one, not beside it.
    assert report["alias_bytes"] >= 0.99 * state_bytes
    assert report["temp_bytes"] > 0 and report["fits"]
    assert report["peak_bytes"] == (report["argument_bytes"] + report["output_bytes"]
                                    - report["alias_bytes"] + report["temp_bytes"]
                                    + report["code_bytes"])
    assert report["hbm_bytes_per_device"] == 16 * 2**30


def test_flops_collectives_and_projection(tiny_v5e):
    report, stdout = tiny_v5e
    h, layers, mlp, vocab = TINY["hidden_dim"], TINY["num_layers"], TINY["mlp_dim"], 1024
    forward = BATCH * (SEQ_LEN * layers * (8 * h * h + 4 * h * mlp + 4 * SEQ_LEN * h)
                       + 2 * h * h + PREDICTIONS * (2 * h * h + 2 * h * vocab) + 4 * h)
    assert report["model_flops_per_step"] == 3 * forward
    # XLA counts every op of the per-device program; the model count is matmuls of the whole
    # step, so the two agree within elementwise work, not within a factor of 4 (devices).
    # Splash attention's FLOPs are invisible to XLA's cost analysis and added from flops.py.
    attention_core = 3 * BATCH * layers * 4 * SEQ_LEN * SEQ_LEN * h
    assert report["attention"] == "splash (Pallas)"
    assert report["kernel_flops_per_device"] * DEVICES == attention_core
    assert report["compiled_flops_per_device"] * DEVICES < report["model_flops_per_step"]
    compiled = report["compiled_flops_per_device"] + report["kernel_flops_per_device"]
    assert 1.0 <= compiled * DEVICES / report["model_flops_per_step"] <= 2.0
    assert report["collectives"]["all-reduce"] >= 1  # the gradient sum over data parallel
    assert report["unexplained_collectives"] == []  # data parallel: all-reduces only
    assert report["num_chips"] == DEVICES and report["mesh_shape"]["data"] == DEVICES
    # float64 arithmetic on both sides (tolerances.py), here and below.
    assert report["step_seconds"] == pytest.approx(3 * forward / (DEVICES * V5E_PEAK * 0.5))
    assert "HBM per device: fits" in stdout and "1,000 steps" in stdout
    assert "attention: splash (Pallas)" in stdout


def test_roofline_bound_from_bytes_flops_and_collectives(tiny_v5e):
    report, stdout = tiny_v5e
    terms = report["roofline_terms"]
    compiled = report["compiled_flops_per_device"] + report["kernel_flops_per_device"]
    # float64 quotients on both sides (tolerances.py); the all-reduce's bytes to 1%: the
    # count leaves out a few small buffers, a missing or doubled gradient is far off.
    assert terms["compute"] == pytest.approx(compiled / V5E_PEAK)
    assert report["bytes_accessed_per_device"] > report["argument_bytes"]  # reads the state
    # The memory term: the corrected HBM count (bert_jax.compiler.aot_bytes), at least the state's
    # compulsory traffic, at most XLA's count.
    memory_bytes = max(report["hbm_traffic_per_device"],
                       report["argument_bytes"] + report["output_bytes"])
    assert terms["memory"] == pytest.approx(memory_bytes / V5E_HBM)
    assert memory_bytes <= report["bytes_accessed_per_device"]
    # Data parallel: the gradient all-reduce sends 2 x 3/4 of the fp32 gradients, every
    # collective accounted for: the parameters', less the position rows no token reaches
    # (positions >= 128, their gradient statically zero), plus the tied word table once more
    # (its lookup and decoder gradients are all-reduced apart, then added).
    h = TINY["hidden_dim"]
    gradient_elements = (bert_parameter_count(**TINY) - (TINY["max_positions"] - SEQ_LEN) * h
                         + TINY["vocab_size"] * h)
    assert report["collective_bytes"]["all-reduce"] == pytest.approx(
        2 * 3 / 4 * 4 * gradient_elements, rel=0.01)
    assert sum(report["collectives"].values()) == report["collectives"]["all-reduce"]
    assert terms["interconnect"] == pytest.approx(
        sum(report["collective_bytes"].values()) / V5E_ICI)
    assert report["roofline_seconds"] == max(terms.values())
    assert "roofline bound:" in stdout and "bytes accessed per device" in stdout


def test_collectives_count_async_pairs_once_and_the_bytes_each_sends():
    hlo = """
      %all-reduce-start.1 = f32[8]{0} all-reduce-start(f32[8]{0} %p), replica_groups={{0,1}}
      %all-reduce-done.1 = f32[8]{0} all-reduce-done(f32[8]{0} %all-reduce-start.1)
      %ag = f32[16]{0} all-gather(%p), replica_groups=[2,4]<=[8], dimensions={0}
      %rs = bf16[4]{0} reduce-scatter(%p), replica_groups=mesh['axis_0'=2,'axis_1'=4] {'axis_0'}
      %cp = (f32[8]{0}, f32[8]{0}, u32[], u32[]) collective-permute-start(%p)
      %cpd = f32[8]{0} collective-permute-done((f32[8]{0}, u32[]) %cp)
      %ar = f32[8]{0} all-reduce(f32[8]{0} %all-gather.3), to_apply=%sum
      %ag2 = (bf16[2,8]{1,0}, bf16[8,8]{1,0}) all-gather-start(%q), replica_groups={{0,1,2,3}}
    """
    counts, sent = aot_hlo.collectives(hlo, num_devices=8)
    assert counts == {"all-reduce": 2, "all-gather": 2, "reduce-scatter": 1, "all-to-all": 0,
                      "collective-permute": 1}
    assert sent["all-reduce"] == 2 * 1 / 2 * 32 + 2 * 7 / 8 * 32  # groups of 2, then all 8
    assert sent["all-gather"] == 3 / 4 * 64 + 3 / 4 * 128  # the gathered wholes, groups of 4
    assert sent["reduce-scatter"] == (2 - 1) * 8  # the 8-byte shard, groups of 2 (axis_0)
    assert sent["collective-permute"] == 32


def test_mesh_comparison_names_the_fastest_layout_that_fits():
    gib = 2**30
    base = aot.CompileReport(
        topology="v5e:16x16", device_kind="TPU v5 lite", num_devices=256, devices_per_chip=1,
        mesh_shape={"data": 256, "fsdp": 1, "tensor": 1}, batch_size=256, seq_len=128,
        max_predictions=20, argument_bytes=4 * gib, output_bytes=4 * gib, alias_bytes=4 * gib,
        temp_bytes=gib, code_bytes=0, compiled_flops_per_device=V5E_PEAK * 1e-3,
        model_flops_per_step=1.0, collectives={}, compile_seconds=1.0,
        bytes_accessed_per_device=V5E_HBM * 2e-3, collective_bytes={"all-reduce": V5E_ICI * 5e-3})
    assert base.roofline_terms() == pytest.approx(  # float64 quotients (tolerances.py)
        {"compute": 1e-3, "memory": 2e-3, "interconnect": 5e-3})
    fsdp = dataclasses.replace(base, mesh_shape={"data": 1, "fsdp": 256, "tensor": 1},
                               collective_bytes={"all-gather": V5E_ICI * 3e-3})
    too_big = dataclasses.replace(base, collective_bytes={}, temp_bytes=20 * gib)
    reports = {"data": base, "fsdp": fsdp, "mixed": too_big}
    assert aot_report.fastest(reports) == "fsdp"  # 3 ms; "mixed" would be 2 ms but does not fit
    table = aot_report.format_mesh_table(reports)
    assert "fastest by the roofline bound: fsdp" in table and "NO" in table
    assert set(aot_report.mesh_layouts(256, 4)) == {"data", "fsdp", "mixed"}
    assert "--config.mesh.fsdp=4" in aot_report.mesh_layouts(256, 4)["mixed"]
    assert set(aot_report.mesh_layouts(4, 4)) == {"data", "fsdp"}  # one host: no mixed


def test_the_compute_term_never_counts_fewer_flops_than_the_models_matmuls():
    """XLA counts a loop's body once: under FSDP on v4 libtpu's windowed weight-gradient
    matmuls left its FLOPs 13-15% short of the model's. The compute term takes the model's
    share per device where XLA's count is lower, and says so in the FLOPs line."""
    report = aot.CompileReport(
        topology="v5e:2x2", device_kind="TPU v5 lite", num_devices=4, devices_per_chip=1,
        mesh_shape={"fsdp": 4}, batch_size=8, seq_len=128, max_predictions=20,
        argument_bytes=0, output_bytes=0, alias_bytes=0, temp_bytes=0, code_bytes=0,
        compiled_flops_per_device=0.85 * V5E_PEAK * 1e-3,
        model_flops_per_step=4 * V5E_PEAK * 1e-3, collectives={}, compile_seconds=1.0)
    assert report.roofline_terms()["compute"] == pytest.approx(1e-3)  # float64 quotients
    assert "the compute term uses the model's" in aot_report.format_report(report, 0.5, 10)
    more = dataclasses.replace(report, compiled_flops_per_device=1.2 * V5E_PEAK * 1e-3)
    assert more.roofline_terms()["compute"] == pytest.approx(1.2e-3)  # remat: XLA's, higher
    assert "the compute term uses" not in aot_report.format_report(more, 0.5, 10)


def test_a_json_report_reads_back_as_the_report_it_was_written_from():
    report = aot.CompileReport(
        topology="v5e:2x2", device_kind="TPU v5 lite", num_devices=4, devices_per_chip=1,
        mesh_shape={"data": 4}, batch_size=8, seq_len=128, max_predictions=20,
        argument_bytes=1, output_bytes=2, alias_bytes=1, temp_bytes=3, code_bytes=4,
        compiled_flops_per_device=5.0, model_flops_per_step=6.0, collectives={"all-reduce": 1},
        compile_seconds=1.0, unexplained_collectives=("all-gather x1 at bert",),
        bytes_by_purpose={"MLP": {"forward": 1, "backward": 2, "step": 0, "ops": 3, "hbm": 1}})
    written = json.loads(json.dumps(aot_report.report_to_json(report, 0.5)))
    assert aot_report.report_from_json(written) == report


def test_fit_line_reports_the_shortfall():
    gib = 2**30
    report = aot.CompileReport(
        topology="v5e:2x2", device_kind="TPU v5 lite", num_devices=4, devices_per_chip=1,
        mesh_shape={"data": 4}, batch_size=8, seq_len=128, max_predictions=20,
        argument_bytes=10 * gib, output_bytes=10 * gib, alias_bytes=10 * gib,
        temp_bytes=10 * gib, code_bytes=0, compiled_flops_per_device=1.0,
        model_flops_per_step=4 * V5E_PEAK, collectives={}, compile_seconds=1.0)
    assert aot_report.fit_line(report) == "does NOT fit: 4.00 GiB (25%) over"
    assert report.step_seconds(0.5) == pytest.approx(2.0)  # 4 chips x peak x 50%: float64
    v3 = dataclasses.replace(report, device_kind="TPU v3", num_devices=64, devices_per_chip=2,
                             temp_bytes=0)
    assert v3.hbm_bytes_per_device == 16 * gib and v3.num_chips == 32
    assert aot_report.fit_line(v3) == "fits, 6.00 GiB (38%) to spare"


def test_compiler_out_of_memory_is_a_report_not_a_crash():
    import jax

    message = ("RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required for "
               "HLO temporaries (26.81G) exceeds available HBM (15.48G).")

    class Lowered:
        def compile(self):
            raise jax.errors.JaxRuntimeError(message + "\nmore details")

    compiled, out_of_memory = aot._compile(Lowered())
    assert compiled is None and out_of_memory == message
    report = aot.CompileReport(
        topology="v3:4x8", device_kind="TPU v3", num_devices=64, devices_per_chip=2,
        mesh_shape={"fsdp": 64}, batch_size=256, seq_len=512, max_predictions=80,
        argument_bytes=0, output_bytes=0, alias_bytes=0, temp_bytes=0, code_bytes=0,
        compiled_flops_per_device=0.0, model_flops_per_step=1e15, collectives={},
        compile_seconds=1.0, out_of_memory=out_of_memory)
    assert not report.fits
    text = aot_report.format_report(report, 0.5, 100)
    assert "does NOT fit: the TPU compiler refused it: RESOURCE_EXHAUSTED" in text
    assert "(26.81G) exceeds available HBM (15.48G)" in text and "(if it fitted)" in text


@pytest.mark.parametrize("topology", ["v9:2x2", "v5e-256", "v4:4x4x2x2", "tpu"])
def test_bad_topology_lists_examples(topology):
    with pytest.raises(UserError, match="v5e:16x16") as error:
        aot.topology_devices(topology)
    assert repr(topology) in str(error.value)
