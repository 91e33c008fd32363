"""The GPU bench's decisions, on a CPU: `gpu_step.py --check`'s verdict and the dropout
check's mask reading (bench/gpu/gpu_step.py, bench/gpu/cudnn_dropout_check.py)."""

import pytest

from bench.gpu import cudnn_dropout_check, gpu_step


def _result(label, jax_seconds, torch_seconds, compiled_seconds=None):
    seconds = {"bert-jax": jax_seconds, "torch": torch_seconds}
    if compiled_seconds:
        seconds["torch.compile"] = compiled_seconds
    return {"label": label, "seconds_per_step": seconds}


def test_check_fails_on_any_configuration_slower_than_torch_eager():
    faster = _result("base bf16 32x512", [0.0336, 0.0338, 0.0340], [0.0471, 0.0470, 0.0472],
                     compiled_seconds=[0.030, 0.030, 0.031])  # torch.compile is not the bar
    assert gpu_step.slower_than_eager([faster]) == []
    # The landed step of issue 32 (H100, call1_base.log): 153.02 ms against 52.31 ms.
    slower = _result("base bf16 128x128", [0.15302, 0.1526, 0.1534], [0.05231, 0.0507, 0.0592])
    failures = gpu_step.slower_than_eager([faster, slower])
    assert failures == ["base bf16 128x128: bert-jax 153.02 ms/step, torch eager 52.31 "
                        "(0.34x)"]
    # Medians decide, not one lucky round.
    noisy = _result("large bf16 32x512", [0.090, 0.130, 0.131], [0.119, 0.120, 0.118])
    assert len(gpu_step.slower_than_eager([noisy])) == 1


def test_dropout_check_reads_masks_that_change_per_call_row_head_and_layer():
    # --smoke's kernel: the reference dropout with a new key per call, as cuDNN's should be.
    results = cudnn_dropout_check.kernel_checks(smoke=True, rate=0.1)
    assert all(passed for passed, _ in results.values()), results


def test_dropout_check_fails_a_kernel_that_repeats_its_mask(monkeypatch):
    # A kernel whose mask ignores the call (a seed fixed at compile time, no offset): the
    # `steps` check must catch it, and only the checks it breaks fail.
    reference = cudnn_dropout_check.kernel(True, 0.1)
    monkeypatch.setattr(cudnn_dropout_check, "kernel", lambda smoke, rate: (
        lambda query, key, value, seed, call: reference(query, key, value, seed, 0)))
    results = cudnn_dropout_check.kernel_checks(smoke=True, rate=0.1)
    assert [name for name, (passed, _) in results.items() if not passed] == ["steps"]


@pytest.mark.parametrize("argument", ["bf16:2x", "fp16:2x128"])
def test_configs_are_refused_by_name(argument):
    with pytest.raises(SystemExit, match="PRECISION:BATCHxSEQ"):
        gpu_step.parse_configs(argument)


def test_kernel_table_groups_a_step_by_kind_per_step():
    from bench.gpu import gpu_kernels

    # Two steps of a made-up trace, named like the H100's kernels (call6_prof2 log).
    events = [("cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16", 2_400_000),
              ("nvjet_sm90_tst_128x128_64x6_2x1_v_bz_NNT", 1_300_000),
              ("input_add_reduce_fusion_76", 2_000_000),
              ("loop_convert_multiply_fusion_11", 2_000_000),
              ("gemm_fusion_dot_104", 1_200_000), ("MemcpyD2H", 100_000)] * 2
    lines = gpu_kernels.kernel_table(events, steps=2, top=2)
    assert lines[0] == "9.00 ms kernel time per step, 6 kernels per step"
    assert lines[1].split()[:3] == ["2.400", "ms", "x"] and len(lines) == 4
    assert lines[-1] == ("by kind (ms per step): matmul (cuBLAS nvjet/gemm) 2.50, attention "
                         "(cuDNN) 2.40, reduce fusions 2.00, loop/elementwise fusions 2.00, "
                         "other 0.10")


def test_the_gpu_session_lists_steps_that_exist():
    import pathlib
    import subprocess

    root = pathlib.Path(__file__).resolve().parent.parent
    listing = subprocess.run(["bash", str(root / "bench" / "gpu" / "gpu_session.sh"), "--list"],
                             capture_output=True, text=True, check=True).stdout.splitlines()
    for line in listing[:-1]:
        script = next(word for word in line.split() if word.endswith(".py"))
        assert (root / script).exists(), line
    names = [line.split()[0] for line in listing[:-1]]
    assert names[:3] == ["dropout_check", "cudnn_tests", "base"]  # the most needed first
    assert listing[-1].endswith("budget 540 s")


def test_the_band_bench_holds_each_form_to_the_full_one(monkeypatch):
    """gpu_band_attention.py's check, on the CPU (Pallas interpreted, 2 x 256): XLA's bands
    and the band kernel agree with the full form within its 1e-4 (measured 4e-7); a kernel
    that dropped a key block of its band would not."""
    from bench.gpu import gpu_band_attention
    from bert_jax.models.layers import band_kernel

    found = gpu_band_attention.agreement(2, 256, interpret=True)
    assert set(found) == {"bands", "kernel"}
    assert max(found.values()) <= gpu_band_attention.AGREEMENT
    # A window of half the reach: the kernel's band misses keys the full form sees.
    narrow = band_kernel.band_attention
    monkeypatch.setattr(band_kernel, "band_attention", lambda q, k, v, ids, window, block, i:
                        narrow(q, k, v, ids, window // 2, block // 2, i))
    assert gpu_band_attention.agreement(2, 256, interpret=True)["kernel"] > 1e-2
