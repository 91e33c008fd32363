"""Analytic model FLOPs of BERT pre-training, for throughput and model-FLOPs utilisation (MFU).

Counts the multiply-adds of the matrix products only (2 FLOPs each), the convention of
Kaplan et al. (2020) and PaLM's MFU: embedding gathers, LayerNorm, GELU, softmax, dropout
and the optimizer update are elementwise and excluded. A training step costs 3x the
forward pass: the backward pass computes two products (input and weight gradients) for
each forward one. Rematerialisation is not counted (it is hardware work, not model work).
"""

from bert_jax.models.config import BertConfig


def attention_core_flops(config: BertConfig, batch_size: int, seq_len: int) -> int:
    """Forward FLOPs of every layer's attention core, softmax(Q K^T) V: the part a fused
    attention kernel (splash, cuDNN) computes, for a (batch_size, seq_len) batch."""
    return batch_size * config.num_layers * 2 * 2 * seq_len * seq_len * config.hidden_dim


def encoder_flops_per_sequence(config: BertConfig, seq_len: int) -> int:
    """Forward FLOPs of the encoder layers and pooler for one sequence of `seq_len` tokens."""
    hidden, mlp = config.hidden_dim, config.mlp_dim
    projections = 4 * 2 * hidden * hidden  # query, key, value, attention output
    feed_forward = 2 * 2 * hidden * mlp  # intermediate and output
    # Scores (T x T per head over head_dim) and the context product: 2 * T * hidden each.
    attention = 2 * 2 * seq_len * hidden
    per_token = config.num_layers * (projections + feed_forward + attention)
    pooler = 2 * hidden * hidden
    return seq_len * per_token + pooler


def heads_flops_per_sequence(config: BertConfig, max_predictions: int) -> int:
    """Forward FLOPs of the masked-LM head on `max_predictions` positions and the NSP head."""
    hidden = config.hidden_dim
    per_prediction = 2 * hidden * hidden + 2 * hidden * config.vocab_size  # transform, decoder
    next_sentence = 2 * hidden * 2
    return max_predictions * per_prediction + next_sentence


def forward_flops(config: BertConfig, batch_size: int, seq_len: int,
                  max_predictions: int) -> int:
    """Forward FLOPs of `BertForPreTraining` on a (batch_size, seq_len) batch."""
    per_sequence = (encoder_flops_per_sequence(config, seq_len)
                    + heads_flops_per_sequence(config, max_predictions))
    return batch_size * per_sequence


def train_step_flops(config: BertConfig, batch_size: int, seq_len: int,
                     max_predictions: int) -> int:
    """Model FLOPs of one training step: forward plus backward (3x forward)."""
    return 3 * forward_flops(config, batch_size, seq_len, max_predictions)


def real_token_train_flops(config: BertConfig, instance_lengths, num_predictions: int) -> int:
    """Model FLOPs of one training step counted on real tokens only: each instance's encoder
    as if it ran alone at its own length (`instance_lengths`, one per instance, packed or
    not), the MLM head on the `num_predictions` real masked positions and the NSP head once
    per instance. Padding, and attention across the instances of a packed row, is no work
    of the model: MFU on these FLOPs is comparable between packed and unpacked steps."""
    lengths = [int(length) for length in instance_lengths]
    encoder = sum(encoder_flops_per_sequence(config, length) for length in lengths)
    next_sentence = heads_flops_per_sequence(config, 0)
    masked_lm = heads_flops_per_sequence(config, num_predictions) - next_sentence
    return 3 * (encoder + len(lengths) * next_sentence + masked_lm)
