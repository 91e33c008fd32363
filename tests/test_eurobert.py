"""EuroBERT against transformers' `EuroBert*` classes (PyTorch, eager attention), float32.

Random transformers models (every weight, bias and norm drawn again) are saved with
`save_pretrained` and read through bert-jax's own Hugging Face reader, so each test holds the
conversion and the modules to the reference together.

Bound: as tests/test_modernbert.py's. The outputs are RMSNorm outputs of magnitude ~1-5
(logits up to ~10); both sides compute in float32 (rounding 6e-8 of a value) and differ only
in the order of their sums (matmuls over 32-3,072 terms, softmax over <= 28 keys, a few
layers): a few hundred roundings of the largest terms, ~1e-5 of the values' scale at most.
5e-5 is the issue's bound; the worst differences are printed with -s.
"""

import pytest
from eurobert_helpers import (EUROBERT_210M, classifier_difference, export_difference,
                              hf_model, hidden_and_logits, load_directory, mixed_batch,
                              packed_differences, torch_forward, worst_difference)

from bert_jax.interop import huggingface
from bert_jax.models.config import EuroBertConfig
from bert_jax.models.presets import preset
from bert_jax.models.families import family_of

BOUND = 5e-5


def test_config_fields_read_and_refused(tmp_path):
    hf_model("EuroBertModel", tmp_path)
    config, _, _ = load_directory(tmp_path)
    assert isinstance(config, EuroBertConfig)
    assert (config.hidden_dim, config.num_layers, config.num_heads, config.num_kv_heads,
            config.head_dim, config.rope_theta) == (32, 3, 4, 2, 8, 250000.0)
    assert config.attention_bias and config.mlp_bias and not config.tie_word_embeddings
    for values, message in (({"hidden_act": "gelu"}, "hidden_act is 'gelu'"),
                            ({"pretraining_tp": 2}, "pretraining_tp is 2"),
                            ({"sliding_window": 8}, r"\['sliding_window'\] are not implemented"),
                            ({"rope_parameters": {"rope_type": "llama3", "factor": 8.0}},
                             "rope_type 'default'"),
                            ({"num_attention_heads": 12, "num_key_value_heads": 5},
                             "multiple of model.num_kv_heads")):
        with pytest.raises(Exception, match=message):
            huggingface.config_from_hf({"model_type": "eurobert", **values}, "config.json")


def _join_projections(monkeypatch):
    """The projections of one input as one product (`dense.joined_projections`, the opt-in
    `precision.projections=joined`), forced on this CPU."""
    import jax

    from bert_jax.models import eurobert

    monkeypatch.setattr(eurobert, "joins_projections", lambda precision: True)
    jax.clear_caches()  # no step traced with the projections apart may be reused


@pytest.mark.parametrize("tied, joined", [(False, False), (True, False), (False, True)])
def test_hidden_states_and_masked_lm_logits_equal_transformers(tmp_path, tied, joined,
                                                               monkeypatch):
    """Every layer's hidden state (0 = embeddings, N = after the final norm) and the MLM
    logits, grouped-query attention, on a long row beside short padded ones; untied output
    embeddings (EuroBERT-210m's) and tied ones (the decoder's bias kept); and with the
    projections joined (the keys' and values', the gate's and up's, with their biases)."""
    if joined:
        _join_projections(monkeypatch)
    reference = hf_model("EuroBertForMaskedLM", tmp_path, tie_word_embeddings=tied)
    config, params, _ = load_directory(tmp_path)
    assert config.tie_word_embeddings == tied and ("kernel" in params["mlm_head"]) != tied
    worst_hidden, worst_logits = hidden_and_logits(reference, config, params, *mixed_batch())
    print(f"tied={tied}, joined={joined}: hidden states {max(worst_hidden):.2e}, MLM logits {worst_logits:.2e}")
    assert max(worst_hidden) < BOUND and worst_logits < BOUND


def test_eurobert_210m_preset_counts_the_parameters_transformers_builds():
    """The eurobert-210m preset is EuroBERT-210m: transformers' EuroBertModel at its
    published config has as many parameters as our encoder (212M with the 128,256-token
    embeddings), counted from shapes alone."""
    import jax
    import jax.numpy as jnp
    from flax.linen import meta

    torch, transformers = pytest.importorskip("torch"), pytest.importorskip("transformers")
    config = preset("eurobert-210m")
    with torch.device("meta"):
        expected = transformers.EuroBertModel(
            transformers.EuroBertConfig(**EUROBERT_210M, num_hidden_layers=12)).num_parameters()
    ids = jax.ShapeDtypeStruct((1, 8), jnp.int32)
    shapes = jax.eval_shape(family_of(config).encoder(config).init, jax.random.key(0),
                            ids, ids, ids)
    ours = sum(leaf.size for leaf in jax.tree.leaves(meta.unbox(shapes["params"])))
    print(f"EuroBERT-210m encoder: {ours:,} parameters")
    assert ours == expected and 205e6 < ours < 215e6


