"""Matplotlib figures of attention maps, probe accuracies and head statistics.

Each function returns a `matplotlib.figure.Figure` (built without pyplot, so nothing opens a
window and figures are freed with their last reference); `save(figure, path)` writes a PNG.
"""

import math
import os

import numpy as np
from matplotlib.figure import Figure

from bert_jax.analysis.probe import DIRECTIONS, ProbeResult
from bert_jax.analysis.statistics import NAMES, TITLES


def save(figure: Figure, path: str, dpi: int = 110) -> None:
    """A PNG written under a temporary name and renamed, so no half-written image remains."""
    directory, name = os.path.split(os.path.abspath(path))
    temporary = os.path.join(directory, f".{name}.tmp.png")
    figure.savefig(temporary, dpi=dpi, bbox_inches="tight")
    os.replace(temporary, path)


MAX_LABELLED_TOKENS = 160  # beyond this, labels would be under 4 points: leave them out


def layer_figure(attention: np.ndarray, tokens: list[str], layer: int) -> Figure:
    """Every head of one layer: (H, T, T) attention as heatmaps, tokens on both axes.

    Rows are attending tokens (queries), columns attended tokens (keys). Panels grow with
    the number of tokens so labels stay apart; past MAX_LABELLED_TOKENS they are left out.
    """
    num_heads, num_tokens = attention.shape[0], len(tokens)
    columns = min(num_heads, 4)
    rows = math.ceil(num_heads / columns)
    panel = float(np.clip(num_tokens * 0.17, 3.2, 11.0))  # inches
    figure = Figure(figsize=(columns * panel + 1.0, rows * (panel + 0.4)), layout="constrained")
    axes = figure.subplots(rows, columns, squeeze=False)
    spacing = panel * 72 / max(num_tokens, 1)  # points between neighbouring labels
    size = float(np.clip(0.75 * spacing, 3.0, 9.0))
    labelled = num_tokens <= MAX_LABELLED_TOKENS
    image = None
    for head, axis in enumerate(axes.flat):
        if head >= num_heads:
            axis.set_visible(False)
            continue
        image = axis.imshow(attention[head], cmap="viridis", vmin=0.0, vmax=1.0,
                            interpolation="nearest")
        axis.set_title(f"layer {layer}, head {head + 1}", fontsize=10)
        if labelled:
            axis.set_xticks(range(num_tokens), tokens, rotation=90, fontsize=size)
            axis.set_yticks(range(num_tokens), tokens, fontsize=size)
        else:
            axis.set_xticks([])
            axis.set_yticks([])
        axis.tick_params(length=0)
    if not labelled:
        figure.suptitle(f"{num_tokens} tokens: too many to label; attention.npz and "
                        "head_view.html have them", fontsize=10)
    figure.colorbar(image, ax=axes, shrink=0.6, label="attention (row: from, column: to)")
    return figure


def heads_figure(attention: np.ndarray) -> Figure:
    """All (L, H, T, T) maps at a glance: one small unlabeled panel per layer and head."""
    num_layers, num_heads = attention.shape[:2]
    panel = 1.1
    figure = Figure(figsize=(num_heads * panel + 0.6, num_layers * panel + 0.4),
                    layout="constrained")
    axes = figure.subplots(num_layers, num_heads, squeeze=False)
    for layer in range(num_layers):
        for head in range(num_heads):
            axis = axes[layer, head]
            axis.imshow(attention[layer, head], cmap="viridis", vmin=0.0, vmax=1.0,
                        interpolation="nearest")
            axis.set_xticks([])
            axis.set_yticks([])
            if layer == 0:
                axis.set_title(f"head {head + 1}", fontsize=8)
            if head == 0:
                axis.set_ylabel(f"layer {layer + 1}", fontsize=8)
    return figure


def _grid(figure: Figure, count: int, columns: int):
    rows = math.ceil(count / columns)
    axes = figure.subplots(rows, columns, squeeze=False).flat
    for axis in list(axes)[count:]:
        axis.set_visible(False)
    return list(figure.axes)[:count]


