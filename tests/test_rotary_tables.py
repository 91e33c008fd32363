"""Rotary angles on a CPU (bert_jax/models/layers/rotary.py): the cosines and sines are read from
tables as long as the row instead of evaluated in every fusion that rotates a query or key.
The tables hold the float32 nearest each exact value, so they are within an ulp of what XLA
evaluates (and of torch); a position outside the row reads NaN; accelerators keep evaluating."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from aot_helpers import tpu_abstract_mesh

from bert_jax.models.layers import rotary

HEAD_DIM = 64
# ModernBERT's global and local thetas, EuroBERT's.
THETAS = (160_000.0, 10_000.0, 250_000.0)


def _evaluated(positions, theta):
    """The angles' cosines and sines as XLA evaluates them (the accelerators' form)."""
    frequencies = (positions[..., None].astype(jnp.float32)
                   * rotary.inverse_frequencies(HEAD_DIM, theta))
    angles = jnp.concatenate([frequencies, frequencies], axis=-1)
    return jax.jit(lambda a: (jnp.cos(a), jnp.sin(a)))(angles), np.asarray(angles)


@pytest.mark.parametrize("theta", THETAS)
def test_each_entry_is_the_float32_nearest_the_exact_value(theta):
    cos, sin = rotary.angle_tables(1024, HEAD_DIM, theta)
    _, angles = _evaluated(np.arange(1024, dtype=np.int32), theta)
    rows = (0, 1, 2, 511, 1023)
    for row in rows:  # Python's libm, one float64 angle at a time: exact to well under an ulp
        for column in range(HEAD_DIM):
            angle = float(angles[row, column])
            assert cos[row, column] == np.float32(math.cos(angle))
            assert sin[row, column] == np.float32(math.sin(angle))


@pytest.mark.parametrize("theta", THETAS)
def test_a_cpu_reads_packed_positions_from_the_tables_within_an_ulp_of_xla(theta):
    # Two instances packed in a row: positions restart at the second.
    positions = jnp.asarray(np.concatenate([np.arange(700), np.arange(324)])[None],
                            jnp.int32)
    looked_up = jax.jit(lambda p: rotary.rotary_angles(p, HEAD_DIM, theta))(positions)
    evaluated, _ = _evaluated(positions, theta)
    for table, xla in zip(looked_up, evaluated):
        table, xla = np.asarray(table), np.asarray(xla)
        # The table is within half an ulp of the exact value and XLA's float32 cosine and
        # sine within an ulp of it; an ulp of a value in [-1, 1] is at most 2^-24 x 2.
        bound = 1.5 * np.spacing(np.maximum(np.abs(table), np.abs(xla)))
        assert table.shape == (1, 1024, HEAD_DIM)
        assert np.all(np.abs(table - xla) <= bound), float(np.max(np.abs(table - xla) - bound))


def test_a_position_outside_the_row_reads_nan_not_another_positions_angle():
    cos, sin = jax.jit(lambda p: rotary.rotary_angles(p, HEAD_DIM, 10_000.0))(
        jnp.asarray([[0, 1, 3, -1]], jnp.int32))  # a row of 4: 0 .. 3
    assert not np.isnan(np.asarray(cos)[0, :3]).any()
    assert np.isnan(np.asarray(cos)[0, 3]).all() and np.isnan(np.asarray(sin)[0, 3]).all()


def test_an_accelerator_evaluates_the_angles_where_it_is_traced():
    positions = jnp.zeros((2, 16), jnp.int32)
    on_cpu = str(jax.make_jaxpr(lambda p: rotary.rotary_angles(p, HEAD_DIM, 10_000.0))(
        positions))
    with jax.sharding.use_abstract_mesh(tpu_abstract_mesh()):
        on_tpu = str(jax.make_jaxpr(lambda p: rotary.rotary_angles(p, HEAD_DIM, 10_000.0))(
            positions))
    assert "gather" in on_cpu and "cos" not in on_cpu
    assert "cos" in on_tpu and "gather" not in on_tpu
