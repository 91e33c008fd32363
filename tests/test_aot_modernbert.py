"""`bert-jax aot` on ModernBERT: the sliding layers' LocalMask is in the compiled step (read
from the splash kernels' grids), and the recipe's projection is steps x the pod's bound."""

import pytest
from aot_helpers import compile_report

from bert_jax.compiler import aot_modernbert, aot_splash

# 3 layers (layer 0 global, 1 and 2 sliding, window 64 tokens a side), rows of 512 tokens:
# 4 key blocks of 128, of which a sliding layer's window reaches 3.
TINY_MODERNBERT = """
from bert_jax.run_config import base_config

def get_config():
    config = base_config("modernbert-tiny")
    config.objective = "mlm"
    config.model.vocab_size = 1024
    config.batch_size = 8
    config.data.seq_len = 512
    config.data.masking_rate = 0.3
    config.num_train_steps = 1000
    return config
"""


def test_splash_holds_the_sliding_window_in_the_compiled_step(tmp_path):
    report, stdout = compile_report(tmp_path, TINY_MODERNBERT, "--topology", "v5e:2x2")
    assert report["attention"].startswith("splash")
    assert report["window"] == 64
    # a wrong mask (full everywhere, or a window the kernel does not hold) fails here
    assert report["splash_masks"] == {"0": {"key_blocks": 4.0, "of": 4},
                                      "1": {"key_blocks": 3.0, "of": 4},
                                      "2": {"key_blocks": 3.0, "of": 4}}
    assert aot_splash.window_key_blocks(64) == 3
    assert ("layers 1, 2: local mask, 3 of 4 key blocks per query block, as the model's "
            "window of 64 tokens a side reaches") in stdout
    # the config's unset fields, then the answer line first ("compiling for ..." is the
    # progress line's, on stderr)
    assert stdout.splitlines()[0].startswith("(unset in")
    assert stdout.splitlines()[1].startswith("v5e:2x2: fits")


def test_recipe_phases_cover_the_papers_token_budget():
    phases = aot_modernbert.PHASES
    assert [phase.tokens for phase in phases] == [1.7e12, 250e9, 50e9]
    # 4,608 rows of 1,024 and 576 of 8,192: the same 4.72M tokens a step, 72 and 9 rows a chip
    assert [phase.rows_per_chip for phase in phases] == [72, 9, 9]
    assert phases[0].steps == pytest.approx(1.7e12 / (4608 * 1024))  # float64 quotient
    assert aot_modernbert.phase_overrides(phases[1], 3) == (
        "--config.batch_size=72", "--config.grad_accum_steps=3")
    with pytest.raises(ValueError, match="do not divide"):
        aot_modernbert.phase_overrides(phases[1], 2)
