"""A TensorFlow SavedModel for serving (TF Serving, `tf.saved_model.load`), made from the JAX model.

The SavedModel runs the bert-jax function itself: `jax2tf` lowers it to StableHLO (native
serialization) inside one `XlaCallModule` op, so TensorFlow computes exactly what JAX
computes rather than a re-implementation of BERT. The batch and sequence dimensions are
symbolic, so one SavedModel serves any batch size and any length up to max_positions (a
longer input fails the module's shape check instead of reading past the position table).
The weights are TensorFlow variables passed into that op, not constants inside it: the
module stays small and a BERT-Large fits under protobuf's 2 GB limit.

Signatures (int32 inputs of shape [batch, seq]: `input_ids`, `input_mask`, `segment_ids`):
  - `serving_default` -> `sequence_output` [batch, seq, hidden], `pooled_output` [batch, hidden]
    (no `pooled_output` when the model has no pooler) and, for a sequence classifier
    (`bert_jax/models/bert_heads.py`), `logits` [batch, num_labels];
  - `pretraining` (models with the masked-LM head) also takes `masked_lm_positions` [batch,
    predictions] -> `mlm_logits` [batch, predictions, vocab] and, with the next-sentence
    head, `nsp_logits` [batch, 2], as the original run_pretraining.py computes them.
The vocabulary travels as the asset `vocab.txt` (a tokenizer.json model's: `tokenizer.json`),
with a `do_lower_case` variable.

TensorFlow is imported only inside the functions (the input pipeline owns TensorFlow; this
writer is the interop exception, like the checkpoint reader).
"""

import os
import tempfile

import numpy as np

from bert_jax.models.config import BertConfig, Precision
from bert_jax.interop import tensor_map

# What jax2tf can lower for; by default every platform TF Serving runs on, so the
# SavedModel is not tied to the host that wrote it.
PLATFORMS = ("cpu", "cuda", "rocm", "tpu")
DEFAULT_PLATFORMS = ("cpu", "cuda", "tpu")
INPUT_NAMES = ("input_ids", "input_mask", "segment_ids")
HEAD_PARTS = ("mlm_head", "nsp_head", "classifier")
# The exported program must hold for every length up to max_positions on every platform, so
# it takes attention's plain form: the CPU's chunking (layers/attention.py) is a tuning of
# the host that runs a forward pass, decided from a concrete length the export does not have.
# The same for the fused kernels (layers/attention_kernels.py): the reference path only.
PORTABLE = Precision(attention_chunk_rows=0, attention="reference")


def _encoder_function(config: BertConfig, parts: set[str]):
    """(params, input_ids, input_mask, segment_ids) -> the serving_default outputs.

    With a sequence classifier the head's own module runs (heads.py), and the encoder's
    outputs are read from inside it, so the encoder is computed once.
    """
    from bert_jax.models.bert_heads import BertForSequenceClassification
    from bert_jax.models.bert import BertModel

    def encoder(params, input_ids, input_mask, segment_ids):
        arguments = (input_ids, segment_ids, input_mask)
        if "classifier" in parts:
            num_labels = params["classifier"]["bias"].shape[0]
            logits, state = BertForSequenceClassification(config, num_labels, PORTABLE).apply(
                {"params": params}, *arguments,
                capture_intermediates=lambda module, _: module.name == "bert")  # (B, labels)
            sequence_output, pooled_output = state["intermediates"]["bert"]["__call__"][0]
        else:
            logits = None
            sequence_output, pooled_output = BertModel(
                config, PORTABLE, with_pooler="pooler" in parts).apply(
                    {"params": params["bert"]}, *arguments)  # (B, T, H), (B, H) or None
        outputs = dict(sequence_output=sequence_output, pooled_output=pooled_output,
                       logits=logits)
        return {name: value for name, value in outputs.items() if value is not None}

    return encoder


