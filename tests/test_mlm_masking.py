"""Objective mlm's masks, drawn when rows are read: the rate, 80/10/10, the schedule, the slots.

Statistics are checked against numpy counts of the rows with 5-sigma binomial bounds: a
correct sampler fails one with probability below 1e-6, and the draws are a fixed function
of the seed, so the test gives the same answer on every run.
"""

import math

import numpy as np
import pytest
import tensorflow as tf

import pipeline_helpers as helpers
from bert_jax.errors import UserError
from input_pipeline import dynamic_masking
from input_pipeline.masking_schedule import MaskingSchedule, parse_schedule
from input_pipeline.reader import PretrainingDataset

SEQ_LEN, PER_ROW, VOCAB = 64, 3, len(helpers.VOCABULARY)
SPECIAL = (helpers.PAD, helpers.CLS, helpers.SEP, helpers.MASK)


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    directory = tmp_path_factory.mktemp("mlm_masking")
    vocab, corpus = helpers.vocabulary_and_corpus(directory, num_documents=200, seed=3)
    return helpers.mlm_shards(directory, "shards", corpus, vocab, SEQ_LEN, PER_ROW, seed=2)


def reader(shards, schedule, batch_size=16, **options):
    return PretrainingDataset([shards], batch_size, SEQ_LEN,
                              schedule.prediction_slots(SEQ_LEN), seed=7, process_index=0,
                              process_count=1, objective="mlm", masking_schedule=schedule,
                              vocab_size=VOCAB, mask_id=helpers.MASK, special_ids=SPECIAL,
                              max_sequences_per_row=PER_ROW, **options)


def candidates(batch) -> np.ndarray:
    """Each row's real non-special tokens: all but each sequence's [CLS] and [SEP] (the
    made-up corpus writes no special token in its text)."""
    return batch["input_mask"].sum(axis=1) - 2 * batch["instance_ids"].max(axis=1)


def five_sigma(count, probability):
    return 5 * math.sqrt(count * probability * (1 - probability))


