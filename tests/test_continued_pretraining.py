"""`bert-jax pretrain --model M --text FILE --workdir W --steps N`: a transformers directory of
either family continued on a text file, end to end (continued_pretraining.py).

What would fail if the command were wrong: the held-out loss of every evaluation in
W/eval_results.json (steps 0..N, finite, a resumed run reporting them all), the shards made
once (a rerun reuses them, other text is refused), the weights trained from the model's own
(not fresh ones) and exported to a directory transformers loads with logits equal to
bert-jax's (5e-5: tests/test_modernbert.py's bound for one set of weights in two frameworks,
float32 sums in different orders), and a run stopped half-way and continued ending with the
weights of the run never stopped (bitwise: the same programs on the same data).
"""

import json
import os

import numpy as np
import pytest
from interop_helpers import WORDS, write_vocab
from modernbert_helpers import modernbert_directory

from bert_jax.cli import main
from bert_jax.errors import UserError
from bert_jax.interop import model_source
from bert_jax.models.families import family_of
from bert_jax.tasks.continued_pretraining import continue_pretraining

# A checkpoint at the last step only (every run saves its last): a few seconds less a step.
SMALL = ["--config.data.seq_len=32", "--config.batch_size=8", "--config.eval.batch_size=8",
         "--config.checkpoint.every_steps=100", "--no-progress"]
SENTENCES = ["The quick brown fox jumps over the lazy dog.",
             "Paris is the capital of France, and Berlin is the capital of Germany.",
             "A masked language model predicts the words that were hidden from it."]


def _text(path, sentences, documents: int = 40) -> str:
    """`documents` documents of three sentences each (create-data's bert format)."""
    path.write_text("".join("\n".join(sentences[(d + k) % len(sentences)] for k in range(3))
                            + "\n\n" for d in range(documents)), encoding="utf-8")
    return str(path)


def _bert_directory(directory) -> str:
    """A random transformers BertForMaskedLM over interop_helpers' WordPiece vocabulary."""
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("torch")
    os.makedirs(directory)
    vocab_size = len(open(write_vocab(directory), encoding="utf-8").read().split())
    config = transformers.BertConfig(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2,
                                     num_attention_heads=2, intermediate_size=48,
                                     max_position_embeddings=64)
    transformers.BertForMaskedLM(config).save_pretrained(str(directory))
    return str(directory)


def _exported_logits_match(workdir, exported, original_directory, ids) -> None:
    """The export loads in transformers without missing or unexpected weights and gives
    bert-jax's logits; the weights moved from the starting model's."""
    import torch
    import transformers

    assert main(["convert", str(workdir), str(exported), "--to", "hf"]) == 0
    architecture = json.load(open(os.path.join(exported, "config.json")))["architectures"][0]
    model, info = getattr(transformers, architecture).from_pretrained(
        str(exported), output_loading_info=True, attn_implementation="eager")
    assert architecture.endswith("ForMaskedLM")
    assert not info["missing_keys"] and not info["unexpected_keys"]
    source = model_source.in_directory(str(workdir))
    config, params = source.config(), source.load().params
    original = model_source.in_directory(original_directory).load().params
    key = family_of(config).encoder_key
    moved = [np.abs(np.asarray(a) - np.asarray(b)).max() for a, b in zip(
        jax_leaves(params[key]), jax_leaves(original[key]))]
    assert max(moved) > 0
    ids = np.array([ids], np.int32)
    positions = np.arange(ids.shape[1], dtype=np.int32)[None]
    ours = family_of(config).masked_lm_model(config).apply(
        {"params": params}, ids, np.zeros_like(ids), np.ones_like(ids), positions)
    with torch.no_grad():
        theirs = model.eval()(input_ids=torch.tensor(ids, dtype=torch.long)).logits.numpy()
    assert np.abs(np.asarray(ours) - theirs).max() < 5e-5


def jax_leaves(tree):
    import jax
    return jax.tree_util.tree_leaves(tree)


def _evaluations(workdir) -> list[dict]:
    with open(os.path.join(workdir, "eval_results.json"), encoding="utf-8") as file:
        return json.load(file)["evaluations"]


def test_a_modernbert_directory_continued_on_text_reports_held_out_loss_and_exports(
        tmp_path, capsys):
    _, directory = modernbert_directory(tmp_path / "hf", max_position_embeddings=64)
    text = _text(tmp_path / "corpus.txt", SENTENCES)
    workdir = tmp_path / "run"
    command = ["pretrain", "--model", directory, "--text", text, "--workdir", str(workdir),
               "--steps", "3", *SMALL]
    assert main(command) == 0
    out = capsys.readouterr().out
    assert f"bert-jax convert {workdir} {workdir}_hf --to hf" in out
    evaluations = _evaluations(workdir)
    assert [entry["step"] for entry in evaluations] == [0, 1, 2, 3]
    assert all(np.isfinite(entry["mlm_loss"]) for entry in evaluations)
    run_config = json.load(open(workdir / "run_config.json"))
    assert (run_config["objective"], run_config["data"]["masking_rate"]) == ("mlm", 0.3)
    assert run_config["optimizer"]["name"] == "stable_adamw"
    assert run_config["model"]["local_attention"] == 8  # the model's own, not a preset's
    record = workdir / "data" / "text_data.json"
    made = os.stat(record).st_mtime_ns
    assert main(command) == 0  # finished: says so, the shards are reused as they are
    assert "reusing the shards" in capsys.readouterr().out
    assert os.stat(record).st_mtime_ns == made
    _exported_logits_match(workdir, tmp_path / "exported", directory,
                           [604, 40, 41, 42, 43, 605])


