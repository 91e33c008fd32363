"""How a training run keeps its layers' weights on its devices: per layer, or stacked.

A run whose stack is scanned keeps the scanned layers' parameters and optimizer moments
stacked (bert_jax/models/layers/layer_scan.py, "stacked"): its step then reads and updates
each weight of all those layers as one array. Otherwise, or where something in the step
reads layers one by one, it keeps them per layer, as before.

Outside the step every tree is per layer: checkpoints are written and read per layer (so a
run saved unrolled continues scanned and back, and every converter, export and checkpoint
reader sees what it always saw), weights are placed per layer, and a fine-tuned model is
saved per layer. `LayerStorage` converts at those boundaries, with jitted functions that
keep each array's sharding, so no host ever holds a whole state.
"""

import dataclasses
from typing import Any, Callable

import jax

from bert_jax.models.config import Precision, ScanPlan
from bert_jax.models.layers.layer_scan import per_layer, store_stacked


def stacked_plan(model, model_config, precision: Precision, trainable) -> ScanPlan | None:
    """The scan plan whose layers a run keeps stacked, or None to keep them per layer: when
    the stack is not scanned, when a layer runs unrolled in the step anyway (cuDNN's
    attention dropout; a model that reads each layer's output, `runs_layers_unrolled`), and
    when a task freezes parameters by name (its paths name layers)."""
    plan = model_config.scan_plan
    if (not precision.scan_layers or precision.fused_attention_dropout or not plan.blocks
            or trainable is not None or getattr(model, "runs_layers_unrolled", False)):
        return None
    return plan


@dataclasses.dataclass(frozen=True)
class LayerStorage:
    """The state's device layout and the per-layer one, with conversions between them.

    `abstract_state`: the per-layer state (ShapeDtypeStructs with shardings), what
    checkpoints hold. `stored(state)` and `per_layer(state)` convert a whole train state;
    without a plan both are the identity and nothing is copied."""
    plan: ScanPlan | None
    abstract_state: Any
    stored: Callable[[Any], Any]
    per_layer: Callable[[Any], Any]

    @classmethod
    def build(cls, plan: ScanPlan | None, abstract_state: Any, per_layer_shardings: Any,
              stored_shardings: Any) -> "LayerStorage":
        if plan is None:
            return cls(None, abstract_state, lambda state: state, lambda state: state)
        return cls(plan, abstract_state,
                   jax.jit(lambda state: store_stacked(state, plan),
                           in_shardings=(per_layer_shardings,), out_shardings=stored_shardings),
                   jax.jit(per_layer, in_shardings=(stored_shardings,),
                           out_shardings=per_layer_shardings))
