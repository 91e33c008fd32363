"""The model's configuration: one frozen dataclass per family (the named sizes are
`presets.py`)."""

import dataclasses
from typing import Any

from bert_jax.errors import UserError

# The vocabulary of the original English BERT checkpoints (bert-base-uncased).
BERT_VOCAB_SIZE = 30522


# Keys that older model_config.json files hold but that now belong to the run (`Precision`).
RUN_TIME_KEYS = ("dtype", "param_dtype", "remat")
DTYPES = ("float32", "bfloat16")
# Precision.attention's choices (bert_jax/models/layers/attention_kernels.py says what each is).
ATTENTION_IMPLEMENTATIONS = ("auto", "reference", "xla", "cudnn", "splash")
# Precision.remat_policy's choices (bert_jax/models/layers/layer_scan.py says what each keeps).
REMAT_POLICY_NAMES = ("full", "matmul_outputs")
# Precision.projections' choices (bert_jax/models/layers/dense.py, `joins_projections`).
PROJECTIONS = ("auto", "joined", "apart")


@dataclasses.dataclass(frozen=True)
class Precision:
    """How a run computes, not what the model is: a model saved in fp32 trains on in bf16."""
    dtype: str = "float32"  # compute dtype of activations: float32 or bfloat16
    param_dtype: str = "float32"  # storage dtype of parameters (keep float32 to train)
    remat: bool = False  # recompute each layer's activations in the backward pass
    # With remat: full (recompute the whole layer) or matmul_outputs (keep the projections'
    # outputs, recompute the elementwise work between them).
    remat_policy: str = "full"
    # The layer stack as one scanned block (bert_jax/models/layers/layer_scan.py): the compiler
    # sees one block, not every layer; a training run keeps the block's weights stacked on its
    # devices, and checkpoints and every converter see them per layer.
    scan_layers: bool = False
    # Rows per device whose attention scores are computed at once: 0 = the whole batch,
    # -1 = automatic (2 on a CPU from 160 tokens on, else 0; see bert_jax/models/layers/attention.py).
    attention_chunk_rows: int = -1
    # The attention kernel: auto (splash on a TPU; on a GPU in bf16 cuDNN for unpacked rows,
    # XLA's for packed ones; when attention dropout is off), reference, xla, cudnn or splash
    # (bert_jax/models/layers/attention_kernels.py; the README says what each was measured at).
    attention: str = "auto"
    # GPU, opt-in: attention dropout inside cuDNN's fused kernel, its masks from cuDNN's own
    # generator (not yet checked on a GPU: bench/gpu/cudnn_dropout_check.py checks it).
    fused_attention_dropout: bool = False
    # GPU, opt-in: a sliding-window layer's attention in bands, its work following the window
    # (banded_attention.py; compiled for an H100, not yet timed on a GPU: docs/gpus.md).
    gpu_attention_bands: bool = False
    # GPU, opt-in: a sliding-window layer's attention as one Pallas kernel a pass over its
    # band, the scores kept on chip (band_kernel.py; compiled for an H100, not yet timed).
    gpu_band_kernel: bool = False
    # The projections of one input (BERT's and EuroBERT's query, key and value, EuroBERT's
    # gate and up) as one product or each its own: auto (apart: what every measured step ran;
    # joined compiles to fewer kernels for a GPU, not yet timed there: layers/dense.py),
    # joined or apart. The parameters are the same either way.
    projections: str = "auto"

    def __post_init__(self):
        if self.attention not in ATTENTION_IMPLEMENTATIONS:
            raise UserError(f"precision.attention must be one of "
                            f"{list(ATTENTION_IMPLEMENTATIONS)}, "
                            f"got {self.attention!r}")
        for name in ("dtype", "param_dtype"):
            if getattr(self, name) not in DTYPES:
                raise UserError(f"precision.{name} must be 'float32' or 'bfloat16', "
                                f"got {getattr(self, name)!r}")
        if self.remat_policy not in REMAT_POLICY_NAMES:
            raise UserError(f"precision.remat_policy must be one of {list(REMAT_POLICY_NAMES)}, "
                            f"got {self.remat_policy!r}")
        if self.projections not in PROJECTIONS:
            raise UserError(f"precision.projections must be one of {list(PROJECTIONS)}, "
                            f"got {self.projections!r}")
        if self.attention_chunk_rows < -1:
            raise UserError(f"precision.attention_chunk_rows must be -1 (automatic), 0 (off) "
                            f"or a number of rows, got {self.attention_chunk_rows}")

    @classmethod
    def from_run_config(cls, run_config) -> "Precision":
        """The run config's `precision` section (absent in old run configs: float32)."""
        section = run_config.get("precision") if hasattr(run_config, "get") else None
        return cls(**dict(section)) if section else cls()


