"""Analytic model FLOPs of BERT and ModernBERT pre-training, for throughput and model-FLOPs
utilisation (MFU).

Counts the multiply-adds of the matrix products only (2 FLOPs each), the convention of
Kaplan et al. (2020) and PaLM's MFU: embedding gathers, LayerNorm, GELU, softmax, dropout
and the optimizer update are elementwise and excluded. A training step costs 3x the
forward pass: the backward pass computes two products (input and weight gradients) for
each forward one. Rematerialisation is not counted (it is hardware work, not model work).

ModernBERT differs in three places: GeGLU's input projection is twice as wide (value and
gate), a sliding-window layer's query reads at most 2 x window + 1 keys (the model's work,
whatever a kernel computes beside the band), and there is no pooler or NSP head. EuroBERT's
keys and values have `num_kv_heads` heads (grouped-query attention), its SwiGLU has two input
matrices, and its masked-LM head is the decoder alone. Each config says which of these it has
(`bert_jax/models/config.py`), so no family is named here.
"""

from bert_jax.models.config import BertConfig


def attention_core_flops(config, batch_size: int, seq_len: int) -> int:
    """Forward FLOPs of every layer's attention core, softmax(Q K^T) V: the part a fused
    attention kernel (splash, cuDNN) computes, for a (batch_size, seq_len) batch."""
    keys = sum(config.keys_read(layer, seq_len) for layer in range(config.num_layers))
    return batch_size * 2 * 2 * seq_len * keys * config.num_heads * config.head_dim


def encoder_flops_per_sequence(config, seq_len: int) -> int:
    """Forward FLOPs of the encoder layers (and BERT's pooler) for one sequence of `seq_len`
    tokens."""
    hidden, mlp = config.hidden_dim, config.mlp_dim
    query_width = config.num_heads * config.head_dim
    kv_width = config.num_kv_heads * config.head_dim
    # query and attention output, key and value
    projections = 2 * 2 * hidden * query_width + 2 * 2 * hidden * kv_width
    # BERT: intermediate and output; gated (GeGLU, SwiGLU): value and gate, then output.
    feed_forward = (3 if config.gated_mlp else 2) * 2 * hidden * mlp
    per_token = config.num_layers * (projections + feed_forward)
    # Scores (T x keys per head over head_dim) and the context product: 2 * keys * width each.
    attention = sum(2 * 2 * config.keys_read(layer, seq_len) * query_width
                    for layer in range(config.num_layers))
    pooler = 2 * hidden * hidden if config.has_pooler else 0
    return seq_len * (per_token + attention) + pooler


def heads_flops_per_sequence(config, max_predictions: int) -> int:
    """Forward FLOPs of the masked-LM head on `max_predictions` positions and the NSP head
    (BERT's pre-training has one; ModernBERT's and EuroBERT's have none)."""
    hidden = config.hidden_dim
    transform = 2 * hidden * hidden if config.mlm_transform else 0
    per_prediction = transform + 2 * hidden * config.vocab_size  # transform, decoder
    next_sentence = 2 * hidden * 2 if config.next_sentence_head else 0
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
