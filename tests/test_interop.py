"""Weights moving between bert-jax, Hugging Face transformers and original TF checkpoints.

References are independent: transformers' own PyTorch BertModel / BertForPreTraining on the
same token ids, and a TF checkpoint written here with the original variable names.
"""

import json
import os

import numpy as np
import pytest
from interop_helpers import minilm_directory, tiny_random_model, torch_inputs, write_vocab
from tolerances import ENCODER_STEPS, assert_close, float32_steps

from bert_jax import inference
from bert_jax.interop import model_source, model_writers
from bert_jax.errors import UserError
from input_pipeline.tokenization import load_tokenizer

SENTENCES = [
    "Well, Prince, so Genoa and Lucca are now just family estates of the Buonapartes.",
    "The man went to the store.",
    ("Prince Andrew looked at the sky, which was high and clear.", "He said nothing at all."),
    "Natasha laughed.",
]


def _flat(tree, prefix=()):
    for key, value in tree.items():
        if isinstance(value, dict):
            yield from _flat(value, (*prefix, key))
        else:
            yield (*prefix, key), np.asarray(value)


def assert_trees_identical(actual: dict, expected: dict) -> None:
    actual, expected = dict(_flat(actual)), dict(_flat(expected))
    assert sorted(actual) == sorted(expected)
    for path, value in expected.items():
        assert actual[path].dtype == value.dtype and np.array_equal(actual[path], value), path


def read_safetensors(path: str) -> dict:
    from safetensors.numpy import load_file

    return load_file(path)


@pytest.fixture(scope="module")
def minilm():
    directory = minilm_directory()
    loaded = model_source.resolve(directory).load()
    config, params, vocab_path = loaded.config, loaded.params, loaded.source.vocab_path
    return directory, config, params, load_tokenizer(vocab_path)


@pytest.fixture(scope="module")
def random_model(tmp_path_factory):
    """A tiny random BertForPreTraining and its HF export (BertForPreTraining layout)."""
    directory = tmp_path_factory.mktemp("random")
    config, params, tokenizer = tiny_random_model(directory)
    exported = str(directory / "hf")
    model_writers.export_huggingface(config, params, tokenizer, exported)
    return config, params, tokenizer, exported


# joined: the query, key and value projections as one product (dense.joined_projections,
# precision.projections=joined, opt-in for a GPU), here forced on the CPU.
@pytest.mark.parametrize("joined", [False, True], ids=["apart", "joined"])
def test_minilm_every_layer_matches_transformers(minilm, joined, monkeypatch):
    import jax
    import torch
    import transformers

    from bert_jax.models import bert

    if joined:
        monkeypatch.setattr(bert, "joins_projections", lambda precision: True)
        jax.clear_caches()  # no step traced before with the layers apart may be reused
    directory, config, params, tokenizer = minilm
    batch = tokenizer.encode_for_model(SENTENCES, 64)
    ours = inference.encode(params["bert"], batch["input_ids"], batch["segment_ids"],
                            batch["input_mask"], config=config,
                            layers=tuple(range(config.num_layers + 1)))
    hidden, pooled = np.asarray(ours["hidden_states"]), np.asarray(ours["pooled"])
    model = transformers.BertModel.from_pretrained(directory).eval()
    with torch.no_grad():
        reference = model(**torch_inputs(batch), output_hidden_states=True)
        exact = model.double()(**torch_inputs(batch), output_hidden_states=True)
    assert len(reference.hidden_states) == len(hidden) == 7
    real = batch["input_mask"].astype(bool)
    assert not real.all()  # the batch is padded
    errors = [np.abs(hidden[i] - theirs.numpy())[real].max()
              for i, theirs in enumerate(reference.hidden_states)]
    pooled_error = np.abs(pooled - reference.pooler_output.numpy()).max()
    print(f"max abs difference to transformers per layer {errors}, pooled {pooled_error:.2e}")
    # Two float32 implementations of the same layers: ENCODER_STEPS steps of each output's
    # scale (tolerances.py).
    for i, theirs in enumerate(reference.hidden_states):
        assert_close(hidden[i][real], theirs.numpy()[real], ENCODER_STEPS, err_msg=f"layer {i}")
    assert_close(pooled, reference.pooler_output.numpy(), ENCODER_STEPS, err_msg="pooled")
    # Padding positions are ill-conditioned in float32 (transformers' own eager and sdpa
    # attention differ there by ~2e-5), so they are checked against a float64 run instead:
    # our float32 error there must be no worse than transformers' float32 error (or, where
    # theirs is small, than ENCODER_STEPS steps of the layer's scale).
    for i, (theirs, truth) in enumerate(zip(reference.hidden_states, exact.hidden_states)):
        our_error = np.abs(hidden[i] - truth.numpy()).max()
        their_error = np.abs(theirs.numpy() - truth.numpy()).max()
        assert our_error <= max(2 * their_error, float32_steps(ENCODER_STEPS, truth.numpy())), (
            i, our_error, their_error)


