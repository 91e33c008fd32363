"""UltraBERT (the Llama-style family's `variant` "ultrabert") against transformers'
`Ultrabert*` classes (PyTorch, eager attention), float32.

Random transformers models (every weight, bias and norm drawn again) are saved with
`save_pretrained` and read through bert-jax's own Hugging Face reader (`model_source`, the
path EuroBERT directories take), so each test holds the conversion and the modules to the
reference together. The tiny model has 4 layers (sliding, sliding, full, sliding: both
rotary thetas and both masks), grouped-query attention (4 query heads on 2 key/value heads)
and a window of 4 tokens a side, on a 24-token row (every query's window cut by the
window, not the row) beside rows of 11 and 5 tokens padded to 24.

Bound: as tests/test_eurobert.py's. The outputs are RMSNorm outputs of magnitude ~1-5
(logits up to ~10); both sides compute in float32 (rounding 6e-8 of a value) and differ only
in the order of their sums (matmuls over 48-3,072 terms, softmax over <= 24 keys, a few
layers; the sliding layers' hidden keys get exactly zero weight on both sides, so the window
adds no rounding): a few hundred roundings of the largest terms, ~1e-5 of the values' scale
at most. 5e-5 is the issue's bound; the worst differences are printed with -s.
"""

import json

import numpy as np
import pytest
from eurobert_helpers import (classifier_difference, export_difference, hidden_and_logits,
                              load_directory, packed_differences, torch_modules,
                              worst_difference)
from modernbert_helpers import mixed_batch, randomize, torch_forward

from bert_jax.interop import hf_ultrabert, huggingface, tensor_map
from bert_jax.models.config import Precision
from bert_jax.models.families import family_of

BOUND = 5e-5  # the module docstring says why
# 4 query heads on 2 key/value heads, a window of 4 tokens a side, biases on where the config
# allows them, the prediction head narrower than the hidden size (a transposed kernel shows).
HF_CONFIG = dict(vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=4,
                 num_attention_heads=4, num_key_value_heads=2, sliding_window=4,
                 prediction_head_size=48, attention_bias=True, mlp_bias=True,
                 pad_token_id=0, bos_token_id=1, eos_token_id=2)


def hf_model(architecture: str, directory=None, seed: int = 0, randomized: bool = True,
             **overrides):
    """A random transformers `architecture` (e.g. "UltrabertForMaskedLM"), eager attention,
    saved to `directory` if given."""
    _, transformers = torch_modules()
    config = transformers.UltrabertConfig(**{**HF_CONFIG, **overrides})
    config._attn_implementation = "eager"
    model = getattr(transformers, architecture)(config).eval()
    model = randomize(model, seed) if randomized else model
    if directory is not None:
        model.save_pretrained(str(directory))
    return model


def test_config_fields_read_and_refused(tmp_path):
    """config.json's layer types, window and rotary thetas per layer type, as transformers
    writes them and in the older form (per-layer attention_windows, a list of thetas) that
    its UltrabertConfig still reads; fields bert-jax would ignore are refused."""
    hf_model("UltrabertModel", tmp_path)
    config, _, _ = load_directory(tmp_path)
    assert config.variant == "ultrabert" and config.classifier_pooling == "cls"
    assert config.layer_types == ("sliding_attention", "sliding_attention", "full_attention",
                                  "sliding_attention")
    assert [config.layer_window(index) for index in range(4)] == [4, 4, None, 4]
    assert (config.rope_theta, config.sliding_rope_theta, config.head_dim,
            config.num_kv_heads, config.prediction_head_size) == (2560000.0, 10000.0, 16, 2, 48)
    older = dict(model_type="ultrabert", hidden_size=64, num_hidden_layers=4,
                 num_attention_heads=4, attention_windows=[4, 4, 0, 4],
                 rope_theta=[10000.0, 10000.0, 2560000.0, 10000.0])
    read = huggingface.config_from_hf(older, "config.json")
    assert (read.layer_types, read.sliding_window, read.rope_theta, read.sliding_rope_theta) \
        == (config.layer_types, 4, 2560000.0, 10000.0)
    for values, message in (({"classifier_dropout": 0.1}, "classifier_dropout is 0.1"),
                            ({"hidden_act": "gelu"}, "hidden_act is 'gelu'"),
                            ({"layer_types": ["chunked_attention"] * 32}, "chunked_attention"),
                            ({"pretraining_tp": 1}, r"\['pretraining_tp'\] are not implemented"),
                            ({"classifier_pooling": "late"}, "must be one of")):
        with pytest.raises(Exception, match=message):
            huggingface.config_from_hf({"model_type": "ultrabert", **values}, "config.json")