def _pretraining_function(config: BertConfig, with_nsp: bool):
    """(params, input_ids, input_mask, segment_ids, masked_lm_positions) -> head logits."""
    from bert_jax.models.bert import BertForPreTraining

    def pretraining(params, input_ids, input_mask, segment_ids, masked_lm_positions):
        mlm_logits, nsp_logits = BertForPreTraining(config, PORTABLE).apply(
            {"params": params}, input_ids, segment_ids, input_mask,
            masked_lm_positions)  # (B, P, V), (B, 2)
        outputs = dict(mlm_logits=mlm_logits)
        if with_nsp:
            outputs["nsp_logits"] = nsp_logits
        return outputs

    return pretraining


def pretraining_params(config: BertConfig, params: dict) -> dict:
    """`params` with zeros for an absent pooler or NSP head, so BertForPreTraining can be
    applied: a BertForMaskedLM file has neither, and its MLM logits do not depend on them."""
    from bert_jax.inference import encoder_params

    completed = {**params, "bert": encoder_params(config, params)}
    if "nsp_head" not in params:
        completed["nsp_head"] = dict(kernel=np.zeros((config.hidden_dim, 2), np.float32),
                                     bias=np.zeros((2,), np.float32))
    return completed


def _variables(tree: dict):
    """The params tree as non-trainable float32 tf.Variables named by their path."""
    import jax
    import tensorflow as tf

    def convert(path, value):
        name = "/".join(key.key for key in path)
        return tf.Variable(np.asarray(value, np.float32), trainable=False, name=name)

    return jax.tree_util.tree_map_with_path(convert, tree)


def _signature(function, variables, config: BertConfig, platforms, extra_inputs=()):
    """A tf.function over `function` with the named int32 [batch, seq] inputs."""
    import tensorflow as tf
    from jax.experimental import jax2tf

    shapes = [None, "(batch, seq)", "(batch, seq)", "(batch, seq)",
              *["(batch, predictions)"] * len(extra_inputs)]
    converted = jax2tf.convert(
        function, polymorphic_shapes=shapes, with_gradient=False,
        polymorphic_constraints=(f"seq <= {config.max_positions}",),
        native_serialization_platforms=tuple(platforms))
    names = (*INPUT_NAMES, *extra_inputs)
    specs = [tf.TensorSpec([None, None], tf.int32, name=name) for name in names]

    @tf.function(input_signature=specs, autograph=False)
    def serve(*inputs):
        return converted(variables, *inputs)

    return serve


def write_directory(config: BertConfig, params: dict, directory: str, tokenizer,
                    platforms=DEFAULT_PLATFORMS) -> list[str]:
    """Writes the SavedModel into `directory`; returns its signature names.

    `params` holds the encoder and, optionally, the pooler, the pre-training heads and a
    sequence classifier.
    """
    import tensorflow as tf

    tensor_map.refuse_unknown_heads(params, HEAD_PARTS, "the SavedModel export")
    parts = tensor_map.present_parts(params)
    module = tf.Module()
    # The pre-training signature's module needs every part: zeros stand in for an absent
    # pooler or NSP head, and their outputs are not exposed.
    module.params = _variables(pretraining_params(config, params) if "mlm_head" in parts
                               else params)
    signatures = {"serving_default": _signature(
        _encoder_function(config, parts), module.params, config, platforms)}
    if "mlm_head" in parts:
        signatures["pretraining"] = _signature(
            _pretraining_function(config, "nsp_head" in parts), module.params, config,
            platforms, extra_inputs=("masked_lm_positions",))
    for name, function in signatures.items():
        setattr(module, name, function)
    module.do_lower_case = tf.Variable(tokenizer.lowercase, trainable=False, name="do_lower_case")
    with tempfile.TemporaryDirectory() as scratch:
        tokenizer.save(scratch)
        vocab_path = os.path.join(scratch, "vocab.txt")
        if not os.path.exists(vocab_path):
            vocab_path = os.path.join(scratch, "tokenizer.json")
        module.vocab_file = tf.saved_model.Asset(vocab_path)
        tf.saved_model.save(module, directory, signatures=signatures)
    return sorted(signatures)
