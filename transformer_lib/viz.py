"""Plotting helpers (matplotlib) for attention weights, encodings and training curves.

This module sits on top of the core and is never imported by it. Every helper labels
its axes and draws a colour bar, so a figure reads on its own in the HTML book.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure


def to_numpy(x) -> np.ndarray:
    """A tensor (detached, on the CPU) or array-like as a numpy array."""
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().numpy()
    return np.asarray(x)


def heatmap(
    matrix,
    *,
    x_labels: Sequence[str] | None = None,
    y_labels: Sequence[str] | None = None,
    xlabel: str = "",
    ylabel: str = "",
    title: str = "",
    ax: Axes | None = None,
    cmap: str = "viridis",
    vmin: float | None = None,
    vmax: float | None = None,
    annotate: bool = False,
    colorbar: bool = True,
    colorbar_label: str = "",
    fmt: str = "{:.2f}",
) -> Axes:
    """Draw one 2-D matrix as a labelled heatmap and return its axes.

    Args:
        matrix: ``(rows, cols)`` array or tensor.
        x_labels, y_labels: tick labels for the columns and rows (e.g. tokens).
        annotate: write each value in its cell (for small matrices).
        colorbar_label: what the colours measure, written beside the colour bar.
    """
    m = to_numpy(matrix)
    if m.ndim != 2:
        raise ValueError(f"matrix must have shape (rows, cols), got shape {m.shape}")
    if ax is None:
        _, ax = plt.subplots(figsize=(0.45 * m.shape[1] + 2.5, 0.4 * m.shape[0] + 1.8))
    image = ax.imshow(m, cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto")
    for labels, size, set_ticks, set_labels, name in (
        (x_labels, m.shape[1], ax.set_xticks, ax.set_xticklabels, "x_labels"),
        (y_labels, m.shape[0], ax.set_yticks, ax.set_yticklabels, "y_labels"),
    ):
        if labels is not None:
            if len(labels) != size:
                raise ValueError(f"{name} must have {size} entries to match the matrix, got {len(labels)}")
            set_ticks(range(size))
            set_labels(list(labels), rotation=90 if name == "x_labels" else 0)
    if annotate:
        # dark text on light cells and light text on dark ones, whatever the colour map
        rgba = image.cmap(image.norm(m))  # (rows, cols, 4)
        luminance = rgba[..., :3] @ np.array([0.299, 0.587, 0.114])
        for i in range(m.shape[0]):
            for j in range(m.shape[1]):
                ax.text(j, i, fmt.format(m[i, j]), ha="center", va="center", fontsize=8,
                        color="black" if luminance[i, j] > 0.5 else "white")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    if colorbar:
        bar = ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
        if colorbar_label:
            bar.set_label(colorbar_label)
    return ax


def plot_attention(
    weights,
    *,
    x_labels: Sequence[str] | None = None,
    y_labels: Sequence[str] | None = None,
    titles: Sequence[str] | None = None,
    annotate: bool = False,
    suptitle: str = "",
    cmap: str = "viridis",
) -> Figure:
    """One attention matrix, or a row of them, as heatmaps (queries down, keys across).

    Args:
        weights: ``(q_len, k_len)`` or ``(n, q_len, k_len)`` (e.g. one map per head).
        x_labels: key tokens; y_labels: query tokens (default: the key tokens).
        titles: one title per map.
    """
    w = to_numpy(weights)
    if w.ndim == 2:
        w = w[None]
    if w.ndim != 3:
        raise ValueError(f"weights must have shape (q_len, k_len) or (n, q_len, k_len), got shape {w.shape}")
    n = w.shape[0]
    if titles is not None and len(titles) != n:
        raise ValueError(f"titles must have {n} entries, one per map, got {len(titles)}")
    if y_labels is None and x_labels is not None and w.shape[1] == w.shape[2]:
        y_labels = x_labels
    width = 0.42 * w.shape[2] + 2.6
    fig, axes = plt.subplots(1, n, figsize=(min(width * n, 16), 0.38 * w.shape[1] + 2.0), squeeze=False)
    for i, ax in enumerate(axes[0]):
        heatmap(w[i], x_labels=x_labels, y_labels=y_labels if i == 0 else None, ax=ax,
                xlabel="keys", ylabel="queries" if i == 0 else "", title=titles[i] if titles else "",
                vmin=0.0, vmax=1.0, annotate=annotate, cmap=cmap)
        if i > 0 and y_labels is not None:
            ax.set_yticks([])
    if suptitle:
        fig.suptitle(suptitle)
    fig.tight_layout()
    return fig


def plot_attention_grid(
    weights,
    *,
    x_labels: Sequence[str] | None = None,
    y_labels: Sequence[str] | None = None,
    suptitle: str = "",
    cmap: str = "viridis",
    cell_size: float = 2.2,
    label_size: float = 7,
) -> Figure:
    """A grid of attention maps: one row per layer, one column per head.

    Args:
        weights: ``(layers, heads, q_len, k_len)`` array or tensor.
        x_labels: key tokens; y_labels: query tokens (default: the key tokens).
        cell_size: width and height of one map, in inches.
        label_size: font size of the token labels (smaller for long sentences).
    """
    w = to_numpy(weights)
    if w.ndim != 4:
        raise ValueError(f"weights must have shape (layers, heads, q_len, k_len), got shape {w.shape}")
    layers, heads = w.shape[:2]
    if y_labels is None and x_labels is not None and w.shape[2] == w.shape[3]:
        y_labels = x_labels
    for labels, size, name in ((x_labels, w.shape[3], "x_labels"), (y_labels, w.shape[2], "y_labels")):
        if labels is not None and len(labels) != size:
            raise ValueError(f"{name} must have {size} entries to match the weights, got {len(labels)}")
    fig, axes = plt.subplots(layers, heads, figsize=(cell_size * heads + 1, cell_size * layers + 0.6),
                             squeeze=False)
    image = None
    for layer in range(layers):
        for head in range(heads):
            ax = axes[layer, head]
            image = ax.imshow(w[layer, head], cmap=cmap, vmin=0.0, vmax=1.0)
            ax.set_xticks([])
            ax.set_yticks([])
            if layer == layers - 1 and x_labels is not None:
                ax.set_xticks(range(len(x_labels)))
                ax.set_xticklabels(list(x_labels), rotation=90, fontsize=label_size)
            if head == 0:
                if y_labels is not None:
                    ax.set_yticks(range(len(y_labels)))
                    ax.set_yticklabels(list(y_labels), fontsize=label_size)
                ax.set_ylabel(f"layer {layer + 1}")
            if layer == 0:
                ax.set_title(f"head {head + 1}", fontsize=9)
    fig.colorbar(image, ax=axes, fraction=0.02, pad=0.02, label="attention weight")
    if suptitle:
        fig.suptitle(suptitle)
    return fig


def plot_curve(
    values: Sequence[float],
    *,
    xlabel: str = "step",
    ylabel: str = "loss",
    title: str = "",
    ax: Axes | None = None,
    logy: bool = False,
) -> Axes:
    """A labelled line plot, e.g. a loss history or a learning-rate schedule."""
    y = to_numpy(values)
    if y.ndim != 1:
        raise ValueError(f"values must be one-dimensional (one value per step), got shape {y.shape}")
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3.2))
    ax.plot(np.arange(1, len(y) + 1), y)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if logy:
        ax.set_yscale("log")
    if title:
        ax.set_title(title)
    ax.grid(alpha=0.3)
    return ax
