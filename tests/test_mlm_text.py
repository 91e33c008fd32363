"""Domain MLM data: documents, packing, and the statistics of the dynamic masks."""

import numpy as np
import pytest

from bert_jax.errors import UserError
from input_pipeline.tasks.mlm_text import load_masked_blocks, pack_blocks, read_documents
from input_pipeline.tokenization import load_tokenizer
from tests.interop_helpers import WORDS, write_vocab


@pytest.fixture()
def tokenizer(tmp_path):
    return load_tokenizer(write_vocab(tmp_path))


def test_documents_by_line_or_by_blank_line(tmp_path):
    by_line = tmp_path / "lines.txt"
    by_line.write_text("the man went\n\nto store\nhe bought\n", encoding="utf-8")
    assert read_documents(str(by_line)) == ["the man went", "to store he bought"]
    by_line.write_text("the man went\nto store\n", encoding="utf-8")
    assert read_documents(str(by_line)) == ["the man went", "to store"]
    by_line.write_text("\n  \n", encoding="utf-8")
    with pytest.raises(UserError, match="lines.txt: no text"):
        read_documents(str(by_line))
    with pytest.raises(UserError, match="missing.txt: text file not found"):
        read_documents(str(tmp_path / "missing.txt"))


def test_packing_keeps_every_token_in_order(tokenizer):
    documents = ["the man went to store", "he bought a gallon of milk", "dog"]
    blocks = pack_blocks(tokenizer, documents, max_seq_len=6)
    ids = [tokenizer.token_to_id(token) for token in
           "the man went to store [SEP] he bought a gallon of milk [SEP] dog".split()]
    assert (blocks[:, 0] == tokenizer.cls_id).all()
    body = blocks[:, 1:-1].reshape(-1)
    np.testing.assert_array_equal(body[:len(ids)], ids)
    assert body[len(ids)] == tokenizer.sep_id  # the last block's own [SEP], then padding
    assert (body[len(ids) + 1:] == tokenizer.pad_id).all()
    assert blocks.shape == (4, 6)  # 14 tokens in blocks of 4
    last_real = (blocks != tokenizer.pad_id).sum(axis=1) - 1
    assert (blocks[np.arange(4), last_real] == tokenizer.sep_id).all()
    np.testing.assert_array_equal(blocks[-1], [tokenizer.cls_id, ids[-2], ids[-1],
                                               tokenizer.sep_id, 0, 0])


def test_masking_statistics_against_numpy_expectations(tmp_path, tokenizer):
    rng = np.random.default_rng(0)
    text = tmp_path / "domain.txt"
    vocabulary = [word for word in WORDS if not word.startswith("##")]
    text.write_text("\n".join(" ".join(rng.choice(vocabulary, 40)) for _ in range(500)),
                    encoding="utf-8")
    data = load_masked_blocks(str(text), tokenizer, max_seq_len=64, seed=3)
    first, second = data.epoch(0), data.epoch(1)
    real = data.input_mask > 0
    candidates = real & ~np.isin(data.blocks, [tokenizer.cls_id, tokenizer.sep_id])
    # Exactly min(P, max(1, round(0.15 * real tokens))) positions a block, all candidates.
    expected_counts = np.minimum(data.max_predictions,
                                 np.maximum(1, np.round(real.sum(1) * 0.15))).astype(int)
    weights = first["masked_lm_weights"] > 0
    np.testing.assert_array_equal(weights.sum(1), expected_counts)
    rows = np.nonzero(weights)[0]
    positions = first["masked_lm_positions"][weights]
    assert candidates[rows, positions].all()
    np.testing.assert_array_equal(first["masked_lm_ids"][weights], data.blocks[rows, positions])
    # 80% [MASK], 10% kept, 10% random (a random token equals the original 1 time in V).
    count = weights.sum()
    new = first["input_ids"][rows, positions]
    vocab_size = tokenizer.vocab_size
    for fraction, expected in [((new == tokenizer.mask_id).mean(), 0.8 + 0.1 / vocab_size),
                               ((new == data.blocks[rows, positions]).mean(),
                                0.1 + 0.1 / vocab_size)]:
        assert abs(fraction - expected) < 4 * np.sqrt(expected * (1 - expected) / count)
    # Nothing else changes.
    untouched = np.ones_like(real)
    untouched[rows, positions] = False
    np.testing.assert_array_equal(first["input_ids"][untouched], data.blocks[untouched])
    # Positions uniform over the candidates: the share of masked tokens in the first and the
    # second half of the blocks is one half within four standard deviations.
    first_half = (positions < 32).sum()
    candidate_share = candidates[:, :32].sum() / candidates.sum()
    assert abs(first_half / count - candidate_share) < 4 * np.sqrt(0.25 / count)
    # Dynamic: another epoch, other masks; the same epoch again, the same masks.
    assert (second["masked_lm_positions"] != first["masked_lm_positions"]).mean() > 0.5
    np.testing.assert_array_equal(data.epoch(0)["input_ids"], first["input_ids"])
    # Held out: fixed by the seed, unlike every epoch's.
    heldout = data.heldout()
    np.testing.assert_array_equal(heldout["input_ids"], data.heldout()["input_ids"])
    assert (heldout["masked_lm_positions"] != first["masked_lm_positions"]).mean() > 0.5
    reseeded = load_masked_blocks(str(text), tokenizer, max_seq_len=64, seed=4)
    assert (reseeded.heldout()["masked_lm_positions"] != heldout["masked_lm_positions"]).any()