def test_the_masked_count_80_10_10_and_positions_match_numpy_counts(shards):
    rate = 0.3
    batches = list(reader(shards, MaskingSchedule((rate,)), repeat=False))
    weights = np.concatenate([batch["masked_lm_weights"] for batch in batches])
    counts = weights.sum(axis=1)
    expected = rate * np.concatenate([candidates(batch) for batch in batches])
    assert weights.shape[1] == math.ceil(rate * SEQ_LEN) == 20
    # floor(rate x c), or one more with probability frac(rate x c): never clamped to P.
    assert ((counts == np.floor(expected)) | (counts == np.floor(expected) + 1)).all()
    fraction = expected - np.floor(expected)
    total_bound = 5 * math.sqrt((fraction * (1 - fraction)).sum())
    assert abs(counts.sum() - expected.sum()) <= total_bound
    outcomes, halves = np.zeros(3), np.zeros((2, 2))  # [mask, kept, other]; [half][masked, all]
    for batch in batches:
        rows, slots = np.nonzero(batch["masked_lm_weights"])
        positions = batch["masked_lm_positions"][rows, slots]
        labels = batch["masked_lm_ids"][rows, slots]
        now = batch["input_ids"][rows, positions]
        assert not np.isin(labels, SPECIAL).any()
        assert (batch["input_mask"][rows, positions] == 1).all()
        assert (batch["position_ids"][rows, positions] > 0).all()  # never a [CLS]
        outcomes += [(now == helpers.MASK).sum(), (now == labels).sum(),
                     ((now != labels) & (now != helpers.MASK)).sum()]
        real = batch["input_mask"] > 0
        eligible = real & ~np.isin(batch["input_ids"], [helpers.CLS, helpers.SEP, helpers.PAD])
        eligible[rows, positions] = True  # a masked token shows [MASK] or a random id now
        for half, columns in enumerate((slice(0, SEQ_LEN // 2), slice(SEQ_LEN // 2, None))):
            halves[half] += [(positions < SEQ_LEN // 2).sum() if half == 0
                             else (positions >= SEQ_LEN // 2).sum(), eligible[:, columns].sum()]
    masked = outcomes.sum()
    assert masked == counts.sum()
    # A random token equals [MASK] or the label with probability 1/V each.
    for observed, probability in zip(outcomes, (0.8 + 0.1 / VOCAB, 0.1 + 0.1 / VOCAB,
                                                0.1 * (1 - 2 / VOCAB))):
        assert abs(observed - probability * masked) <= five_sigma(masked, probability)
    # Both halves of a row are masked at the rate (the draws favour no position); the
    # counts within a row are negatively correlated, so the binomial bound is conservative.
    for masked_in_half, eligible_in_half in halves:
        assert abs(masked_in_half - rate * eligible_in_half) <= five_sigma(eligible_in_half,
                                                                             rate)


def test_masks_are_a_function_of_the_row_not_of_the_batch_or_a_restore(shards):
    schedule = MaskingSchedule((0.3,))
    by_eights = reader(shards, schedule, batch_size=8)
    by_fours = reader(shards, schedule, batch_size=4)
    first, second = next(by_eights), next(by_eights)
    fours = [next(by_fours) for _ in range(4)]
    for name in first:
        np.testing.assert_array_equal(np.concatenate([first[name], second[name]]),
                                      np.concatenate([batch[name] for batch in fours]))
    state, expected = by_eights.state(), next(by_eights)
    resumed = reader(shards, schedule, batch_size=8)
    resumed.restore(state)
    for name, value in next(resumed).items():
        np.testing.assert_array_equal(value, expected[name])


def test_the_rate_changes_at_the_schedule_boundaries(shards):
    schedule = parse_schedule(0.3, "2:0.15, 4:0.05")
    assert [schedule.rate_at(step) for step in range(6)] == [0.3, 0.3, 0.15, 0.15, 0.05, 0.05]
    in_graph = [float(dynamic_masking.rate_at(tf.constant(step, tf.int64), schedule.rates,
                                              schedule.boundaries)) for step in range(6)]
    assert in_graph == [schedule.rate_at(step) for step in range(6)]
    assert MaskingSchedule((0.3,)).rate_at(10**9) == 0.3
    plain, warming_up = reader(shards, schedule), reader(shards, schedule)
    plain.seek_step(1)  # as on a resume: the next batch trains step 1
    # A batch-size warm-up: steps before 3 read one micro-batch, later ones two.
    warming_up.seek_step(1, lambda step: 1 if step < 3 else 2, steady_from=3)
    for data, steps in ((plain, [1, 2, 3, 4, 5]), (warming_up, [1, 2, 3, 3, 4, 4, 5, 5])):
        for step in steps:
            batch = next(data)
            expected = schedule.rate_at(step) * candidates(batch)
            counts = batch["masked_lm_weights"].sum(axis=1)
            assert ((counts == np.floor(expected)) | (counts == np.floor(expected) + 1)).all()


@pytest.mark.parametrize("rate, seq_len, slots", [(0.15, 10, 2), (0.07, 100, 8), (1.0, 10, 10)])
def test_no_row_has_more_masked_tokens_than_slots(rate, seq_len, slots):
    """Rows whose every token is a candidate: rate x T = 1.5 (ceil 2); 0.07 x 100 =
    7.000000000000001 in float64, so a count of 8 is possible and P = 8; 10 (every token)."""
    schedule = MaskingSchedule((rate,))
    assert schedule.prediction_slots(seq_len) == slots
    rows = 2000
    batch = {"input_ids": tf.fill([rows, seq_len], 42),
             "input_mask": tf.ones([rows, seq_len], tf.int32)}
    keys = dynamic_masking.row_keys(0, 0, tf.zeros([rows], tf.int64), tf.range(rows,
                                                                               dtype=tf.int64))
    masked = dynamic_masking.mask_rows(batch, keys, tf.constant(rate, tf.float64),
                                       vocab_size=VOCAB, mask_id=helpers.MASK,
                                       special_ids=SPECIAL, max_predictions=slots)
    counts = masked["masked_lm_weights"].numpy().sum(axis=1)
    whole = math.floor(rate * seq_len)
    assert set(counts.tolist()) <= {whole, whole + 1} and counts.max() <= slots
    if rate == 0.15:  # half the rows take the extra one
        assert abs(counts.mean() - 1.5) <= 5 * 0.5 / math.sqrt(rows)


@pytest.mark.parametrize("schedule, message", [
    ("100", "'100' is not STEP:RATE"), ("0:0.2", "step 0 in '0:0.2' must be at least 1"),
    ("5:0.2,5:0.1", "step 5 in '5:0.1' must be at least 1 and above the pair before it"),
    ("5:1.5", "a masking rate must be above 0 and at most 1, got 1.5"),
    ("5:0", "a masking rate must be above 0 and at most 1, got 0.0")])
def test_malformed_schedules_are_refused_by_name(schedule, message):
    with pytest.raises(UserError, match="data.masking_rate_schedule.*" + message):
        parse_schedule(0.3, schedule)
    with pytest.raises(UserError, match="data.masking_rate: a masking rate must be above 0"):
        parse_schedule(0.0, "")
