"""Threefry-2x32 (Salmon et al. 2011, 20 rounds), the hash behind `jax.random`, written out.

`jax.random` hashes with the `threefry2x32` primitive. On TPUs and GPUs, JAX lowers it to the
twenty rounds one after another, which XLA fuses into the kernel that consumes the bits. On
the CPU it lowers it to a loop of five trips of four rounds, to keep large programs small; but
XLA's CPU compiler turns that loop's body into kernels that LLVM takes seconds each to compile
(0.5-3.2 s each for the five kernels of a BERT-Base train step's dropout, about half of all
the step's code generation), and each trip writes both words to memory. Written out as here,
the same function is elementwise code fused into its consumer on every platform:
dropout's mask compiles about 12 times faster on the CPU this way, and BERT-Base's train
step in 0.69x the time (`bench/dropout_rng.py`). The bits are the primitive's, bit for bit
(`tests/test_threefry.py`), so a seed draws the same dropout masks as before and a run
saved before continues unchanged.
"""

import jax
import jax.numpy as jnp

Array = jax.Array

# Rotation distances of the rounds, alternating between the two sets every four rounds.
_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_PARITY = 0x1BD11BDA  # the key schedule's third word is key0 ^ key1 ^ this constant


def _rotate_left(word: Array, distance: int) -> Array:
    return (word << jnp.uint32(distance)) | (word >> jnp.uint32(32 - distance))


def threefry2x32(key0: Array, key1: Array, count0: Array, count1: Array) -> tuple[Array, Array]:
    """The two uint32 words of the Threefry-2x32 block of counter (count0, count1) under the
    key (key0, key1): what `jax.extend.random.threefry2x32_p.bind` returns, elementwise over
    the counters' (equal or broadcastable) shapes."""
    schedule = (key0, key1, key0 ^ key1 ^ jnp.uint32(_PARITY))
    word0, word1 = count0 + schedule[0], count1 + schedule[1]
    for group in range(5):  # five groups of four rounds, a key injection after each
        for distance in _ROTATIONS[group % 2]:
            word0 = word0 + word1
            word1 = word0 ^ _rotate_left(word1, distance)
        word0 = word0 + schedule[(group + 1) % 3]
        word1 = word1 + schedule[(group + 2) % 3] + jnp.uint32(group + 1)
    return word0, word1
