"""Masks drawn in tf.data when rows are read: RoBERTa's dynamic masking, and objective mlm's.

`remask` (data.dynamic_masking, objective mlm_nsp): the stored masks are undone first (each
masked position gets its label back), so any shard works, pre-masked or written unmasked
(`--masked-lm-prob 0`). Then, as in the original `create_masked_lm_predictions`:
num_to_predict = min(P, max(1, round(num_tokens * prob))) positions among the real
non-special tokens, chosen uniformly without replacement; 80% become [MASK], 10% keep their
token, 10% a token drawn uniformly from the vocabulary. Its draws come from one seed per batch.

`mask_rows` (objective mlm, `create-data --objective mlm`'s unmasked rows) at the rate of
the step the batch trains (`masking_schedule.py`). How many: of a row's c candidates (real
tokens that are not special: [CLS], [SEP], [PAD], [MASK]), floor(rate x c) plus one more
with probability frac(rate x c), chosen uniformly without replacement. Every candidate is
then masked with probability exactly `rate`, as with transformers' per-token Bernoulli draws
(DataCollatorForLanguageModeling, which ModernBERT trained with), but the count never
exceeds ceil(rate x c) <= ceil(highest rate x seq_len) = the row's P slots (the product is
taken in float64 here and in `MaskingSchedule.prediction_slots`, and IEEE multiplication is
monotone, so the bound is exact: no row ever has a masked token without a slot). A
Bernoulli count has no such bound, and any P that held it almost surely would still need a
rule for the rows it cannot hold. Per row the count is spread over the row's sequences at
random (hypergeometric), not fixed per sequence. Then 80% [MASK], 10% kept, 10% a uniform
random token, as transformers and the original do.

Every draw of `mask_rows` is a hash of (seed, host, epoch, the row's index in the epoch,
position, stream) (splitmix64, counter-based): a row's masks depend only on where it sits in
the data order, never on the batch it lands in, the batch size, tf.data's thread scheduling
or the clock; a resumed run draws exactly the masks of an uninterrupted one.
"""

import tensorflow as tf

_GOLDEN = 0x9E3779B97F4A7C15  # 2^64 / golden ratio: splitmix64's increment
# The draws of one row: its selection keys, rounding, 80/10/10 choice and random tokens.
_SELECT, _ROUND, _REPLACE, _RANDOM_TOKEN = range(4)


def _u64(value) -> tf.Tensor:
    return tf.constant(value, tf.uint64)


def _mix(x: tf.Tensor) -> tf.Tensor:
    """splitmix64's finaliser (Steele et al. 2014): a bijection of uint64 that scrambles
    neighbouring inputs into independent-looking outputs."""
    shift, xor = tf.bitwise.right_shift, tf.bitwise.bitwise_xor
    x = xor(x, shift(x, _u64(30))) * _u64(0xBF58476D1CE4E5B9)
    x = xor(x, shift(x, _u64(27))) * _u64(0x94D049BB133111EB)
    return xor(x, shift(x, _u64(31)))


def _combine(key: tf.Tensor, value: tf.Tensor) -> tf.Tensor:
    """A key for (key, value), uint64 tensors broadcast together; distinct values give
    distinct keys (x -> x * odd + value and _mix are bijections)."""
    return _mix(key * _u64(_GOLDEN) + value)


def _uniform(key: tf.Tensor) -> tf.Tensor:
    """[0, 1) float64 from the 53 high bits of a key."""
    return tf.cast(tf.bitwise.right_shift(key, _u64(11)), tf.float64) * 2.0 ** -53


def row_keys(seed, process_index: int, epochs: tf.Tensor, indices: tf.Tensor) -> tf.Tensor:
    """(B,) uint64: each row's key from the run's seed (an int, or each row's seed (B,)
    int64, a mixture's rows coming from sources of their own seeds), this host, and the
    row's (epoch, index in the epoch) tags (B,) int64."""
    seed = _u64(seed % 2**64) if isinstance(seed, int) else tf.cast(seed, tf.uint64)
    base = _combine(seed, _u64(process_index))
    return _combine(_combine(base, tf.cast(epochs, tf.uint64)), tf.cast(indices, tf.uint64))


def _draw(keys: tf.Tensor, stream: int, columns: tf.Tensor) -> tf.Tensor:
    """Uniform [0, 1) draws of stream `stream` at `columns` (B, K) of rows keyed (B,)."""
    counter = tf.cast(columns, tf.uint64) + _u64(stream << 32)
    return _uniform(_combine(keys[:, None], counter))


def _choose(input_ids, candidate, keys, num_to_predict, max_predictions: int):
    """The `num_to_predict` (B,) candidates with the smallest `keys` (B, T): positions
    (B, P) ascending (0 in unused slots), their weights (B, P) bool and labels (B, P)."""
    keys = tf.where(candidate, keys, tf.cast(2.0, keys.dtype))  # non-candidates sort last
    _, order = tf.math.top_k(-keys, k=max_predictions)  # (B, P): candidates in random order
    rank = tf.range(max_predictions)[None, :]
    chosen = (rank < num_to_predict[:, None]) & tf.gather(candidate, order, batch_dims=1)
    seq_len = tf.shape(input_ids)[1]
    positions = tf.sort(tf.where(chosen, order, seq_len), axis=1)  # chosen first, in order
    weights = positions < seq_len
    positions = tf.where(weights, positions, 0)
    labels = tf.where(weights, tf.gather(input_ids, positions, batch_dims=1), 0)
    return positions, weights, labels