@pytest.mark.parametrize("joined", [False, True], ids=["apart", "joined"])
def test_eurobert_210m_widths_equal_transformers(tmp_path, joined, monkeypatch):
    """EuroBERT-210m's published widths (768 hidden, 12 heads of 64, SwiGLU 3,072, theta
    250,000) at 2 of its 12 layers, at transformers' own initialisation (`post_init`, not
    redrawn), rows up to 24 tokens. The vocabulary is cut from 128,256 to 4,096 tokens to
    keep the test seconds long: its size changes no sum (each logit is a 768-term dot
    product either way), only how many there are. Joined: the query, key and value
    projections as one product (as many key/value heads as query heads), the opt-in form."""
    if joined:
        _join_projections(monkeypatch)
    _, transformers = pytest.importorskip("torch"), pytest.importorskip("transformers")
    config = transformers.EuroBertConfig(**{**EUROBERT_210M, "vocab_size": 4096},
                                         num_hidden_layers=2, bos_token_id=1, eos_token_id=2,
                                         pad_token_id=2, mask_token_id=3)
    config._attn_implementation = "eager"
    transformers.EuroBertForMaskedLM(config).eval().save_pretrained(str(tmp_path))
    reference = transformers.EuroBertForMaskedLM.from_pretrained(
        str(tmp_path), attn_implementation="eager").eval()
    ours, params, _ = load_directory(tmp_path)
    assert (ours.hidden_dim, ours.mlp_dim, ours.head_dim) == (768, 3072, 64)
    ids, mask = mixed_batch(seed=7)
    ids[ids >= 5] += 1000  # ids spread over more of the vocabulary
    worst_hidden, worst_logits = hidden_and_logits(reference, ours, params, ids, mask)
    print(f"210m widths, joined={joined}: hidden states {max(worst_hidden):.2e}, MLM logits {worst_logits:.2e}")
    assert max(worst_hidden) < BOUND and worst_logits < BOUND


@pytest.mark.parametrize("pooling", ["late", "bos", "mean"])
def test_sequence_classifier_equals_transformers(tmp_path, pooling):
    reference = hf_model("EuroBertForSequenceClassification", tmp_path, num_labels=3,
                         classifier_pooling=pooling)
    config, worst = classifier_difference(reference, tmp_path, 3, seed=1, tokens=False)
    print(f"{pooling} pooling: worst difference {worst:.2e}")
    assert config.classifier_pooling == pooling and worst < BOUND


def test_token_classifier_equals_transformers_and_there_is_no_span_head(tmp_path):
    reference = hf_model("EuroBertForTokenClassification", tmp_path, num_labels=5)
    config, worst = classifier_difference(reference, tmp_path, 5, seed=2, tokens=True)
    assert worst < BOUND
    with pytest.raises(Exception, match="a eurobert model has no span head"):
        family_of(config).question_answering(config)


def test_packed_rows_equal_each_sequence_alone(tmp_path):
    """Two sequences in one row (instance ids, positions restarting) give what each gives
    alone, through the reference core and XLA's kernel (which takes the key/value groups)."""
    hf_model("EuroBertModel", tmp_path)
    config, params, _ = load_directory(tmp_path)
    for implementation, worst in packed_differences(config, params):
        assert worst < BOUND, implementation


@pytest.mark.parametrize("architecture,labels", [
    ("EuroBertForMaskedLM", None), ("EuroBertForSequenceClassification", 3),
    ("EuroBertForTokenClassification", 4)])
def test_export_loads_in_transformers_and_round_trips_bit_identically(tmp_path, architecture,
                                                                      labels):
    """bert-jax -> HF: transformers loads the class with no missing or unexpected keys and
    gives the original's logits; HF -> bert-jax -> HF writes the same tensors, bit for bit."""
    extra = {} if labels is None else {"num_labels": labels}
    reference = hf_model(architecture, tmp_path / "hf", **extra)
    model, _ = export_difference(tmp_path, architecture, reference)
    ids, mask = mixed_batch(seed=6)
    ours = torch_forward(model, ids, mask).logits.numpy()
    assert worst_difference(ours, torch_forward(reference, ids, mask).logits.numpy()) < BOUND


def test_flops_count_every_kernel_of_the_encoder_once():
    """The FLOP count (bert_jax/compiler/flops.py) reads grouped-query attention and SwiGLU
    from the config: per token, 2 FLOPs for each weight of every dense kernel of the encoder
    (fewer key/value heads, three MLP matrices), plus the attention core's scores and context
    (one key at length 1), and the decoder alone per prediction."""
    import jax
    import jax.numpy as jnp
    from flax import traverse_util
    from flax.linen import meta

    from bert_jax.compiler import flops

    config = preset("eurobert-tiny", vocab_size=96)
    ids = jax.ShapeDtypeStruct((1, 8), jnp.int32)
    shapes = meta.unbox(jax.eval_shape(family_of(config).encoder(config).init,
                                       jax.random.key(0), ids, ids, ids)["params"])
    kernels = sum(leaf.size for path, leaf in traverse_util.flatten_dict(shapes).items()
                  if path[-1] == "kernel")
    core = config.num_layers * 2 * 2 * config.num_heads * config.head_dim
    assert flops.encoder_flops_per_sequence(config, 1) == 2 * kernels + core
    assert flops.heads_flops_per_sequence(config, 1) == 2 * config.hidden_dim * 96
