"""Every export path of `bert-jax convert` once on the real all-MiniLM-L6-v2 (512 positions).

Tiny fixtures hide real-size failures: the SavedModel export failed on every real model
(attention's CPU chunking compared the symbolic length with 160) while the tiny-model tests
passed. `--to hf` and the bert-jax directory are in test_interop.py's MiniLM round trip.
References are independent of bert-jax: transformers' PyTorch BertModel, the original
safetensors file and sentence-transformers' own encode.
"""

import numpy as np
import pytest
from interop_helpers import minilm_directory, torch_inputs
from tolerances import ENCODER_STEPS, assert_close

from bert_jax.interop import model_source
from bert_jax.cli import main

tf = pytest.importorskip("tensorflow")

# (batch, tokens): short, and past the 160 tokens where the CPU forward pass chunks attention.
SHAPES = ((2, 17), (3, 300))


@pytest.fixture(scope="module")
def minilm() -> str:
    return minilm_directory()


@pytest.fixture(scope="module")
def saved_model(minilm, tmp_path_factory) -> str:
    """MiniLM's SavedModel, exported once through the command line (default platforms)."""
    destination = str(tmp_path_factory.mktemp("minilm") / "serving" / "minilm" / "1")
    assert main(["convert", minilm, destination, "--to", "saved-model"]) == 0
    return destination


def _inputs(rng, batch_size: int, seq_len: int) -> dict:
    input_mask = np.ones((batch_size, seq_len), np.int32)
    input_mask[1, seq_len // 2:] = 0  # one padded row, so the mask matters
    segment_ids = np.zeros((batch_size, seq_len), np.int32)
    segment_ids[:, seq_len // 3:] = 1
    input_ids = rng.integers(1000, 30000, (batch_size, seq_len)).astype(np.int32)
    input_ids[:, 0] = 101  # [CLS]
    return dict(input_ids=input_ids, input_mask=input_mask, segment_ids=segment_ids)


def test_minilm_saved_model_equals_transformers(minilm, saved_model):
    import torch
    import transformers

    loaded = tf.saved_model.load(saved_model)
    assert sorted(loaded.signatures) == ["serving_default"]  # MiniLM has no MLM head
    assert bool(loaded.do_lower_case.numpy())
    serve = loaded.signatures["serving_default"]
    reference = transformers.BertModel.from_pretrained(minilm).eval()
    rng = np.random.default_rng(0)
    for batch_size, seq_len in SHAPES:
        feed = _inputs(rng, batch_size, seq_len)
        outputs = serve(**{name: tf.constant(value) for name, value in feed.items()})
        with torch.no_grad():
            expected = reference(**torch_inputs(feed))
        real = feed["input_mask"].astype(bool)  # padding positions are not compared
        sequence_error = np.abs(outputs["sequence_output"].numpy()
                                - expected.last_hidden_state.numpy())[real].max()
        pooled_error = np.abs(outputs["pooled_output"].numpy()
                              - expected.pooler_output.numpy()).max()
        print(f"MiniLM SavedModel vs transformers BertModel, batch {batch_size} x {seq_len}: "
              f"max abs difference sequence_output {sequence_error:.2e}, pooled_output "
              f"{pooled_error:.2e}")
        # Two implementations of MiniLM (tolerances.ENCODER_STEPS of each output's scale).
        assert_close(outputs["sequence_output"].numpy()[real],
                     expected.last_hidden_state.numpy()[real], ENCODER_STEPS)
        assert_close(outputs["pooled_output"].numpy(), expected.pooler_output.numpy(),
                     ENCODER_STEPS)


def test_minilm_tf_checkpoint_reads_back_bit_identical(minilm, tmp_path):
    exported = str(tmp_path / "tf")
    assert main(["convert", minilm, exported, "--to", "tf-checkpoint"]) == 0
    loaded = model_source.resolve(minilm).load()
    config, params = loaded.config, loaded.params
    loaded = model_source.resolve(exported).load()
    reread_config, reread = loaded.config, loaded.params
    assert reread_config == config
    import flax

    expected, actual = (flax.traverse_util.flatten_dict(tree) for tree in (params, reread))
    assert sorted(actual) == sorted(expected)
    for path, value in expected.items():
        assert actual[path].dtype == value.dtype and np.array_equal(actual[path], value), path


def test_minilm_sentence_transformers_export_encodes_as_the_original(minilm, tmp_path):
    sentence_transformers = pytest.importorskip("sentence_transformers")
    exported = str(tmp_path / "st")
    assert main(["convert", minilm, exported, "--to", "sentence-transformers"]) == 0
    texts = ["The man went to the store.", "Natasha laughed. " * 80]  # the second > 256 tokens
    original, written = (sentence_transformers.SentenceTransformer(path, device="cpu")
                         for path in (minilm, exported))
    assert written.max_seq_length == original.max_seq_length == 256
    # The same float32 weights through the same torch code: equal, unless torch picks other
    # kernels for the two models; 8 float32 steps of the unit vectors' norm.
    assert_close(written.encode(texts), original.encode(texts), 8, scale=1.0)