def _apply(batch: dict, input_ids, positions, weights, labels, replacement) -> dict:
    """The batch with `replacement` (B, P) written at the weighted positions, and its
    masked_lm_positions / masked_lm_ids / masked_lm_weights."""
    shape = tf.shape(positions)
    rows = tf.broadcast_to(tf.range(shape[0])[:, None], shape)
    where = tf.stack([rows, positions], axis=-1)  # (B, P, 2)
    new_ids = tf.where(weights, replacement, tf.gather_nd(input_ids, where))
    input_ids = tf.tensor_scatter_nd_update(input_ids, where, new_ids)
    return dict(batch, input_ids=input_ids, masked_lm_positions=positions,
                masked_lm_ids=labels, masked_lm_weights=tf.cast(weights, tf.float32))


def _candidates(input_ids, input_mask, special_ids) -> tf.Tensor:
    candidate = input_mask > 0
    for special in special_ids:
        candidate &= input_ids != special
    return candidate


def unmask(input_ids, positions, labels, weights):
    """input_ids (B, T) with each weighted position (B, P) given back its label (B, P)."""
    rows = tf.broadcast_to(tf.range(tf.shape(positions)[0])[:, None], tf.shape(positions))
    where = tf.stack([rows, positions], axis=-1)  # (B, P, 2)
    current = tf.gather_nd(input_ids, where)
    restored = tf.where(weights > 0, labels, current)
    return tf.tensor_scatter_nd_update(input_ids, where, restored)


def remask(batch: dict, seed, *, vocab_size: int, mask_id: int, special_ids: tuple[int, ...],
           masked_lm_prob: float, max_predictions: int) -> dict:
    """A batch with fresh masks drawn from the stateless `seed` (shape (2,), int64)."""
    input_ids = unmask(batch["input_ids"], batch["masked_lm_positions"],
                       batch["masked_lm_ids"], batch["masked_lm_weights"])
    candidate = _candidates(input_ids, batch["input_mask"], special_ids)
    num_tokens = tf.reduce_sum(tf.cast(batch["input_mask"] > 0, tf.float32), axis=1)  # (B,)
    num_to_predict = tf.minimum(
        max_predictions, tf.maximum(1, tf.cast(tf.round(num_tokens * masked_lm_prob), tf.int32)))
    seeds = tf.random.experimental.stateless_split(tf.cast(seed, tf.int64), 4)
    keys = tf.random.stateless_uniform(tf.shape(input_ids), seeds[0])
    positions, weights, labels = _choose(input_ids, candidate, keys, num_to_predict,
                                         max_predictions)
    shape = tf.shape(positions)
    to_mask = tf.random.stateless_uniform(shape, seeds[1]) < 0.8
    keep = tf.random.stateless_uniform(shape, seeds[2]) < 0.5
    random_ids = tf.random.stateless_uniform(shape, seeds[3], maxval=vocab_size, dtype=tf.int32)
    replacement = tf.where(to_mask, mask_id, tf.where(keep, labels, random_ids))
    return _apply(batch, input_ids, positions, weights, labels, replacement)


def rate_at(step: tf.Tensor, rates: tuple[float, ...], boundaries: tuple[int, ...]) -> tf.Tensor:
    """The schedule's float64 rate at `step` (int64 scalar): `MaskingSchedule.rate_at` in tf."""
    passed = tf.cast(step >= tf.constant(boundaries, tf.int64, shape=[len(boundaries)]),
                     tf.int32)
    return tf.gather(tf.constant(rates, tf.float64), tf.reduce_sum(passed))


def mask_rows(batch: dict, keys: tf.Tensor, rate: tf.Tensor, *, vocab_size: int, mask_id: int,
              special_ids: tuple[int, ...], max_predictions: int) -> dict:
    """Unmasked rows (input_ids, input_mask (B, T)) masked at `rate` (float64 scalar) with the
    draws of their `row_keys` (B,); adds masked_lm_positions / ids (B, P) int32 and
    masked_lm_weights (B, P) float32, P = `max_predictions` (see the module docstring)."""
    input_ids = batch["input_ids"]
    candidate = _candidates(input_ids, batch["input_mask"], special_ids)
    expected = rate * tf.reduce_sum(tf.cast(candidate, tf.float64), axis=1)  # (B,)
    whole = tf.floor(expected)
    extra = _draw(keys, _ROUND, tf.zeros_like(keys[:, None]))[:, 0] < expected - whole
    num_to_predict = tf.minimum(tf.cast(whole, tf.int32) + tf.cast(extra, tf.int32),
                                max_predictions)  # the minimum never binds (docstring)
    columns = tf.broadcast_to(tf.range(tf.shape(input_ids)[1])[None, :], tf.shape(input_ids))
    positions, weights, labels = _choose(input_ids, candidate, _draw(keys, _SELECT, columns),
                                         num_to_predict, max_predictions)
    choice = _draw(keys, _REPLACE, positions)  # (B, P): by position, not by slot
    random_ids = tf.cast(tf.floor(_draw(keys, _RANDOM_TOKEN, positions) * vocab_size), tf.int32)
    replacement = tf.where(choice < 0.8, mask_id, tf.where(choice < 0.9, labels, random_ids))
    return _apply(batch, input_ids, positions, weights, labels, replacement)
