"""The written-out Threefry-2x32 equals JAX's primitive bit for bit, and compiles without a loop."""

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.random import threefry2x32_p

from bert_jax.models.layers.dropout import keep_bits
from bert_jax.models.layers.threefry import threefry2x32

WORD = np.uint32


def test_the_known_answers_of_random123():
    # Random123's kat_vectors for threefry2x32_20: (key, counter) -> block.
    cases = [((0, 0), (0, 0), (0x6B200159, 0x99BA4EFE)),
             ((0xFFFFFFFF,) * 2, (0xFFFFFFFF,) * 2, (0x1CB996FC, 0xBB002BE7)),
             ((0x13198A2E, 0x03707344), (0x243F6A88, 0x85A308D3), (0xC4923A9C, 0x483DF7A0))]
    for key, counter, expected in cases:
        block = threefry2x32(*(jnp.asarray(WORD(word)) for word in (*key, *counter)))
        assert tuple(int(word) for word in block) == expected


def test_equals_the_primitive_on_random_and_extreme_words():
    draws = np.random.default_rng(0).integers(0, 2**32, size=(2, 4096), dtype=np.uint64)
    counters = draws.astype(WORD)
    counters[:, :4] = [[0, 1, 0xFFFFFFFF, 0x80000000]] * 2  # carries and the top bit
    for key0, key1 in [(0, 0), (0xFFFFFFFF, 1), (0x13198A2E, 0x03707344)]:
        keys = (jnp.asarray(WORD(key0)), jnp.asarray(WORD(key1)))
        # Both jitted: the primitive as the CPU lowers it (a loop), ours as elementwise code.
        ours = jax.jit(threefry2x32)(*keys, counters[0], counters[1])
        theirs = jax.jit(threefry2x32_p.bind)(*keys, counters[0], counters[1])
        for our_word, their_word in zip(ours, theirs):
            np.testing.assert_array_equal(np.asarray(our_word), np.asarray(their_word))


def test_dropouts_mask_compiles_to_loop_free_code():
    # The primitive's CPU lowering is a five-trip while loop whose body LLVM compiled in
    # seconds; written out, the mask is elementwise code with no loop in the program.
    shape, key = (8, 12, 128, 128), jax.random.key_data(jax.random.PRNGKey(0))
    text = jax.jit(lambda key: keep_bits(key, shape, 58982)).lower(key).compile().as_text()
    assert " while(" not in text
