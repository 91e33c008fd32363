"""A stand-in slice's roofline terms carried to the pod it stands for.

A 32- or 256-chip compile of a large model takes half an hour or more on a laptop, so a pod is
compiled as a stand-in of a few chips holding the pod's sequences per chip
(bench/mesh_tables.py, `bert-jax aot --recipe modernbert`). At the same sequences per chip
the compute term holds from the stand-in to the pod; a collective over n chips sends
(n - 1) / n of its operand (2 (n - 1) / n for an all-reduce), so data parallel's and FSDP's
interconnect terms grow by (pod - 1) / pod over (stand-in - 1) / stand-in, and mixed's
all-reduces (FSDP within a host, data parallel across: only its data axis widens) by
(pod / fsdp - 1) / (pod / fsdp) over (data - 1) / data. Data parallel's and mixed's memory
terms hold (each chip updates the same share of the parameters); in FSDP's the update's bytes
(finite check, gradient norm, clipping, the optimizer) fall from 1/stand-in of the
parameters to 1/pod, the rest (activations, gathered weights, whole gradients before their
reduce-scatter) holds.
"""

import dataclasses

from bert_jax.compiler.aot import CompileReport
from bert_jax.compiler.aot_report import STATE_PURPOSES


def layout_of(mesh_shape: dict) -> str:
    """"data", "fsdp" or "mixed" (both axes wider than one)."""
    data, fsdp = mesh_shape.get("data", 1), mesh_shape.get("fsdp", 1)
    if data > 1 and fsdp > 1:
        return "mixed"
    return "fsdp" if fsdp > 1 else "data"


def _spread(group: int) -> float:
    """Bytes a device sends per operand byte in a collective over `group` devices, relative to
    (n - 1) / n: all-gather, reduce-scatter and permute rings; an all-reduce is twice that."""
    return (group - 1) / group if group > 1 else 0.0


def pod_terms(report: CompileReport, pod_chips: int) -> dict:
    """The stand-in's roofline terms (seconds per step) on a pod of `pod_chips` chips at the
    same sequences per chip (module docstring)."""
    layout, stand_in = layout_of(report.mesh_shape), report.num_chips
    sent = report.collective_bytes
    if layout == "fsdp":
        update = sum(report.bytes_by_purpose.get(purpose, {}).get("hbm", 0)
                     for purpose in STATE_PURPOSES)
        report = dataclasses.replace(report, hbm_traffic_per_device=(
            report.hbm_traffic_per_device - update * (1 - stand_in / pod_chips)))
    terms = report.roofline_terms()
    if layout == "mixed":
        data_group = report.mesh_shape["data"]
        scaled = sum(sent.values()) + sent.get("all-reduce", 0.0) * (
            _spread(pod_chips // (stand_in // data_group)) / _spread(data_group) - 1)
    else:
        scaled = sum(sent.values()) * _spread(pod_chips) / _spread(stand_in)
    if sum(sent.values()):
        terms["interconnect"] *= scaled / sum(sent.values())
    return terms