@pytest.mark.parametrize("tied", [False, True])
def test_hidden_states_and_masked_lm_logits_equal_transformers(tmp_path, tied):
    """Every layer's hidden state (0 = embeddings, N = after the final norm) and the MLM
    logits (the two-layer prediction head, then its own decoder or the token embeddings);
    the scanned stack (a block of sliding, sliding, full, then the last layer alone) gives
    the unrolled one's output."""
    reference = hf_model("UltrabertForMaskedLM", tmp_path, tie_word_embeddings=tied)
    config, params, _ = load_directory(tmp_path)
    assert config.tie_word_embeddings == tied
    assert ("decoder" in params["mlm_head"]) != tied and config.layer_period == 3
    ids, mask = mixed_batch()
    worst_hidden, worst_logits = hidden_and_logits(reference, config, params, ids, mask)
    print(f"tied={tied}: hidden states {max(worst_hidden):.2e}, MLM logits {worst_logits:.2e}")
    assert max(worst_hidden) < BOUND and worst_logits < BOUND
    outputs = [family_of(config).encoder(config, Precision(scan_layers=scan)).apply(
        {"params": params["eurobert"]}, ids, np.zeros_like(ids), mask)[0]
        for scan in (False, True)]
    assert worst_difference(*outputs, mask) < BOUND


def test_window_reaches_exactly_sliding_window_tokens(tmp_path):
    """A key exactly `sliding_window` tokens away is seen by a sliding layer and one more
    token away is not: changing token 10 of a 24-token row moves layer 1's output (one
    sliding layer deep) at positions 6..14 and nowhere else, in ours and in transformers'."""
    torch, _ = torch_modules()
    reference = hf_model("UltrabertModel", tmp_path)
    config, params, _ = load_directory(tmp_path)
    ids, mask = mixed_batch(batch=1)
    changed = ids.copy()
    changed[0, 10] = 7 if ids[0, 10] != 7 else 8
    encoder = family_of(config).encoder(config)
    ours, theirs = [], []
    for row in (ids, changed):
        _, state = encoder.apply({"params": params["eurobert"]}, row, np.zeros_like(row), mask,
                                 mutable=["intermediates"])
        ours.append(np.asarray(state["intermediates"]["hidden_states"][1]))
        theirs.append(torch_forward(reference, row, mask, output_hidden_states=True)
                      .hidden_states[1].numpy())
    for first, second in (ours, theirs):
        moved = np.flatnonzero(np.abs(first - second).max(axis=-1)[0] > 0)
        assert list(moved) == list(range(6, 15))
    del torch


def test_packed_rows_equal_each_sequence_alone(tmp_path):
    """Two sequences in one row (instance ids, positions restarting) give what each gives
    alone, through the reference core (the sliding layers in bands: 28 tokens >= 4 windows)
    and XLA's kernel (its own window); the first sequence (14 tokens) is longer than the
    window."""
    hf_model("UltrabertModel", tmp_path)
    config, params, _ = load_directory(tmp_path)
    for implementation, worst in packed_differences(config, params):
        print(f"packed, {implementation}: worst difference {worst:.2e}")
        assert worst < BOUND, implementation


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_sequence_classifier_equals_transformers(tmp_path, pooling):
    reference = hf_model("UltrabertForSequenceClassification", tmp_path, num_labels=3,
                         classifier_pooling=pooling)
    config, worst = classifier_difference(reference, tmp_path, 3, seed=1, tokens=False)
    print(f"{pooling} pooling: worst difference {worst:.2e}")
    assert config.classifier_pooling == pooling and worst < BOUND


def test_token_classifier_equals_transformers(tmp_path):
    reference = hf_model("UltrabertForTokenClassification", tmp_path, num_labels=5)
    _, worst = classifier_difference(reference, tmp_path, 5, seed=2, tokens=True)
    print(f"token classifier: worst difference {worst:.2e}")
    assert worst < BOUND


@pytest.mark.parametrize("architecture,labels,tied", [
    ("UltrabertForMaskedLM", None, False), ("UltrabertForMaskedLM", None, True),
    ("UltrabertForSequenceClassification", 3, False),
    ("UltrabertForTokenClassification", 4, False)])