@dataclasses.dataclass(frozen=True)
class ScanPlan:
    """The layers a scanned stack runs as one loop: `blocks` blocks of `period` consecutive
    layers from layer `first`, every block alike (bert_jax/models/layers/layer_scan.py); the
    layers before and after run unrolled."""
    first: int
    period: int
    blocks: int

    def layers(self, position: int) -> range:
        """The layers at `position` (0 .. period - 1) of every block, in block order."""
        return range(self.first + position, self.first + self.blocks * self.period, self.period)


class _EncoderConfig:
    """What every family's config shares: sizes the rest of bert-jax reads (hidden_dim,
    num_layers, num_heads, vocab_size, max_positions), the length check and the JSON form."""
    # Where initial weights are cut, in std units (ModernBERT makes it a field).
    initializer_cutoff = 2.0
    # The family's shape as the FLOP count reads it (bert_jax/compiler/flops.py), BERT's here:
    gated_mlp = False  # the MLP's input is two matrices (value and gate), not one
    has_pooler = True  # a pooler on [CLS] (counted in the encoder)
    mlm_transform = True  # the masked-LM head's dense layer before the decoder
    next_sentence_head = True  # pre-training has BERT's next-sentence head

    @property
    def num_kv_heads(self) -> int:
        """Key/value heads (fewer than query heads in grouped-query attention)."""
        return self.num_heads

    def keys_read(self, layer: int, seq_len: int) -> int:
        """How many keys a query of `layer` reads in a sequence of `seq_len` tokens."""
        return seq_len

    @property
    def scan_plan(self) -> ScanPlan:
        """The scanned stack's blocks (BERT's: every layer alike, one the block)."""
        return ScanPlan(first=0, period=1, blocks=self.num_layers)

    def _check_heads(self):
        if self.hidden_dim % self.num_heads:
            raise UserError(
                f"model.hidden_dim ({self.hidden_dim}) must be a multiple of "
                f"model.num_heads ({self.num_heads})")

    @property
    def head_dim(self) -> int:
        return self.hidden_dim // self.num_heads

    def check_seq_len(self, seq_len: int, what: str = "--max-seq-len") -> None:
        """Refuses a length longer than the model's positions (`what` names where it was set).

        Every command that runs this model at a length asks here first: positions past a
        learned table have no embedding (reading past it gives NaN outputs with no error),
        and rotary positions past the trained length give outputs no one has checked.
        """
        if seq_len > self.max_positions:
            raise UserError(f"{what} {seq_len} is longer than the model's "
                            f"{self.max_positions} positions (model.max_positions, HF "
                            "max_position_embeddings): use a length of at most "
                            f"{self.max_positions}, or a model with more positions")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any], source: str = "config"):
        """Builds a config, naming any key that is not a field instead of ignoring it."""
        known = {field.name for field in dataclasses.fields(cls)}
        # Files saved before the run-time knobs moved to `Precision` still load.
        values = {key: value for key, value in values.items() if key not in RUN_TIME_KEYS}
        unknown = sorted(set(values) - known)
        if unknown:
            raise UserError(
                f"{source}: unknown model config key(s) {unknown}; expected some of {sorted(known)}")
        return cls(**values)


