"""What a compiled train step says about itself: memory per device, FLOPs, bytes by purpose,
collectives and attention kernels, read from XLA's analyses and the compiled HLO text, for
`bert_jax.compiler.aot.CompileReport`.
"""

import math
from typing import Any

from bert_jax.compiler import aot_collectives, aot_hlo, hlo_module


def _first(analysis: Any) -> dict:
    """cost_analysis() is a dict, or a list of one dict per program in some jax versions."""
    return analysis[0] if isinstance(analysis, (list, tuple)) else analysis


def measure(compiled, model_config, run_config, mesh_shape: dict,
            kernels: list | None = None) -> dict:
    """The compiled program's memory, FLOPs, bytes, collectives and attention kernel.

    FLOPs: XLA's cost analysis counts every op of the per-device program except what runs
    inside a Pallas kernel (it reports a splash kernel's work as about nothing); those are
    added from the kernels' compiled grids (bert_jax.compiler.aot_splash: whole blocks, 3x
    forward). A GPU program compiled without its GPU has no cost analysis: its FLOPs and
    bytes are its kernels' (`kernels`, the census). Gradient accumulation's loop counts
    grad_accum_steps times in what is read from the program here (XLA's counts: once).
    """
    hlo_text = compiled.as_text() or ""
    module = hlo_module.parse(hlo_text)
    repeats = hlo_module.loop_repeats(module, run_config.grad_accum_steps)
    measured = _program_accounts(compiled, hlo_text, mesh_shape, repeats)
    if kernels is not None:
        return {**measured, **_gpu_accounts(kernels)}
    cost = _first(compiled.cost_analysis())
    if measured["attention"] == aot_hlo.SPLASH:
        measured.update(_splash_accounts(module, repeats, model_config, run_config, mesh_shape))
    return dict(
        **measured, **_byte_accounts(hlo_text, model_config, run_config, mesh_shape),
        compiled_flops_per_device=float(cost.get("flops", 0.0)),
        bytes_accessed_per_device=float(cost.get("bytes accessed", 0.0)))


def _splash_accounts(module, repeats: dict, model_config, run_config, mesh_shape) -> dict:
    """Each layer's splash mask, the kernels' FLOPs and streamed bytes, from their grids; where
    no call could be read, the model's attention core (3x forward) split over the devices."""
    from bert_jax.compiler import aot_splash, flops

    calls = aot_splash.splash_calls(module, repeats)
    if not calls:
        return dict(kernel_flops_per_device=3 * flops.attention_core_flops(
            model_config, run_config.batch_size, run_config.data.seq_len) / math.prod(
            mesh_shape.values()))
    return dict(kernel_flops_per_device=aot_splash.kernel_flops(calls),
                kernel_bytes_per_device=aot_splash.streamed_bytes(calls),
                splash_masks=aot_splash.layer_masks(calls))


def _program_accounts(compiled, hlo_text: str, mesh_shape: dict, repeats: dict) -> dict:
    """Memory per device, the collectives and the attention kernel, on any target."""
    memory = compiled.memory_analysis()
    found = aot_hlo.collective_ops(hlo_text, math.prod(mesh_shape.values()), repeats)
    counts, wire_bytes = aot_hlo.totals(found)
    return dict(
        argument_bytes=memory.argument_size_in_bytes,
        output_bytes=memory.output_size_in_bytes, alias_bytes=memory.alias_size_in_bytes,
        temp_bytes=memory.temp_size_in_bytes, code_bytes=memory.generated_code_size_in_bytes,
        collectives=counts, collective_bytes=wire_bytes,
        attention=aot_hlo.attention_kernel(hlo_text)[0],
        unexplained_collectives=tuple(aot_collectives.unexplained(found, mesh_shape)))


def _gpu_accounts(kernels: list) -> dict:
    """A GPU step's FLOPs and bytes from its kernel census: the matmul and attention calls'
    FLOPs, and every kernel's operands and results as the memory traffic."""
    from bert_jax.compiler import gpu_census

    kinds = gpu_census.by_kind(kernels)
    traffic = float(sum(kernel.bytes for kernel in kernels))
    return dict(kernels_by_kind=kinds, kernels_by_purpose=gpu_census.by_purpose(kernels),
                kernels_by_layer=gpu_census.per_layer(kernels),
                compiled_flops_per_device=sum(row["flops"] for row in kinds.values()),
                bytes_accessed_per_device=traffic, hbm_traffic_per_device=traffic)


def _byte_accounts(hlo_text: str, model_config, run_config, mesh_shape: dict) -> dict:
    """The bytes table by purpose, the corrected HBM count and the first-principles count."""
    from bert_jax.compiler import aot_bytes

    ops = aot_bytes.op_bytes(hlo_text, run_config.grad_accum_steps)
    state = aot_bytes.state_bytes(hlo_text)
    data = run_config.data
    batch_share = mesh_shape.get("data", 1) * mesh_shape.get("fsdp", 1)
    compute_bytes = 2 if run_config.precision.dtype == "bfloat16" else 4
    counted = aot_bytes.first_principles(
        state["params"], state["opt_state"] > 0, mesh_shape.get("fsdp", 1), model_config,
        run_config.batch_size * data.seq_len // batch_share, data.seq_len, compute_bytes,
        bool(run_config.precision.remat))
    return dict(bytes_by_purpose=aot_bytes.by_purpose(ops),
                hbm_traffic_per_device=float(sum(op.hbm_read_bytes + op.hbm_written_bytes
                                                 for op in ops)),
                first_principles_bytes=counted, parameter_bytes_per_device=state["params"])