def test_shard_directories_read_as_blocks_packed_or_not(tmp_path):
    """`finetune mlm` on create-data shards: the rows' tokens with their masks undone, and
    packed rows keep their instance and position ids (attention stays in each instance)."""
    import collections

    import jax

    import pipeline_helpers as helpers
    from bert_jax.models.config import Precision
    from bert_jax.models.presets import preset
    from bert_jax.tasks.masked_lm import MaskedLMTask
    from input_pipeline.create_data import create_pretraining_data

    vocab, corpus = helpers.vocabulary_and_corpus(tmp_path, num_documents=20, seed=3)
    tokenizer, loaded = load_tokenizer(vocab), {}
    for name, per_row in (("unpacked", 1), ("packed", 3)):
        output = str(tmp_path / name)
        create_pretraining_data([corpus], vocab, output, num_shards=2, max_seq_len=64,
                                max_predictions=10, dupe_factor=1, seed=1, workers=1,
                                show_progress=False, max_sequences_per_row=per_row)
        loaded[name] = load_masked_blocks(output, tokenizer, max_seq_len=64, seed=0)

    def instances(data):
        rows = data.masked(0)
        return collections.Counter(
            tuple(data.blocks[row][rows["instance_ids"][row] == slot])
            for row in range(len(data)) for slot in range(1, 4)
            if (rows["instance_ids"][row] == slot).any())

    assert instances(loaded["packed"]) == instances(loaded["unpacked"])  # every instance, whole
    assert len(loaded["packed"]) < len(loaded["unpacked"])
    assert not np.isin(loaded["packed"].blocks, [tokenizer.mask_id]).any()  # masks undone
    features = loaded["packed"].masked(0)
    second = features["instance_ids"] == 2
    assert second.any()
    starts = second.argmax(axis=1)[second.any(axis=1)]  # positions restart at each instance
    assert (features["position_ids"][second.any(axis=1), starts] == 0).all()
    with pytest.raises(UserError, match="shards of 64 tokens, but --max-seq-len is 128"):
        load_masked_blocks(str(tmp_path / "packed"), tokenizer, max_seq_len=128, seed=0)

    task = MaskedLMTask(64)  # its batches carry the ids to the model
    config = preset("tiny", vocab_size=tokenizer.vocab_size)
    batch = {name: np.asarray(value[:4]) for name, value in features.items()}
    model = task.build_model(config, Precision())
    params = model.init(jax.random.PRNGKey(0), *task.model_inputs(batch),
                        **task.model_keywords(batch))["params"]
    logits = task.apply(model, params, batch, train=False)
    assert logits.shape == (4, task.max_predictions, tokenizer.vocab_size)
    assert np.isfinite(np.asarray(logits)).all()


def test_a_tokenizer_padding_with_its_sep_keeps_each_blocks_closing_sep(tmp_path):
    """EuroBERT's tokenizer pads with EOS, its [SEP]: the blocks' input masks are those of a
    tokenizer with a [PAD] of its own, each block's closing EOS included."""
    from tokenizer_json_helpers import write_eurobert_tokenizer

    from input_pipeline.tasks.mlm_text import MaskedBlocks, real_tokens
    from input_pipeline.tokenization import load_tokenizer

    tokenizer = load_tokenizer(write_eurobert_tokenizer(str(tmp_path)))
    assert tokenizer.pad_id == tokenizer.sep_id
    documents = ["The quick brown fox jumps over the lazy dog.", "A short one.", "dog"]
    blocks = pack_blocks(tokenizer, documents, max_seq_len=11)
    lengths = [11] * (len(blocks) - 1) + [int(np.flatnonzero(blocks[-1] != tokenizer.pad_id)[-1])
                                          + 2]  # the last block: its ids, then its EOS
    expected = (np.arange(11)[None] < np.array(lengths)[:, None]).astype(np.int32)
    np.testing.assert_array_equal(real_tokens(blocks, tokenizer), expected)
    assert lengths[-1] < 11  # the last block is padded: the case an id test gets wrong
    np.testing.assert_array_equal(MaskedBlocks(blocks, tokenizer, seed=0).input_mask, expected)
