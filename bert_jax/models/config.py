"""The model's configuration: one frozen dataclass and the named size presets."""

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


@dataclasses.dataclass(frozen=True)
class Precision:
    """How a run computes, not what the model is: a model saved in fp32 trains on in bf16."""
    dtype: str = "float32"  # compute dtype of activations: float32 or bfloat16
    param_dtype: str = "float32"  # storage dtype of parameters (keep float32 to train)
    remat: bool = False  # recompute each layer's activations in the backward pass
    # Rows per device whose attention scores are computed at once: 0 = the whole batch,
    # -1 = automatic (2 on a CPU from 160 tokens on, else 0; see bert_jax/models/layers/attention.py).
    attention_chunk_rows: int = -1
    # The attention kernel: auto (splash on a TPU; on a GPU in bf16 cuDNN for unpacked rows,
    # XLA's for packed ones; when attention dropout is off), reference, xla, cudnn or splash
    # (bert_jax/models/layers/attention_kernels.py; the README says what each was measured at).
    attention: str = "auto"
    # GPU, opt-in: attention dropout inside cuDNN's fused kernel, its masks from cuDNN's own
    # generator (not yet checked on a GPU: bench/cudnn_dropout_check.py checks it).
    fused_attention_dropout: bool = False

    def __post_init__(self):
        if self.attention not in ATTENTION_IMPLEMENTATIONS:
            raise UserError(f"precision.attention must be one of "
                            f"{list(ATTENTION_IMPLEMENTATIONS)}, "
                            f"got {self.attention!r}")
        for name in ("dtype", "param_dtype"):
            if getattr(self, name) not in DTYPES:
                raise UserError(f"precision.{name} must be 'float32' or 'bfloat16', "
                                f"got {getattr(self, name)!r}")
        if self.attention_chunk_rows < -1:
            raise UserError(f"precision.attention_chunk_rows must be -1 (automatic), 0 (off) "
                            f"or a number of rows, got {self.attention_chunk_rows}")

    @classmethod
    def from_run_config(cls, run_config) -> "Precision":
        """The run config's `precision` section (absent in old run configs: float32)."""
        section = run_config.get("precision") if hasattr(run_config, "get") else None
        return cls(**dict(section)) if section else cls()


@dataclasses.dataclass(frozen=True)
class BertConfig:
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
        if self.hidden_dim % self.num_heads:
            raise UserError(
                f"model.hidden_dim ({self.hidden_dim}) must be a multiple of "
                f"model.num_heads ({self.num_heads})")

    @property
    def head_dim(self) -> int:
        return self.hidden_dim // self.num_heads

    def check_seq_len(self, seq_len: int, what: str = "--max-seq-len") -> None:
        """Refuses a length longer than the position table (`what` names where it was set).

        Every command that runs this model at a length asks here first: positions past the
        table have no embedding, and reading past it gives NaN outputs with no error.
        """
        if seq_len > self.max_positions:
            raise UserError(f"{what} {seq_len} is longer than the model's position table of "
                            f"{self.max_positions} (model.max_positions, HF "
                            "max_position_embeddings): use a length of at most "
                            f"{self.max_positions}, or a model with more positions")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any], source: str = "config") -> "BertConfig":
        """Builds a config, naming any key that is not a field instead of ignoring it."""
        known = {field.name for field in dataclasses.fields(cls)}
        # Files saved before the run-time knobs moved to `Precision` still load.
        values = {key: value for key, value in values.items() if key not in RUN_TIME_KEYS}
        unknown = sorted(set(values) - known)
        if unknown:
            raise UserError(
                f"{source}: unknown model config key(s) {unknown}; expected some of {sorted(known)}")
        return cls(**values)


# (num_layers, hidden_dim, num_heads); the small ones follow Turc et al. (2019).
_SIZES = {
    "tiny": (2, 128, 2),
    "mini": (4, 256, 4),
    "small": (4, 512, 8),
    "medium": (8, 512, 8),
    "base": (12, 768, 12),
    "large": (24, 1024, 16),
}

PRESET_NAMES = tuple(_SIZES)


def preset(name: str, **overrides: Any) -> BertConfig:
    """The named size with the feed-forward width at 4 x hidden, then any overrides."""
    if name not in _SIZES:
        raise UserError(f"unknown model preset {name!r}; expected one of {list(_SIZES)}")
    num_layers, hidden_dim, num_heads = _SIZES[name]
    values = dict(num_layers=num_layers, hidden_dim=hidden_dim, num_heads=num_heads,
                  mlp_dim=4 * hidden_dim)
    values.update(overrides)
    return BertConfig.from_dict(values, source=f"preset {name!r}")
