"""The named model sizes: BERT's (Turc et al., 2019, and the paper's base and large),
ModernBERT's and EuroBERT's, each as its family's config."""

from typing import Any

from bert_jax.errors import UserError
from bert_jax.models.config import BertConfig, EuroBertConfig, ModernBertConfig

# (num_layers, hidden_dim, num_heads); the small ones follow Turc et al. (2019).
_SIZES = {
    "tiny": (2, 128, 2),
    "mini": (4, 256, 4),
    "small": (4, 512, 8),
    "medium": (8, 512, 8),
    "base": (12, 768, 12),
    "large": (24, 1024, 16),
}

# ModernBERT's sizes (num_layers, hidden_dim, num_heads, mlp_dim): base and large as the
# paper trained them (Warner et al., 2024, table 1); tiny for laptops and tests.
_MODERNBERT_SIZES = {
    "modernbert-tiny": (3, 128, 2, 192),
    "modernbert-base": (22, 768, 12, 1152),
    "modernbert-large": (28, 1024, 16, 2624),
}

# EuroBERT's sizes (num_layers, hidden_dim, num_heads, num_kv_heads, mlp_dim): 210m as
# released (EuroBERT/EuroBERT-210m's config.json); tiny (grouped-query) for laptops and tests.
_EUROBERT_SIZES = {
    "eurobert-tiny": (3, 128, 4, 2, 256),
    "eurobert-210m": (12, 768, 12, 12, 3072),
}
# preset name prefix -> (sizes, config class, the size fields in the sizes' order).
_FAMILY_SIZES = (
    (_MODERNBERT_SIZES, ModernBertConfig, ("num_layers", "hidden_dim", "num_heads", "mlp_dim")),
    (_EUROBERT_SIZES, EuroBertConfig,
     ("num_layers", "hidden_dim", "num_heads", "num_kv_heads", "mlp_dim")),
)

PRESET_NAMES = tuple(_SIZES) + tuple(_MODERNBERT_SIZES) + tuple(_EUROBERT_SIZES)


def preset(name: str, **overrides: Any):
    """The named size, then any overrides: a BERT size (feed-forward width 4 x hidden), a
    ModernBERT one (`modernbert-*`) or a EuroBERT one (`eurobert-*`), each its own widths."""
    for sizes, config_class, fields in _FAMILY_SIZES:
        if name in sizes:
            values = dict(zip(fields, sizes[name]))
            values.update(overrides)  # a size too, as BERT's presets take
            return config_class.from_dict(values, source=f"preset {name!r}")
    if name not in _SIZES:
        raise UserError(f"unknown model preset {name!r}; expected one of {list(PRESET_NAMES)}")
    num_layers, hidden_dim, num_heads = _SIZES[name]
    values = dict(num_layers=num_layers, hidden_dim=hidden_dim, num_heads=num_heads,
                  mlp_dim=4 * hidden_dim)
    values.update(overrides)
    return BertConfig.from_dict(values, source=f"preset {name!r}")