def test_export_matches_transformers_pretraining_heads(random_model):
    import torch
    import transformers

    config, params, tokenizer, exported = random_model
    model, info = transformers.BertForPreTraining.from_pretrained(
        exported, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    batch = tokenizer.encode_for_model(
        ["the man went to the store .", ("he bought a gallon", "of milk !")], 16, pad_to_max=True)
    positions = np.array([[1, 3, 5], [2, 4, 9]], np.int32)
    from bert_jax.models.bert import BertForPreTraining
    mlm_logits, nsp_logits = BertForPreTraining(config).apply(
        {"params": params}, batch["input_ids"], batch["segment_ids"], batch["input_mask"],
        positions)
    with torch.no_grad():
        output = model.eval()(**torch_inputs(batch))
    reference_mlm = np.take_along_axis(output.prediction_logits.numpy(), positions[..., None], 1)
    mlm_error = np.abs(np.asarray(mlm_logits) - reference_mlm).max()
    nsp_error = np.abs(np.asarray(nsp_logits) - output.seq_relationship_logits.numpy()).max()
    print(f"max abs difference: MLM logits {mlm_error:.2e}, NSP logits {nsp_error:.2e}")
    # Two float32 implementations: ENCODER_STEPS steps of each logit's scale (tolerances.py).
    assert_close(mlm_logits, reference_mlm, ENCODER_STEPS, err_msg="MLM logits")
    assert_close(nsp_logits, output.seq_relationship_logits.numpy(), ENCODER_STEPS,
                 err_msg="NSP logits")
    assert np.abs(reference_mlm).max() > 1 and np.abs(nsp_logits).max() > 0.1  # not trivial


@pytest.mark.parametrize("architecture", ["BertModel", "BertForMaskedLM"])
def test_export_loads_cleanly_into_each_architecture(random_model, tmp_path, architecture):
    import transformers

    config, params, tokenizer, full_export = random_model
    destination = str(tmp_path / architecture)
    model_writers.export_huggingface(config, params, tokenizer, destination, architecture)
    model_class = getattr(transformers, architecture)
    model, info = model_class.from_pretrained(destination, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    # The full pre-training export also fills these classes: nothing they need is missing.
    _, info = model_class.from_pretrained(full_export, output_loading_info=True)
    assert not info["missing_keys"], info
    # What transformers itself saves for this class reads back as exactly those parts.
    model.save_pretrained(str(tmp_path / "resaved"))
    reread = model_source.resolve(str(tmp_path / "resaved")).load().params
    expected = dict(params)
    if architecture == "BertModel":
        del expected["mlm_head"], expected["nsp_head"]
    else:
        del expected["nsp_head"]
        expected["bert"] = {k: v for k, v in params["bert"].items() if k != "pooler"}
    assert_trees_identical(reread, expected)


def test_minilm_round_trip_through_bert_jax_is_bit_identical(minilm, tmp_path):
    from bert_jax.cli import main

    directory = minilm[0]
    assert main(["convert", directory, str(tmp_path / "bj")]) == 0
    assert main(["convert", str(tmp_path / "bj"), str(tmp_path / "hf"), "--to", "hf"]) == 0
    original = read_safetensors(os.path.join(directory, "model.safetensors"))
    original.pop("embeddings.position_ids")  # a buffer, not a parameter; transformers rebuilds it
    written = read_safetensors(str(tmp_path / "hf" / "model.safetensors"))
    assert sorted(written) == sorted(original)
    for name, tensor in original.items():
        assert written[name].dtype == tensor.dtype and np.array_equal(written[name], tensor), name
    with open(os.path.join(directory, "config.json")) as file:
        original_config = json.load(file)
    with open(tmp_path / "hf" / "config.json") as file:
        written_config = json.load(file)
    for key in ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                "vocab_size", "layer_norm_eps", "max_position_embeddings", "type_vocab_size"):
        assert written_config[key] == original_config[key], key


def test_bert_jax_round_trip_through_huggingface_is_bit_identical(random_model, tmp_path):
    config, params, tokenizer, exported = random_model
    loaded = model_source.resolve(exported).load()
    reread_config, reread, vocab_path = loaded.config, loaded.params, loaded.source.vocab_path
    assert reread_config == config
    assert_trees_identical(reread, params)
    assert load_tokenizer(vocab_path).tokens == tokenizer.tokens
    model_writers.save_model(config, params, tokenizer, str(tmp_path / "bj"))
    loaded = model_source.resolve(str(tmp_path / "bj")).load()
    saved_config, saved = loaded.config, loaded.params
    assert saved_config == config
    assert_trees_identical(saved, params)
    wrong = dict(config.to_dict(), mlp_dim=2 * config.mlp_dim)
    (tmp_path / "bj" / "model_config.json").write_text(json.dumps(wrong))
    with pytest.raises(UserError, match="do not fit its model config.*layer_0/mlp/intermediate"):
        model_source.resolve(str(tmp_path / "bj")).load()


def _original_tf_name(hf_name: str) -> tuple[str, bool]:
    """The google-research/bert variable name of an HF tensor, and whether to transpose.

    Written here independently of bert_jax/interop, from modeling.py / run_pretraining.py.
    """
    name = hf_name.replace("encoder.layer.", "encoder.layer_").replace(".", "/")
    if name.startswith("bert/embeddings/") and name.endswith("_embeddings/weight"):
        return name[:-len("/weight")], False
    special = {"cls/predictions/bias": "cls/predictions/output_bias",
               "cls/seq_relationship/weight": "cls/seq_relationship/output_weights",
               "cls/seq_relationship/bias": "cls/seq_relationship/output_bias"}
    if name in special:
        return special[name], False
    if "LayerNorm" in name:
        return name.replace("/weight", "/gamma").replace("/bias", "/beta"), False
    if name.endswith("/weight"):
        return name[:-len("/weight")] + "/kernel", True
    return name, False


def test_original_tf_checkpoint_imports_the_same_weights(random_model, tmp_path):
    tf = pytest.importorskip("tensorflow")
    config, params, tokenizer, exported = random_model
    variables = {}
    for hf_name, tensor in read_safetensors(os.path.join(exported, "model.safetensors")).items():
        name, transpose = _original_tf_name(hf_name)
        variables[name] = tensor.T if transpose else tensor
    # A run_pretraining.py checkpoint also holds the step and Adam moments: not weights.
    variables["global_step"] = np.array(1000, np.int64)
    variables["bert/pooler/dense/kernel/adam_m"] = np.zeros((4,), np.float32)
    names = sorted(variables)
    tf.raw_ops.SaveV2(prefix=str(tmp_path / "bert_model.ckpt"), tensor_names=names,
                      shape_and_slices=[""] * len(names),
                      tensors=[tf.constant(variables[name]) for name in names])
    with open(os.path.join(exported, "config.json")) as file:
        hf_config = json.load(file)
    original_keys = ("attention_probs_dropout_prob", "hidden_act", "hidden_dropout_prob",
                     "hidden_size", "initializer_range", "intermediate_size",
                     "max_position_embeddings", "num_attention_heads", "num_hidden_layers",
                     "type_vocab_size", "vocab_size")
    with open(tmp_path / "bert_config.json", "w") as file:
        json.dump({key: hf_config[key] for key in original_keys}, file)
    write_vocab(tmp_path)
    loaded = model_source.resolve(str(tmp_path)).load()
    tf_config, tf_params, vocab_path = loaded.config, loaded.params, loaded.source.vocab_path
    assert tf_config == config and vocab_path == str(tmp_path / "vocab.txt")
    assert_trees_identical(tf_params, params)


def test_training_run_directories_read_latest_or_chosen_step(random_model, tmp_path):
    import jax
    import orbax.checkpoint as ocp
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    config, params, tokenizer, _ = random_model
    run = tmp_path / "run"
    run.mkdir()
    (run / "model_config.json").write_text(json.dumps(config.to_dict()))
    write_vocab(run)
    mesh = Mesh(np.array(jax.devices()), ("data",))
    # Saved as arrays spread over 8 devices, as a training run does; read back to the host.
    sharded = lambda tree: jax.tree.map(  # noqa: E731
        lambda value: jax.device_put(value, NamedSharding(mesh, PartitionSpec())), tree)
    later = jax.tree.map(lambda value: value + 1, params)
    with ocp.CheckpointManager(str(run / "checkpoints"),
                               item_names=("params", "meta")) as manager:
        for step, tree in ((1, params), (3, later)):
            manager.save(step, args=ocp.args.Composite(
                params=ocp.args.StandardSave(sharded(tree)),
                meta=ocp.args.JsonSave({"step": step})))
        manager.wait_until_finished()
    latest = model_source.resolve(str(run)).load().params
    assert_trees_identical(latest, jax.tree.map(np.asarray, later))
    loaded = model_source.resolve(str(run / "checkpoints" / "1")).load()
    step_config, first, vocab_path = loaded.config, loaded.params, loaded.source.vocab_path
    assert step_config == config and vocab_path == str(run / "vocab.txt")
    assert_trees_identical(first, params)
    with pytest.raises(UserError, match="inside the training run"):
        model_writers.export_huggingface(config, params, tokenizer, str(run / "exported"))
    assert not (run / "exported").exists()


def test_import_errors_name_the_problem(random_model, tmp_path):
    from safetensors.numpy import save_file

    config, params, tokenizer, exported = random_model
    tensors = read_safetensors(os.path.join(exported, "model.safetensors"))
    with open(os.path.join(exported, "config.json")) as file:
        hf_config = json.load(file)
    cases = {
        "unknown": ({**tensors, "classifier.weight": np.zeros((2, 128), np.float32)}, hf_config,
                    r"unknown tensor\(s\) classifier.weight"),
        "missing": ({k: v for k, v in tensors.items() if "layer.1.output.dense" not in k},
                    hf_config, r"missing tensor\(s\) bert.encoder.layer.1.output.dense.weight"),
        "relu": (tensors, {**hf_config, "hidden_act": "relu"}, "hidden_act is 'relu'"),
        "shape": (tensors, {**hf_config, "intermediate_size": 256}, "has shape"),
    }
    for name, (case_tensors, case_config, message) in cases.items():
        directory = tmp_path / name
        directory.mkdir()
        save_file(case_tensors, str(directory / "model.safetensors"))
        (directory / "config.json").write_text(json.dumps(case_config))
        with pytest.raises(UserError, match=message):
            model_source.resolve(str(directory)).load()


def test_weights_holding_nan_are_refused_naming_the_tensor_and_file(random_model, tmp_path):
    import re
    import shutil

    from bert_jax.cli import main

    pytest.importorskip("tensorflow")
    config, params, tokenizer, _ = random_model
    damaged = {**params, "bert": {**params["bert"], "embeddings": {
        **params["bert"]["embeddings"],
        "word_embeddings": {"embedding": np.full_like(
            params["bert"]["embeddings"]["word_embeddings"]["embedding"], np.nan)}}}}
    damaged["nsp_head"] = {**params["nsp_head"], "bias": np.array([np.inf, 0], np.float32)}
    hf, ours, tf_checkpoint = (str(tmp_path / name) for name in ("hf", "bert-jax", "tf"))
    model_writers.export_huggingface(config, damaged, tokenizer, hf)
    model_writers.save_model(config, damaged, tokenizer, ours)
    # One step of a training run: the run's model config and vocabulary, the step's params.
    run = tmp_path / "run"
    (run / "checkpoints" / "7").mkdir(parents=True)
    shutil.copytree(os.path.join(ours, "params"), run / "checkpoints" / "7" / "params")
    for name in ("model_config.json", "vocab.txt"):
        shutil.copy(os.path.join(ours, name), run / name)
    size = config.vocab_size * config.hidden_dim
    words = (rf"bert/embeddings/word_embeddings/embedding \({size} of {size} values\), "
             r"nsp_head/bias \(1 of 2 values\)")
    model_writers.export_tf_checkpoint(config, damaged, tokenizer, tf_checkpoint)
    sources = {hf: os.path.join(hf, "model.safetensors"), ours: os.path.join(ours, "params"),
               str(run): str(run / "checkpoints" / "7" / "params"),
               tf_checkpoint: os.path.join(tf_checkpoint, "bert_model.ckpt")}
    for source, weights in sources.items():
        with pytest.raises(UserError, match=rf"^{re.escape(weights)}: the weights hold NaN or "
                                            rf"infinite values: {words}"):
            model_source.resolve(source).load()
    # The commands refuse it too (init_from reads through the same ModelSource.load).
    (tmp_path / "in.txt").write_text("the man went to the store\n")
    assert main(["embed", "--model", ours, "--input", str(tmp_path / "in.txt"),
                 "--output", str(tmp_path / "out.npy")]) == 2
    assert not (tmp_path / "out.npy").exists()
