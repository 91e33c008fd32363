"""What a pre-training config leaves unset comes from its sources: data.seq_len and
data.max_predictions from the shards' manifest, the model's architecture from init_from."""

import json
import os

import pytest
from finetune_helpers import made_up_sentences, tiny_model_directory

from bert_jax.errors import UserError
from bert_jax.run_config import load_run_config
from bert_jax.tasks.pretraining_data import apply_settings, prepare_data, reader_factory

SEQ_LEN, PREDICTIONS = 24, 5  # not the base config's 128 / 20, nor the demo's 64 / 10


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """A tiny saved model (1 layer, hidden 32) and create-data shards made with its vocabulary."""
    from input_pipeline.create_data import create_pretraining_data

    root = tmp_path_factory.mktemp("sources")
    model = tiny_model_directory(root)
    sentences = [sentence for _, sentence in made_up_sentences(120, seed=4)]
    corpus = root / "corpus.txt"  # BERT format: a sentence a line, documents of 6
    corpus.write_text("\n\n".join("\n".join(sentences[start:start + 6])
                                  for start in range(0, len(sentences), 6)) + "\n")
    shards = str(root / "shards")
    create_pretraining_data([str(corpus)], os.path.join(model, "vocab.txt"), shards,
                            num_shards=2, max_seq_len=SEQ_LEN, max_predictions=PREDICTIONS,
                            dupe_factor=2, show_progress=False)
    tiny_file = root / "tiny_heads4.py"  # a file that sets a model field itself
    tiny_file.write_text("from bert_jax.run_config import base_config\n"
                         "def get_config():\n"
                         "    config = base_config('tiny')\n"
                         "    config.model.num_heads = 4\n"
                         "    return config\n")
    return dict(root=root, model=model, shards=shards, tiny_file=str(tiny_file))


def test_unset_lengths_come_from_the_manifest_and_set_ones_must_match(sources):
    data = [f"--config.data.train_files={sources['shards']}",
            f"--config.data.vocab_path={sources['model']}/vocab.txt"]
    config = load_run_config("laptop", data)
    assert (config.data.seq_len, config.data.max_predictions) == (None, None)  # unset
    messages = []
    prepared = prepare_data(config, log=messages.append)
    assert (config.data.seq_len, config.data.max_predictions) == (None, None)  # returned, not set
    assert (prepared.settings["data.seq_len"], prepared.settings["data.max_predictions"]) == (
        SEQ_LEN, PREDICTIONS)
    apply_settings(config, prepared.settings)
    assert (config.data.seq_len, config.data.max_predictions) == (SEQ_LEN, PREDICTIONS)
    assert any("from " in message and "manifest.json" in message for message in messages)
    batch = next(iter(reader_factory(config.data, config.seed)("train", 4, 0, 1)))
    assert batch["input_ids"].shape == (4, SEQ_LEN)
    assert batch["masked_lm_positions"].shape == (4, PREDICTIONS)
    # Set, and the shards disagree: one error naming both values.
    config = load_run_config("laptop", data + ["--config.data.seq_len=64"])
    with pytest.raises(UserError, match=f"max_seq_len={SEQ_LEN}, but 64 was asked for"):
        prepare_data(config)
    # Unset, with nothing to take them from.
    config = load_run_config("laptop", [f"--config.data.vocab_path={sources['model']}/vocab.txt"])
    with pytest.raises(UserError, match="data.seq_len and data.max_predictions unset, and "
                                        "data.train_files is not set"):
        prepare_data(config)
    config = load_run_config("laptop", [f"--config.data.train_files={sources['root']}/no/*"])
    with pytest.raises(UserError, match="no shard files match"):  # not "no manifest"
        prepare_data(config)
    with pytest.raises(UserError, match="expected an integer"):
        load_run_config("laptop", ["--config.data.seq_len=long"])


def test_init_from_adopts_the_source_architecture_and_trains_a_step(sources, tmp_path):
    from bert_jax.interop import model_source, source_kinds
    from bert_jax.training import trainer
    from test_training_support import pretraining

    source = model_source.resolve(sources["model"]).config()
    config = load_run_config("laptop", [  # a 4-layer, hidden-256 preset
        f"--config.init_from={sources['model']}", f"--config.data.train_files={sources['shards']}",
        "--config.batch_size=8", "--config.num_train_steps=1", "--config.model.dropout_rate=0.0"])
    for field in ("vocab_size", "hidden_dim", "num_layers", "num_heads", "mlp_dim",
                  "max_positions", "num_segments"):
        assert config.model[field] == getattr(source, field), field
    assert config.model.dropout_rate == 0.0  # not architecture: the override stands
    result = trainer.train(config, str(tmp_path / "run"), **pretraining(config),
                           show_progress=False, log=lambda *_: None)
    assert result["step"] == 1
    with open(tmp_path / "run" / source_kinds.MODEL_CONFIG) as file:
        saved = json.load(file)
    assert (saved["num_layers"], saved["hidden_dim"]) == (source.num_layers, source.hidden_dim)


def test_init_from_names_every_explicit_conflict_at_once(sources):
    init_from = f"--config.init_from={sources['model']}"
    with pytest.raises(UserError) as raised:
        load_run_config("laptop", [init_from, "--config.model.num_layers=4",
                                   "--config.model.hidden_dim=64", "--config.model.mlp_dim=64"])
    message = str(raised.value)
    assert "model.num_layers is 4, the source's 1" in message
    assert "model.hidden_dim is 64, the source's 32" in message
    assert "mlp_dim" not in message  # set, but equal to the source's: no conflict
    # A value the config file itself sets (tiny's 2 heads -> 4) is explicit too.
    with pytest.raises(UserError, match="model.num_heads is 4, the source's 2$|"
                                        "model.num_heads is 4, the source's 2\\."):
        load_run_config(sources["tiny_file"], [init_from])
    with pytest.raises(UserError, match="model_preset records the preset"):
        load_run_config("laptop", ["--config.model_preset=large"])
