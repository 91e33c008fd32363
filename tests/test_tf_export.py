"""Export to TensorFlow: original google-research/bert checkpoints and a SavedModel for serving.

The references are independent of bert-jax's name table: the variable list is written out
below from the variable scopes of the original `modeling.py` / `run_pretraining.py`, the
round trip starts from a checkpoint written here by TensorFlow, and the SavedModel runs
in a fresh Python process that imports no bert-jax.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from interop_helpers import random_pretraining_params, write_vocab
from tolerances import ENCODER_STEPS, assert_close, float32_steps

from bert_jax.interop import model_source, model_writers
from bert_jax.cli import main
from bert_jax.models.presets import preset
from bert_jax.errors import UserError
from input_pipeline.tokenization import load_tokenizer

tf = pytest.importorskip("tensorflow")


NUM_LABELS = 3
PRETRAINING = ("encoder", "pooler", "mlm_head", "nsp_head")
CLASSIFIER = ("encoder", "pooler", "classifier")


def original_variables(config, parts=PRETRAINING) -> dict:
    """name -> shape of every variable the original pre-training or classifier graph creates.

    Written from the scopes in google-research/bert: modeling.py's BertModel ("bert" ->
    "embeddings", "encoder/layer_%d", "pooler"), run_pretraining.py's get_masked_lm_output
    ("cls/predictions") and get_next_sentence_output ("cls/seq_relationship"), and
    run_classifier.py's create_model (unscoped "output_weights" [num_labels, hidden]).
    """
    hidden, intermediate, vocab = config.hidden_dim, config.mlp_dim, config.vocab_size
    layer_norm = lambda scope: {f"{scope}/LayerNorm/beta": (hidden,),  # noqa: E731
                                f"{scope}/LayerNorm/gamma": (hidden,)}
    dense = lambda scope, inputs, outputs: {f"{scope}/kernel": (inputs, outputs),  # noqa: E731
                                            f"{scope}/bias": (outputs,)}
    variables = {}
    if "encoder" in parts:
        variables.update({
            "bert/embeddings/word_embeddings": (vocab, hidden),
            "bert/embeddings/token_type_embeddings": (config.num_segments, hidden),
            "bert/embeddings/position_embeddings": (config.max_positions, hidden),
            **layer_norm("bert/embeddings")})
        for index in range(config.num_layers):
            layer = f"bert/encoder/layer_{index}"
            for projection in ("query", "key", "value"):
                variables.update(dense(f"{layer}/attention/self/{projection}", hidden, hidden))
            variables.update({**dense(f"{layer}/attention/output/dense", hidden, hidden),
                              **layer_norm(f"{layer}/attention/output"),
                              **dense(f"{layer}/intermediate/dense", hidden, intermediate),
                              **dense(f"{layer}/output/dense", intermediate, hidden),
                              **layer_norm(f"{layer}/output")})
    if "pooler" in parts:
        variables.update(dense("bert/pooler/dense", hidden, hidden))
    if "mlm_head" in parts:
        variables.update({**dense("cls/predictions/transform/dense", hidden, hidden),
                          **layer_norm("cls/predictions/transform"),
                          "cls/predictions/output_bias": (vocab,)})
    if "nsp_head" in parts:
        variables.update({"cls/seq_relationship/output_weights": (2, hidden),
                          "cls/seq_relationship/output_bias": (2,)})
    if "classifier" in parts:
        variables.update({"output_weights": (NUM_LABELS, hidden), "output_bias": (NUM_LABELS,)})
    return variables


def read_checkpoint(prefix: str) -> dict:
    reader = tf.train.load_checkpoint(prefix)
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


def with_parts(params, parts, seed: int = 2) -> dict:
    """The parts of `params` (a random pre-training model) that `parts` names, and a random
    sequence classifier (heads.py's layout: kernel (H, labels)) if it names one."""
    subset = {"bert": {key: value for key, value in params["bert"].items()
                       if key != "pooler" or "pooler" in parts}}
    subset.update({part: params[part] for part in ("mlm_head", "nsp_head") if part in parts})
    if "classifier" in parts:
        rng = np.random.default_rng(seed)
        hidden = params["bert"]["pooler"]["bias"].shape[0]
        subset["classifier"] = {
            "kernel": rng.normal(0, 0.3, (hidden, NUM_LABELS)).astype(np.float32),
            "bias": rng.normal(0, 0.3, (NUM_LABELS,)).astype(np.float32)}
    return subset


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A tiny random pre-training model, its tokenizer and its bert-jax model directory."""
    directory = tmp_path_factory.mktemp("tiny")
    tokenizer = load_tokenizer(write_vocab(directory))
    config = preset("tiny", vocab_size=tokenizer.vocab_size, max_positions=32, num_layers=3)
    params = random_pretraining_params(config, seed=1)
    model_writers.save_model(config, params, tokenizer, str(directory / "bert-jax"))
    return config, params, tokenizer, str(directory / "bert-jax")


@pytest.mark.parametrize("parts", [PRETRAINING, CLASSIFIER])
def test_tf_round_trip_is_bit_identical_with_the_original_names(tiny, tmp_path, parts):
    config, _, tokenizer, _ = tiny
    expected = original_variables(config, parts)
    rng = np.random.default_rng(7)
    original = {name: rng.normal(0, 0.3, shape).astype(np.float32)
                for name, shape in expected.items()}
    # A run_classifier.py output also holds the step and the Adam moments: not weights.
    training_state = {"global_step": np.array(900, np.int64),
                      "output_weights/adam_m": np.zeros((NUM_LABELS, config.hidden_dim),
                                                        np.float32)}
    source = tmp_path / "google"
    source.mkdir()
    variables = {**original, **training_state} if "classifier" in parts else original
    names = sorted(variables)
    tf.raw_ops.SaveV2(prefix=str(source / "bert_model.ckpt"), tensor_names=names,
                      shape_and_slices=[""] * len(names),
                      tensors=[tf.constant(variables[name]) for name in names])
    bert_config = dict(attention_probs_dropout_prob=0.1, hidden_act="gelu",
                       hidden_dropout_prob=0.1, hidden_size=config.hidden_dim,
                       initializer_range=0.02, intermediate_size=config.mlp_dim,
                       max_position_embeddings=config.max_positions,
                       num_attention_heads=config.num_heads,
                       num_hidden_layers=config.num_layers, type_vocab_size=config.num_segments,
                       vocab_size=config.vocab_size)
    (source / "bert_config.json").write_text(json.dumps(bert_config))
    write_vocab(source)

    # TF -> bert-jax (a model directory on disk) -> TF, through the command line.
    assert main(["convert", str(source), str(tmp_path / "ours"), "--to", "bert-jax"]) == 0
    if "classifier" in parts:
        params = model_source.resolve(str(tmp_path / "ours")).load().params
        assert params["classifier"]["kernel"].shape == (config.hidden_dim, NUM_LABELS)
    assert main(["convert", str(tmp_path / "ours"), str(tmp_path / "back"),
                 "--to", "tf-checkpoint"]) == 0
    back = tmp_path / "back"
    assert {"bert_model.ckpt.index", "bert_model.ckpt.data-00000-of-00001", "bert_config.json",
            "vocab.txt"} <= set(os.listdir(back))
    written = read_checkpoint(str(back / "bert_model.ckpt"))
    assert {name: tensor.shape for name, tensor in written.items()} == expected
    for name, tensor in original.items():
        assert written[name].dtype == np.float32 and written[name].tobytes() == tensor.tobytes()
    assert json.loads((back / "bert_config.json").read_text()) == bert_config
    assert (back / "vocab.txt").read_text() == (source / "vocab.txt").read_text()


@pytest.mark.parametrize("parts", [PRETRAINING, ("encoder", "pooler"), ("encoder", "mlm_head"),
                                   CLASSIFIER])
def test_bert_jax_export_holds_exactly_the_original_variables(tiny, tmp_path, parts):
    import flax

    config, params, tokenizer, _ = tiny
    # BertForPreTraining, BertModel, BertForMaskedLM (no pooler) and a sequence classifier.
    subset = with_parts(params, parts)
    destination = str(tmp_path / "tf")
    parts_written = model_writers.export_tf_checkpoint(config, subset, tokenizer, destination)
    assert parts_written == sorted(parts)
    written = read_checkpoint(os.path.join(destination, "bert_model.ckpt"))
    assert {name: tensor.shape for name, tensor in written.items()} == original_variables(
        config, parts)
    # ... and bert-jax -> TF -> bert-jax is bit-identical.
    restored = model_source.resolve(destination).load().params
    restored, subset = (flax.traverse_util.flatten_dict(tree) for tree in (restored, subset))
    assert restored.keys() == subset.keys()
    for path, value in subset.items():
        assert restored[path].dtype == value.dtype and np.array_equal(restored[path], value), path


def original_bert_forward(variables: dict, config, input_ids, input_mask, segment_ids,
                          masked_lm_positions) -> dict:
    """The original modeling.py / run_pretraining.py computation, in float64 numpy, reading
    only the checkpoint's variables by their original names.

    One deliberate difference: the exact (erf) GELU, which bert-jax and Hugging Face use,
    where modeling.py has the tanh approximation (they differ by up to ~1e-3).
    """
    from scipy.special import erf

    v = {name: value.astype(np.float64) for name, value in variables.items()}
    gelu = lambda x: 0.5 * x * (1 + erf(x / np.sqrt(2)))  # noqa: E731
    dense = lambda x, scope: x @ v[f"{scope}/kernel"] + v[f"{scope}/bias"]  # noqa: E731

    def layer_norm(x, scope):
        mean, variance = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
        return ((x - mean) / np.sqrt(variance + 1e-12) * v[f"{scope}/LayerNorm/gamma"]
                + v[f"{scope}/LayerNorm/beta"])

    batch_size, seq_len = input_ids.shape
    heads, head_dim = config.num_heads, config.hidden_dim // config.num_heads
    x = (v["bert/embeddings/word_embeddings"][input_ids]
         + v["bert/embeddings/token_type_embeddings"][segment_ids]
         + v["bert/embeddings/position_embeddings"][:seq_len])
    x = layer_norm(x, "bert/embeddings")
    adder = (1.0 - input_mask[:, None, None, :]) * -10000.0  # create_attention_mask_from_input_mask

    def split(tensor):  # (B, T, H) -> (B, nh, T, hd), as transpose_for_scores
        return tensor.reshape(batch_size, seq_len, heads, head_dim).transpose(0, 2, 1, 3)

    for index in range(config.num_layers):
        layer = f"bert/encoder/layer_{index}"
        query, key, value = (split(dense(x, f"{layer}/attention/self/{name}"))
                             for name in ("query", "key", "value"))  # (B, nh, T, hd)
        scores = query @ key.transpose(0, 1, 3, 2) / np.sqrt(head_dim) + adder  # (B, nh, T, T)
        probabilities = np.exp(scores - scores.max(-1, keepdims=True))
        probabilities /= probabilities.sum(-1, keepdims=True)
        context = (probabilities @ value).transpose(0, 2, 1, 3).reshape(batch_size, seq_len, -1)
        x = layer_norm(dense(context, f"{layer}/attention/output/dense") + x,
                       f"{layer}/attention/output")
        hidden = gelu(dense(x, f"{layer}/intermediate/dense"))
        x = layer_norm(dense(hidden, f"{layer}/output/dense") + x, f"{layer}/output")
    outputs = dict(sequence_output=x)
    pooled = outputs["pooled_output"] = np.tanh(dense(x[:, 0], "bert/pooler/dense"))
    if "cls/predictions/output_bias" in v:
        gathered = np.take_along_axis(x, masked_lm_positions[..., None], axis=1)  # (B, P, H)
        transformed = layer_norm(gelu(dense(gathered, "cls/predictions/transform/dense")),
                                 "cls/predictions/transform")
        outputs["mlm_logits"] = (transformed @ v["bert/embeddings/word_embeddings"].T
                                 + v["cls/predictions/output_bias"])
        outputs["nsp_logits"] = (pooled @ v["cls/seq_relationship/output_weights"].T
                                 + v["cls/seq_relationship/output_bias"])
    if "output_weights" in v:  # run_classifier.py: matmul(..., transpose_b=True) + bias
        outputs["logits"] = pooled @ v["output_weights"].T + v["output_bias"]
    return outputs


@pytest.mark.parametrize("parts", [PRETRAINING, CLASSIFIER])
def test_exported_checkpoint_computes_in_the_original_graph_what_bert_jax_computes(
        tiny, tmp_path, parts):
    config, params, tokenizer, _ = tiny
    params = with_parts(params, parts)
    model_writers.export_tf_checkpoint(config, params, tokenizer, str(tmp_path / "tf"))
    variables = read_checkpoint(str(tmp_path / "tf" / "bert_model.ckpt"))
    feed = _inputs(np.random.default_rng(5), 3, 11, config.vocab_size)
    expected = original_bert_forward(variables, config, **feed)

    actual = bert_jax_outputs(config, params, feed)
    assert sorted(actual) == sorted(expected)
    for name, value in expected.items():
        # The original TF graph against ours, both float32 (tolerances.ENCODER_STEPS).
        assert_close(actual[name], value, ENCODER_STEPS, err_msg=name)


_LOAD_AND_RUN = """
import sys
import numpy as np
import tensorflow as tf
inputs = np.load(sys.argv[1])
outputs = {}
for argument in sys.argv[3:]:
    directory, shapes = argument.rsplit(":", 1)
    model = tf.saved_model.load(directory)
    print(sorted(model.signatures), model.vocab_file.asset_path.numpy().decode()[-9:],
          bool(model.do_lower_case.numpy()))
    for name, signature in model.signatures.items():
        for shape in shapes.split(","):
            feed = {key[len(shape) + 1:]: tf.constant(value) for key, value in inputs.items()
                    if key.startswith(shape + "/")}
            if name != "pretraining":
                feed.pop("masked_lm_positions")
            for key, value in signature(**feed).items():
                outputs[f"{directory}/{name}/{shape}/{key}"] = value.numpy()
np.savez(sys.argv[2], **outputs)
"""


def _inputs(rng, batch_size: int, seq_len: int, vocab_size: int) -> dict:
    input_mask = np.ones((batch_size, seq_len), np.int32)
    input_mask[0, seq_len // 2:] = 0  # one padded row, so the mask matters
    segment_ids = np.zeros((batch_size, seq_len), np.int32)
    segment_ids[:, seq_len // 3:] = 1
    return dict(input_ids=rng.integers(0, vocab_size, (batch_size, seq_len)).astype(np.int32),
                input_mask=input_mask, segment_ids=segment_ids,
                masked_lm_positions=rng.integers(0, seq_len, (batch_size, 3)).astype(np.int32))


def bert_jax_outputs(config, params, feed) -> dict:
    """What bert-jax's own modules compute for the parts `params` holds (one compilation):
    sequence_output, pooled_output, mlm_logits, nsp_logits, logits (sequence classifier)."""
    import jax

    from bert_jax.models.bert_heads import BertForSequenceClassification
    from bert_jax.interop.saved_model import pretraining_params
    from bert_jax.models.bert import BertForPreTraining, BertModel

    arguments = (feed["input_ids"], feed["segment_ids"], feed["input_mask"])
    with_pooler = "pooler" in params["bert"]

    def run(params):
        sequence_output, pooled_output = BertModel(config, with_pooler=with_pooler).apply(
            {"params": params["bert"]}, *arguments)
        outputs = dict(sequence_output=sequence_output, pooled_output=pooled_output)
        if "mlm_head" in params:
            outputs["mlm_logits"], outputs["nsp_logits"] = BertForPreTraining(config).apply(
                {"params": pretraining_params(config, params)}, *arguments,
                feed["masked_lm_positions"])
            if "nsp_head" not in params:
                del outputs["nsp_logits"]
        if "classifier" in params:
            outputs["logits"] = BertForSequenceClassification(config, NUM_LABELS).apply(
                {"params": params}, *arguments)
        return {name: value for name, value in outputs.items() if value is not None}

    return {name: np.asarray(value) for name, value in jax.jit(run)(params).items()}


def test_saved_model_in_a_fresh_process_equals_bert_jax(tiny, tmp_path):
    config, params, tokenizer, source = tiny
    # The full pre-training model through the command line at two shapes; a BertForMaskedLM
    # -like model (no pooler, no NSP head) and a sequence classifier through the library.
    full = str(tmp_path / "serving" / "bert" / "1")
    assert main(["convert", source, full, "--to", "saved-model"]) == 0
    models = {full: (params, ("small", "large"))}
    for name, parts, signatures in (
            ("masked_lm", ("encoder", "mlm_head"), ["pretraining", "serving_default"]),
            ("classifier", CLASSIFIER, ["serving_default"])):
        models[str(tmp_path / name)] = (with_parts(params, parts), ("small",))
        written = model_writers.export_saved_model(config, models[str(tmp_path / name)][0],
                                                   tokenizer, str(tmp_path / name),
                                                   platforms=("cpu",))
        assert written == signatures
    rng = np.random.default_rng(3)
    shapes = {"small": (2, 7), "large": (5, 19)}
    inputs = {shape: _inputs(rng, *size, config.vocab_size) for shape, size in shapes.items()}
    np.savez(tmp_path / "inputs.npz", **{f"{shape}/{key}": value for shape, feed in
                                         inputs.items() for key, value in feed.items()})
    # A fresh interpreter with no bert-jax on its path: only TensorFlow reads the SavedModel.
    environment = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    result = subprocess.run(
        [sys.executable, "-c", _LOAD_AND_RUN, str(tmp_path / "inputs.npz"),
         str(tmp_path / "outputs.npz"),
         *[f"{path}:{','.join(runs)}" for path, (_, runs) in models.items()]],
        capture_output=True, text=True, env=environment, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines()[-3:] == [
        "['pretraining', 'serving_default'] vocab.txt True"] * 2 + [
        "['serving_default'] vocab.txt True"]
    outputs = np.load(tmp_path / "outputs.npz")
    signatures = dict(sequence_output="serving_default", pooled_output="serving_default",
                      logits="serving_default", mlm_logits="pretraining",
                      nsp_logits="pretraining")
    for directory, (model_params, runs) in models.items():
        for shape in runs:
            expected = {f"{directory}/{signatures[name]}/{shape}/{name}": value for name, value
                        in bert_jax_outputs(config, model_params, inputs[shape]).items()}
            assert sorted(key for key in outputs.files
                          if key.startswith(f"{directory}/") and f"/{shape}/" in key
                          ) == sorted(expected)
            for key, value in expected.items():
                assert outputs[key].shape == value.shape, key
                difference = float(np.max(np.abs(outputs[key] - value)))
                print(f"SavedModel {key[len(str(tmp_path)) + 1:]} {shapes[shape]}: max abs "
                      f"difference from bert-jax {difference:.2e}")
                # Our function lowered through jax2tf and compiled by TensorFlow's XLA:
                # the same float32 operations, in XLA's order each time.
                assert difference < float32_steps(ENCODER_STEPS, value), (key, difference)


def test_saved_model_serves_lengths_where_a_cpu_forward_pass_chunks_attention(tmp_path):
    """A model with 160 positions or more: the CPU's attention chunking starts at 160 tokens
    (layers/attention.py), a comparison the export's symbolic length cannot decide; the
    SavedModel must serve lengths on both sides of it."""
    tokenizer = load_tokenizer(write_vocab(tmp_path))
    config = preset("tiny", vocab_size=tokenizer.vocab_size, max_positions=192, num_layers=1)
    params = with_parts(random_pretraining_params(config, seed=4), ("encoder", "pooler"))
    destination = str(tmp_path / "serving" / "1")
    assert model_writers.export_saved_model(config, params, tokenizer, destination,
                                            platforms=("cpu",)) == ["serving_default"]
    serve = tf.saved_model.load(destination).signatures["serving_default"]
    rng = np.random.default_rng(6)
    for batch_size, seq_len in ((2, 9), (4, 170), (2, 192)):
        feed = _inputs(rng, batch_size, seq_len, config.vocab_size)
        del feed["masked_lm_positions"]
        outputs = serve(**{name: tf.constant(value) for name, value in feed.items()})
        expected = bert_jax_outputs(config, params, feed)
        for name, value in expected.items():  # as above: ours through jax2tf
            assert_close(outputs[name].numpy(), value, ENCODER_STEPS,
                         err_msg=f"{name} {batch_size}x{seq_len}")
    with pytest.raises(Exception, match="193"):  # past the position table: refused, not read
        feed = _inputs(rng, 1, 193, config.vocab_size)
        del feed["masked_lm_positions"]
        serve(**{name: tf.constant(value) for name, value in feed.items()})


def test_exports_refuse_a_full_directory_and_heads_without_a_tf_counterpart(tiny, tmp_path):
    config, params, tokenizer, source = tiny
    full = tmp_path / "full"
    full.mkdir()
    (full / "keep.txt").write_text("mine")
    for target in ("tf-checkpoint", "saved-model"):
        assert main(["convert", source, str(full), "--to", target]) == 2
        assert os.listdir(full) == ["keep.txt"]
    # --overwrite replaces only a directory bert-jax wrote, never the user's files (issue 51).
    assert main(["convert", source, str(full), "--to", "tf-checkpoint", "--overwrite"]) == 2
    assert os.listdir(full) == ["keep.txt"]
    (full / "keep.txt").unlink()
    assert main(["convert", source, str(full), "--to", "tf-checkpoint"]) == 0
    (full / "keep.txt").write_text("written since, beside the export")
    assert main(["convert", source, str(full), "--to", "tf-checkpoint", "--overwrite"]) == 0
    assert "keep.txt" not in os.listdir(full)
    assert main(["convert", source, str(tmp_path / "x"), "--to", "saved-model",
                 "--platforms", "cpu,gpu"]) == 2

    # Heads with no TF counterpart: an unknown head, and heads.py's token classifier (its
    # `classifier` sits on an encoder without the pooler).
    token_classifier = with_parts(params, ("encoder", "classifier"))  # no pooler
    cases = {"span": ({**params, "qa_outputs": {"bias": np.zeros(2, np.float32)}},
                      r"head\(s\) \['qa_outputs'\] have no counterpart in {target}"),
             "token": (token_classifier,
                       r"head 'classifier' scores every position \(token classification, no "
                       r"pooler\): it has no counterpart in {target}")}
    exports = {"an original BERT checkpoint": model_writers.export_tf_checkpoint,
               "the SavedModel export": model_writers.export_saved_model}
    for target, export in exports.items():
        for case_params, message in cases.values():
            destination = tmp_path / "refused"
            with pytest.raises(UserError, match=message.format(target=target)):
                export(config, case_params, tokenizer, str(destination))
            # Nothing half-written: no destination and no temporary directory beside it.
            assert not destination.exists()
            assert not [name for name in os.listdir(tmp_path) if name.startswith(".refused")]
            # Nor the parent directories made for a nested destination (serving/bert/1).
            with pytest.raises(UserError, match=message.format(target=target)):
                export(config, case_params, tokenizer, str(tmp_path / "serving" / "bert" / "1"))
            assert not (tmp_path / "serving").exists()
    # The sequence classifier that an original run_classifier.py checkpoint imports with is
    # refused by the Hugging Face writer rather than dropped.
    with pytest.raises(UserError, match=r"\['classifier'\] have no counterpart"):
        model_writers.export_huggingface(config, with_parts(params, CLASSIFIER), tokenizer,
                                         str(tmp_path / "hf"))