def test_export_loads_in_transformers_and_round_trips_bit_identically(tmp_path, architecture,
                                                                      labels, tied):
    """bert-jax -> HF: transformers loads the class with no missing or unexpected keys and
    gives the original's logits; HF -> bert-jax -> HF writes the same tensors, bit for bit,
    and a config.json that reads back as the same config. A classifier's tensors are the
    encoder's and `classifier`'s alone (no dense layer before it)."""
    extra = {} if labels is None else {"num_labels": labels}
    reference = hf_model(architecture, tmp_path / "hf", tie_word_embeddings=tied, **extra)
    model, config = export_difference(tmp_path, architecture, reference)
    ids, mask = mixed_batch(seed=6)
    worst = worst_difference(torch_forward(model, ids, mask).logits.numpy(),
                             torch_forward(reference, ids, mask).logits.numpy())
    print(f"{architecture} tied={tied}: exported logits {worst:.2e}")
    assert worst < BOUND
    assert huggingface.config_from_hf(
        json.loads((tmp_path / "export" / "config.json").read_text()), "export") == config


def test_real_width_encoder_equals_transformers():
    """UltraBERT-150M's width (768 hidden, as its model card gives it) at 12 layers, 12 heads
    of 64, SwiGLU 3,072 and UltrabertConfig's defaults otherwise (window 128 a side, thetas
    10,000 and 2,560,000, prediction head 768): the card publishes no more of its config.
    transformers' own initialisation (`post_init`, not redrawn); a 300-token row (the window
    cuts every sliding layer's view of it) beside an 11-token row padded to 300. The
    vocabulary is cut to 4,096 tokens: its size changes no sum, only how many logits. One
    masked-LM pass on each side gives every hidden state and the logits."""
    _, transformers = torch_modules()
    reference_config = transformers.UltrabertConfig(
        vocab_size=4096, hidden_size=768, intermediate_size=3072, num_hidden_layers=12,
        num_attention_heads=12, num_key_value_heads=12, pad_token_id=0, bos_token_id=1,
        eos_token_id=2)
    reference_config._attn_implementation = "eager"
    reference = transformers.UltrabertForMaskedLM(reference_config).eval()
    config = hf_ultrabert.config_from_hf(  # the fields save_pretrained writes
        json.loads(reference_config.to_json_string()), "config")
    assert (config.hidden_dim, config.num_layers, config.sliding_window, config.head_dim) == (
        768, 12, 128, 64)
    tensors = hf_ultrabert.canonical_names(
        {name: tensor.numpy() for name, tensor in reference.state_dict().items()}, "torch")
    params = tensor_map.tensors_to_params(  # the reader's own table, from memory, not a file
        tensors, hf_ultrabert.name_table(config, hf_ultrabert.encoder_prefix(tensors)),
        tensor_map.parameter_shapes(config), "torch")
    ids, mask = mixed_batch(seed=7, batch=2, seq_len=300)
    ids[ids >= 5] += 1000  # ids spread over more of the vocabulary
    positions = np.array([[3, 150, 299], [1, 5, 9]], np.int32)
    logits, state = family_of(config).masked_lm_model(config).apply(
        {"params": params}, ids, np.zeros_like(ids), mask, positions, mutable=["intermediates"])
    theirs = torch_forward(reference, ids, mask, output_hidden_states=True)
    hidden = zip(state["intermediates"]["eurobert"]["hidden_states"], theirs.hidden_states,
                 strict=True)
    worst_hidden = max(worst_difference(ours, reference_state.numpy(), mask)
                       for ours, reference_state in hidden)
    worst_logits = worst_difference(
        logits, np.take_along_axis(theirs.logits.numpy(), positions[..., None], axis=1))
    print(f"768 wide, 12 layers: hidden states {worst_hidden:.2e}, MLM logits {worst_logits:.2e}")
    assert worst_hidden < BOUND and worst_logits < BOUND


def test_question_answering_equals_transformers_and_exports(tmp_path):
    """UltrabertForQuestionAnswering's start and end logits; its export loads in
    transformers with the same logits and the original's tensors, bit for bit."""
    reference = hf_model("UltrabertForQuestionAnswering", tmp_path / "hf")
    config, params, source = load_directory(tmp_path / "hf")
    assert source.task_info()["task"] == "qa" and sorted(params) == ["eurobert", "qa_outputs"]
    ids, mask = mixed_batch(seed=4)
    start, end = family_of(config).question_answering(config).apply(
        {"params": params}, ids, np.zeros_like(ids), mask)
    theirs = torch_forward(reference, ids, mask)
    worst = max(worst_difference(start, theirs.start_logits.numpy(), mask),
                worst_difference(end, theirs.end_logits.numpy(), mask))
    print(f"span logits: worst difference {worst:.2e}")
    assert worst < BOUND
    model, _ = export_difference(tmp_path, "UltrabertForQuestionAnswering", reference)
    exported = torch_forward(model, ids, mask)
    assert worst_difference(exported.end_logits.numpy(), theirs.end_logits.numpy()) == 0