def test_a_bert_directory_continued_on_text_exports_what_it_trained(tmp_path):
    directory = _bert_directory(tmp_path / "bert")
    sentences = [" ".join(WORDS[start:start + 8]) for start in range(0, 24, 8)]
    text = _text(tmp_path / "corpus.txt", sentences)
    workdir = tmp_path / "run"
    assert main(["pretrain", "--model", directory, "--text", text, "--workdir",
                 str(workdir), "--tokens", "512", *SMALL]) == 0  # 512 / (8 x 32): 2 steps
    assert [entry["step"] for entry in _evaluations(workdir)] == [0, 1, 2]
    run_config = json.load(open(workdir / "run_config.json"))
    assert (run_config["data"]["masking_rate"], run_config["optimizer"]["name"]) == (
        0.15, "adamw")
    _exported_logits_match(workdir, tmp_path / "exported", directory, [2, 5, 6, 7, 8, 3])


def test_a_eurobert_directory_continued_on_text_exports_what_it_trained(tmp_path):
    """The third family through the same command: EuroBERT's recipe (10% masking, AdamW) on
    its Llama-3-style tokenizer (BOS 600, EOS 601 in the fixture)."""
    from eurobert_helpers import eurobert_directory

    _, directory = eurobert_directory(tmp_path / "hf", max_position_embeddings=64)
    text = _text(tmp_path / "corpus.txt", SENTENCES)
    workdir = tmp_path / "run"
    assert main(["pretrain", "--model", directory, "--text", text, "--workdir", str(workdir),
                 "--steps", "2", *SMALL]) == 0
    assert [entry["step"] for entry in _evaluations(workdir)] == [0, 1, 2]
    run_config = json.load(open(workdir / "run_config.json"))
    assert (run_config["model"]["family"], run_config["data"]["masking_rate"],
            run_config["optimizer"]["beta2"]) == ("eurobert", 0.1, 0.95)
    _exported_logits_match(workdir, tmp_path / "exported", directory,
                           [600, 40, 41, 42, 43, 601])


def test_a_run_stopped_half_way_and_continued_is_the_run_never_stopped(tmp_path):
    """The Python call the command makes: 4 steps at once, and 2 then the rest."""
    _, directory = modernbert_directory(tmp_path / "hf", max_position_embeddings=64)
    text = _text(tmp_path / "corpus.txt", SENTENCES)
    overrides = [o for o in SMALL if o.startswith("--config.")]
    quiet = dict(show_progress=False, log=lambda *_, **__: None)
    whole = continue_pretraining(directory, [text], str(tmp_path / "whole"), steps=4,
                                 overrides=overrides, **quiet)
    first = continue_pretraining(directory, [text], str(tmp_path / "parts"), steps=4,
                                 overrides=overrides + ["--config.num_train_steps=2"], **quiet)
    assert first["step"] == 2
    rest = continue_pretraining(directory, [text], str(tmp_path / "parts"), steps=4,
                                overrides=overrides, **quiet)
    assert rest["evaluations"] == whole["evaluations"]  # 0..4, the first ones restored
    params = [model_source.in_directory(str(tmp_path / name)).load().params
              for name in ("whole", "parts")]
    for ours, theirs in zip(jax_leaves(params[0]), jax_leaves(params[1])):
        np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs))
    with pytest.raises(UserError, match="holds shards made with"):
        continue_pretraining(directory, [_text(tmp_path / "other.txt", SENTENCES[:2])],
                             str(tmp_path / "parts"), steps=4, overrides=overrides, **quiet)


def test_flags_that_need_the_model_are_refused_without_it(capsys):
    assert main(["pretrain", "--text", "a.txt", "--workdir", "w"]) != 0
    assert "--text: only with --model" in capsys.readouterr().err
    assert main(["pretrain", "--model", "m", "--workdir", "w"]) != 0
    assert "give --text FILE" in capsys.readouterr().err


def test_help_names_every_shipped_config_and_what_init_from_takes(capsys):
    from bert_jax.configs import summaries

    with pytest.raises(SystemExit):
        main(["pretrain", "--help"])
    text = capsys.readouterr().out
    for name, summary in summaries().items():
        assert f"  {name:<22}{summary}" in text
    assert {"modernbert_continue", "bert_continue", "modernbert_demo"} <= set(summaries())
    assert "a Hugging Face directory or Hub name (BERT or" in text