@dataclasses.dataclass(frozen=True)
class BertConfig(_EncoderConfig):
    """BERT (Devlin et al., 2019): post-LayerNorm, learned absolute positions, segments."""
    vocab_size: int = BERT_VOCAB_SIZE  # WordPiece/SentencePiece vocabulary size
    hidden_dim: int = 768  # width of every residual-stream activation
    num_layers: int = 12  # Transformer encoder layers
    num_heads: int = 12  # attention heads per layer; hidden_dim must divide evenly
    mlp_dim: int = 3072  # feed-forward inner width (4 x hidden_dim in every preset)
    max_positions: int = 512  # learned absolute position embeddings
    num_segments: int = 2  # segment (token type) embeddings: sentence A and B
    layer_norm_eps: float = 1e-12  # as in the original TF code, not PyTorch's 1e-5
    dropout_rate: float = 0.1  # hidden-state dropout (embeddings, residual branches)
    attention_dropout_rate: float = 0.1  # dropout on attention probabilities
    initializer_std: float = 0.02  # truncated-normal std of every weight matrix

    def __post_init__(self):
        self._check_heads()


# ModernBERT's classifier pooling choices (transformers' `classifier_pooling`).
CLASSIFIER_POOLING = ("cls", "mean")


@dataclasses.dataclass(frozen=True)
class ModernBertConfig(_EncoderConfig):
    """ModernBERT (Warner et al., 2024): pre-LayerNorm, rotary positions, GeGLU, no biases,
    global attention every few layers and a sliding window elsewhere. Field by field the
    transformers `ModernBertConfig` (its name in a comment where ours differs)."""
    vocab_size: int = 50368  # byte-level BPE vocabulary (a multiple of 64)
    hidden_dim: int = 768  # hidden_size
    num_layers: int = 22  # num_hidden_layers
    num_heads: int = 12  # num_attention_heads; hidden_dim must divide evenly
    mlp_dim: int = 1152  # intermediate_size: GeGLU's width (Wi projects to twice it)
    max_positions: int = 8192  # max_position_embeddings: the longest input (rotary, no table)
    layer_norm_eps: float = 1e-5  # norm_eps
    norm_bias: bool = False  # LayerNorms with a bias
    attention_bias: bool = False  # Wqkv and Wo with biases
    mlp_bias: bool = False  # Wi and Wo with biases
    decoder_bias: bool = True  # the masked-LM decoder's output bias
    classifier_bias: bool = False  # the prediction head's dense bias (the classifier has one)
    global_attention_every: int = 3  # global_attn_every_n_layers: layer i is global iff i % n == 0
    local_attention: int = 128  # the sliding window in tokens, half on each side
    global_rope_theta: float = 160000.0  # rope_parameters.full_attention.rope_theta
    local_rope_theta: float = 10000.0  # rope_parameters.sliding_attention.rope_theta
    embedding_dropout_rate: float = 0.0  # embedding_dropout
    attention_dropout_rate: float = 0.0  # attention_dropout: on the probabilities and on Wo's output
    mlp_dropout_rate: float = 0.0  # mlp_dropout: on GeGLU's output, before Wo
    classifier_dropout_rate: float = 0.0  # classifier_dropout: before a task head's classifier
    classifier_pooling: str = "cls"  # sequence classifier input: the [CLS] state or the mean
    initializer_std: float = 0.02  # initializer_range: std of the input projections, embeddings
    initializer_cutoff: float = 2.0  # initializer_cutoff_factor: truncation in std units

    def __post_init__(self):
        self._check_heads()
        if self.head_dim % 2:
            raise UserError(f"model.hidden_dim / model.num_heads = {self.head_dim}: rotary "
                            "positions rotate pairs of dimensions, so a head needs an even size")
        if self.local_attention <= 0 or self.local_attention % 2:
            raise UserError(f"model.local_attention (HF local_attention) is "
                            f"{self.local_attention}: the sliding window must be a positive "
                            "even number of tokens, half on each side of a token")
        if self.global_attention_every < 1:
            raise UserError(f"model.global_attention_every (HF global_attn_every_n_layers) must "
                            f"be at least 1, got {self.global_attention_every}")
        if self.classifier_pooling not in CLASSIFIER_POOLING:
            raise UserError(f"model.classifier_pooling must be one of "
                            f"{list(CLASSIFIER_POOLING)}, got {self.classifier_pooling!r}")

    gated_mlp, has_pooler, next_sentence_head = True, False, False  # GeGLU; no pooler, no NSP

    def keys_read(self, layer: int, seq_len: int) -> int:
        return seq_len if self.is_global(layer) else min(seq_len, 2 * self.window + 1)

    def is_global(self, layer: int) -> bool:
        """Whether layer `layer` (0-based) attends to the whole row or to its window."""
        return layer % self.global_attention_every == 0

    @property
    def window(self) -> int:
        """How far a sliding layer sees on each side: keys with |q - k| <= window."""
        return self.local_attention // 2

    def rope_theta(self, layer: int) -> float:
        return self.global_rope_theta if self.is_global(layer) else self.local_rope_theta

    @property
    def scan_plan(self) -> ScanPlan:
        """Layer 0 (no attention norm) alone, then blocks of one global layer's period: n - 1
        sliding layers and a global one (n = global_attention_every); the remainder alone.
        22 layers (ModernBERT-base) are 1 + 7 blocks of 3; 28 (large) 1 + 9."""
        period = self.global_attention_every
        return ScanPlan(first=1, period=period, blocks=(self.num_layers - 1) // period)


# The Llama-style family's variants, each its own transformers classes (model_type), and the
# classifier pooling each defines (transformers' `classifier_pooling`): EuroBERT's the first
# token's state, the mean of the states, or the mean of every token's logits ("late");
# UltraBERT's (ModernBERT's classes) the first token's state or the mean.
LLAMA_STYLE_POOLING = {"eurobert": ("bos", "mean", "late"), "ultrabert": ("cls", "mean")}
FULL_ATTENTION, SLIDING_ATTENTION = "full_attention", "sliding_attention"  # HF layer_types


def ultrabert_layer_types(num_layers: int) -> tuple[str, ...]:
    """UltraBERT's default pattern (transformers' UltrabertConfig): every third layer global,
    layer i sliding iff (i + 1) % 3."""
    return tuple(SLIDING_ATTENTION if (index + 1) % 3 else FULL_ATTENTION
                 for index in range(num_layers))


@dataclasses.dataclass(frozen=True)
class EuroBertConfig(_EncoderConfig):
    """The Llama-style encoders: a Llama layer stack read both ways: pre-RMSNorm,
    grouped-query attention with rotary positions, a SwiGLU MLP, no biases. Field by field
    the transformers `EuroBertConfig` and `UltrabertConfig` (its name in a comment where ours
    differs); the defaults are EuroBERT-210m's (Boizard et al., 2025).

    `variant` "ultrabert" is UltraBERT: the same layers, a sliding window on the layers
    `layer_types` names (two of every three by default), a rotary theta per layer type, a
    two-layer masked-LM head and ModernBERT's classifier heads (eurobert_heads.py)."""
    vocab_size: int = 128256  # the Llama-3 byte-level BPE vocabulary
    hidden_dim: int = 768  # hidden_size
    num_layers: int = 12  # num_hidden_layers
    num_heads: int = 12  # num_attention_heads: query heads
    num_kv_heads: int = 12  # num_key_value_heads: key/value heads, shared by num_heads / this
    attention_head_dim: int = 0  # head_dim: each head's width; 0 = hidden_dim / num_heads
    mlp_dim: int = 3072  # intermediate_size: SwiGLU's width (gate and up projections)
    max_positions: int = 8192  # max_position_embeddings: the longest input (rotary, no table)
    layer_norm_eps: float = 1e-5  # rms_norm_eps: RMSNorm's epsilon
    rope_theta: float = 250000.0  # rope_parameters(.full_attention).rope_theta
    attention_bias: bool = False  # q/k/v/o projections with biases
    mlp_bias: bool = False  # gate/up/down projections (and the MLM decoder) with biases
    tie_word_embeddings: bool = False  # the MLM decoder shares the token embeddings
    attention_dropout_rate: float = 0.0  # attention_dropout: on the attention probabilities
    classifier_pooling: str = "late"  # LLAMA_STYLE_POOLING[variant] (eurobert_heads.py)
    initializer_std: float = 0.02  # initializer_range: std of every weight matrix
    variant: str = "eurobert"  # eurobert or ultrabert (transformers' model_type)
    # UltraBERT's: each layer's "full_attention" or "sliding_attention" (() = every layer
    # full; an ultrabert variant left at () gets ultrabert_layer_types).
    layer_types: tuple[str, ...] = ()
    sliding_window: int = 0  # a sliding layer's reach on each side: keys with |q - k| <= this
    sliding_rope_theta: float = 10000.0  # rope_parameters.sliding_attention.rope_theta
    prediction_head_size: int = 768  # UltraBERT's MLM head: hidden -> this -> hidden

    def __post_init__(self):
        if not self.attention_head_dim:
            self._check_heads()
        if self.num_kv_heads < 1 or self.num_heads % self.num_kv_heads:
            raise UserError(f"model.num_heads ({self.num_heads}) must be a multiple of "
                            f"model.num_kv_heads ({self.num_kv_heads}, HF num_key_value_heads)")
        if self.head_dim % 2:
            raise UserError(f"the head size is {self.head_dim}: rotary positions rotate "
                            "pairs of dimensions, so a head needs an even size")
        if self.variant not in LLAMA_STYLE_POOLING:
            raise UserError(f"model.variant must be one of {list(LLAMA_STYLE_POOLING)}, "
                            f"got {self.variant!r}")
        if self.classifier_pooling not in LLAMA_STYLE_POOLING[self.variant]:
            raise UserError(f"model.classifier_pooling of a {self.variant} model must be one "
                            f"of {list(LLAMA_STYLE_POOLING[self.variant])}, "
                            f"got {self.classifier_pooling!r}")
        layer_types = tuple(self.layer_types)  # a JSON list read back; frozen and hashable
        if not layer_types and self.variant == "ultrabert":
            layer_types = ultrabert_layer_types(self.num_layers)
        object.__setattr__(self, "layer_types", layer_types)
        self._check_layer_types()

    def _check_layer_types(self):
        if self.layer_types and len(self.layer_types) != self.num_layers:
            raise UserError(f"model.layer_types has {len(self.layer_types)} entries for "
                            f"{self.num_layers} layers (model.num_layers)")
        unknown = sorted(set(self.layer_types) - {FULL_ATTENTION, SLIDING_ATTENTION})
        if unknown:
            raise UserError(f"model.layer_types holds {unknown}; expected "
                            f"{FULL_ATTENTION!r} or {SLIDING_ATTENTION!r}")
        if SLIDING_ATTENTION in self.layer_types and self.sliding_window < 1:
            raise UserError(f"model.sliding_window is {self.sliding_window}: sliding layers "
                            "need a window of at least 1 token on each side")

    # SwiGLU; no pooler, no transform before the decoder, no next-sentence head.
    gated_mlp, has_pooler, mlm_transform, next_sentence_head = True, False, False, False

    @property
    def head_dim(self) -> int:
        return self.attention_head_dim or self.hidden_dim // self.num_heads

    @property
    def has_span_head(self) -> bool:
        """UltraBERT has transformers' span head; EuroBERT has none."""
        return self.variant == "ultrabert"

    def layer_window(self, layer: int) -> int | None:
        """Layer `layer`'s reach on each side (keys with |q - k| <= it), None when global."""
        sliding = bool(self.layer_types) and self.layer_types[layer] == SLIDING_ATTENTION
        return self.sliding_window if sliding else None

    @property
    def window(self) -> int:
        """The sliding layers' reach on each side, 0 without sliding layers (as ModernBERT's
        config says it: what the compile reports hold the attention kernels to)."""
        return max((self.layer_window(layer) or 0) for layer in range(self.num_layers))

    def layer_rope_theta(self, layer: int) -> float:
        return self.rope_theta if self.layer_window(layer) is None else self.sliding_rope_theta

    def keys_read(self, layer: int, seq_len: int) -> int:
        window = self.layer_window(layer)
        return seq_len if window is None else min(seq_len, 2 * window + 1)

    @property
    def layer_period(self) -> int:
        """The fewest layers after which the layer types repeat (1: every layer alike), the
        scanned stack's block."""
        types = self.layer_types
        return next(period for period in range(1, len(types) + 1)
                    if all(kind == types[index % period] for index, kind in enumerate(types))
                    ) if types else 1

    @property
    def scan_plan(self) -> ScanPlan:
        """Blocks of one period of the layer types (EuroBERT: one layer; UltraBERT: two
        sliding layers and a global one); the remainder after the last whole block alone."""
        return ScanPlan(first=0, period=self.layer_period,
                        blocks=self.num_layers // self.layer_period)