def _annotated_heatmap(axis, values: np.ndarray, vmin: float, vmax: float, cmap: str,
                       fmt: str, highlight: tuple[int, int] | None = None):
    """(L, H) values with layer rows and head columns, each cell printed when they fit."""
    num_layers, num_heads = values.shape
    image = axis.imshow(values, cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto")
    axis.set_xticks(range(num_heads), [str(h + 1) for h in range(num_heads)], fontsize=7)
    axis.set_yticks(range(num_layers), [str(l + 1) for l in range(num_layers)], fontsize=7)
    axis.set_xlabel("head", fontsize=8)
    axis.set_ylabel("layer", fontsize=8)
    if num_heads <= 16:
        middle = (vmin + vmax) / 2
        for layer in range(num_layers):
            for head in range(num_heads):
                value = values[layer, head]
                axis.text(head, layer, format(value, fmt), ha="center", va="center",
                          fontsize=6, color="black" if value > middle else "white")
    if highlight is not None:
        axis.add_patch(_box(highlight))
    return image


def _box(cell: tuple[int, int]):
    from matplotlib.patches import Rectangle
    layer, head = cell
    return Rectangle((head - 0.5, layer - 0.5), 1, 1, fill=False, edgecolor="red", linewidth=2)


def probe_figure(result: ProbeResult, relations: list[str]) -> Figure:
    """Accuracy (%) of every layer x head for each relation, the better of the two
    directions per head; the best head boxed, the best offset in the title."""
    relations = [name for name in relations if name in result.relations]
    columns = min(len(relations), 3)
    num_layers, num_heads = result.head_accuracy.shape[-2:]
    panel_width = max(3.2, 0.38 * num_heads + 1.0)
    rows = math.ceil(len(relations) / columns)
    figure = Figure(figsize=(columns * panel_width, rows * (0.32 * num_layers + 1.4)),
                    layout="constrained")
    image = None
    for axis, relation in zip(_grid(figure, len(relations), columns), relations):
        accuracy = 100 * result.head_accuracy[result.index(relation)].max(axis=0)  # (L, H)
        best, offset = result.best_head(relation), result.best_offset(relation)
        image = _annotated_heatmap(axis, accuracy, 0, 100, "magma", ".0f",
                                   (best["layer"] - 1, best["head"] - 1))
        arrow = "dep->head" if best["direction"] == DIRECTIONS[0] else "head->dep"
        axis.set_title(f"{relation} (n={result.counts[result.index(relation)]})\n"
                       f"best {best['layer']}-{best['head']} {arrow} "
                       f"{100 * best['accuracy']:.1f}; offset {offset['offset']:+d} "
                       f"{100 * offset['accuracy']:.1f}", fontsize=8)
    figure.colorbar(image, ax=figure.axes, shrink=0.5, label="accuracy (%)")
    figure.suptitle("accuracy (%) of each head as a dependency classifier, the better of its "
                    "two directions; best head boxed", fontsize=10)
    return figure


def statistics_figure(statistics: dict) -> Figure:
    """The (L, H) head statistics, one heatmap each: entropy, then the attention shares."""
    num_layers, num_heads = statistics["entropy"].shape
    panel_width = max(3.4, 0.42 * num_heads + 1.4)
    columns = 3
    rows = math.ceil(len(NAMES) / columns)
    figure = Figure(figsize=(columns * panel_width, rows * (0.36 * num_layers + 1.6)),
                    layout="constrained")
    for axis, name in zip(_grid(figure, len(NAMES), columns), NAMES):
        values = statistics[name]
        if name == "entropy":
            top = max(float(statistics["uniform_entropy"]), float(values.max()), 1e-6)
            image = _annotated_heatmap(axis, values, 0, top, "cividis", ".1f")
            title = f"{TITLES[name]}; uniform: {statistics['uniform_entropy']:.2f}"
        else:
            image = _annotated_heatmap(axis, values, 0, 1, "cividis", ".2f")
            title = TITLES[name]
        axis.set_title(title, fontsize=9)
        figure.colorbar(image, ax=axis, shrink=0.8)
    figure.suptitle("per head, averaged over every attending token", fontsize=10)
    return figure
