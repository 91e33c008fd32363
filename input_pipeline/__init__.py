"""Tokenization, shard creation and tf.data reading: the only package that imports TensorFlow.

Set before any module here imports TensorFlow: its start-up prints "oneDNN custom
operations are on" twice (TF 2.20 loads two libraries that each log it, before logging
is configured, so TF_CPP_MIN_LOG_LEVEL cannot hide it). The pipeline runs no op oneDNN
speeds up (parsing, shuffling, gathers; the model runs in JAX), so it is turned off,
which also silences the lines. Set TF_ENABLE_ONEDNN_OPTS=1 to have it back.
"""

import os

os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

# bert_jax's import hook for TensorFlow (bert_jax/quiet.py: its start-up noise filtered, Keras's
# eager load skipped) is installed before any module here imports it, also where a script
# imports input_pipeline first. The modules here import bert_jax's anyway.
import bert_jax  # noqa: E402,F401
