"""Tests for transformer_lib.viz (figures) and transformer_lib.widgets (precomputed controls)."""

from __future__ import annotations

import ipywidgets as widgets
import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
from ipywidgets.widgets import widget as widget_module
from ipywidgets.widgets.widget_link import Link
from matplotlib.figure import Figure

import transformer_lib as tl
from transformer_lib import viz
from transformer_lib import widgets as tl_widgets

TOKENS = ["the", "cat", "sat", "down"]


def labels(ticklabels):
    return [t.get_text() for t in ticklabels]


def image_axes(fig):
    """The axes that show an image (the colour bars are the others)."""
    return [ax for ax in fig.axes if ax.images]


# --------------------------------------------------------------------------- viz


class TestHeatmap:
    def test_labels_titles_and_colorbar(self):
        m = np.arange(12.0).reshape(3, 4)
        ax = viz.heatmap(m, x_labels=TOKENS, y_labels=TOKENS[:3], xlabel="keys", ylabel="queries", title="scores")
        assert labels(ax.get_xticklabels()) == TOKENS
        assert labels(ax.get_yticklabels()) == TOKENS[:3]
        assert (ax.get_xlabel(), ax.get_ylabel(), ax.get_title()) == ("keys", "queries", "scores")
        assert len(ax.figure.axes) == 2  # the map and its colour bar
        np.testing.assert_array_equal(ax.images[0].get_array(), m)

    def test_colorbar_label(self):
        ax = viz.heatmap(np.eye(2), colorbar_label="attention weight")
        bar_axes = [a for a in ax.figure.axes if a is not ax]
        assert bar_axes[0].get_ylabel() == "attention weight"
        assert viz.heatmap(np.eye(2)).figure.axes[1].get_ylabel() == ""

    def test_into_given_axes_without_colorbar(self):
        fig, (a, b) = plt.subplots(1, 2)
        out = viz.heatmap(torch.eye(3, requires_grad=True) * 2, ax=b, colorbar=False)
        assert out is b and len(fig.axes) == 2 and not a.images
        np.testing.assert_array_equal(b.images[0].get_array(), 2 * np.eye(3))

    def test_annotate(self):
        ax = viz.heatmap(np.array([[0.25, 0.75], [1.0, 0.0]]), annotate=True, fmt="{:.1f}")
        assert sorted(t.get_text() for t in ax.texts) == ["0.0", "0.2", "0.8", "1.0"]

    @pytest.mark.parametrize("cmap", ["viridis", "Blues", "magma", "RdBu"])
    def test_annotations_stay_readable_on_any_colour_map(self, cmap):
        # text colour follows the cell's lightness, not its value: black on light cells
        m = np.array([[0.0, 0.25, 0.5, 0.75, 1.0]])
        ax = viz.heatmap(m, annotate=True, cmap=cmap, vmin=0, vmax=1)
        cmap_ = plt.get_cmap(cmap)
        for text, value in zip(ax.texts, m[0]):
            r, g, b, _ = cmap_(value)
            light = 0.299 * r + 0.587 * g + 0.114 * b > 0.5
            assert text.get_color() == ("black" if light else "white"), (cmap, value)
        light_cells = [t.get_color() == "black" for t in ax.texts]
        assert any(light_cells) and not all(light_cells)

    def test_errors(self):
        with pytest.raises(ValueError, match=r"matrix must have shape \(rows, cols\), got shape \(2, 2, 2\)"):
            viz.heatmap(np.zeros((2, 2, 2)))
        with pytest.raises(ValueError, match=r"matrix must have shape \(rows, cols\), got shape \(3,\)"):
            viz.heatmap(np.zeros(3))
        with pytest.raises(ValueError, match=r"x_labels must have 4 entries to match the matrix, got 3"):
            viz.heatmap(np.zeros((2, 4)), x_labels=TOKENS[:3])
        with pytest.raises(ValueError, match=r"y_labels must have 2 entries to match the matrix, got 4"):
            viz.heatmap(np.zeros((2, 4)), y_labels=TOKENS)


class TestPlotAttention:
    def test_one_map(self):
        w = torch.softmax(torch.randn(4, 4), -1)
        fig = viz.plot_attention(w, x_labels=TOKENS, titles=["head 1"], suptitle="one")
        assert isinstance(fig, Figure)
        maps = image_axes(fig)
        assert len(maps) == 1 and len(fig.axes) == 2
        ax = maps[0]
        assert labels(ax.get_xticklabels()) == TOKENS
        assert labels(ax.get_yticklabels()) == TOKENS  # square: queries default to the key tokens
        assert (ax.get_xlabel(), ax.get_ylabel(), ax.get_title()) == ("keys", "queries", "head 1")
        assert fig._suptitle.get_text() == "one"
        assert ax.images[0].get_clim() == (0.0, 1.0)

    def test_several_maps(self):
        w = np.random.default_rng(0).random((3, 2, 4))
        fig = viz.plot_attention(w, x_labels=TOKENS, y_labels=["a", "b"], titles=["h1", "h2", "h3"])
        maps = image_axes(fig)
        assert len(maps) == 3 and len(fig.axes) == 6
        assert [ax.get_title() for ax in maps] == ["h1", "h2", "h3"]
        assert labels(maps[0].get_yticklabels()) == ["a", "b"]
        assert maps[1].get_yticks().size == 0  # only the first map names the queries
        for ax, m in zip(maps, w):
            np.testing.assert_array_equal(ax.images[0].get_array(), m)

    def test_weights_from_a_module(self):
        mha = tl.MultiHeadAttention(8, 2)
        x = torch.randn(1, 4, 8)
        mha(x, x, x)
        fig = viz.plot_attention(mha.attention_weights[0], x_labels=TOKENS)
        assert len(image_axes(fig)) == 2

    def test_errors(self):
        layouts = r"weights must have shape \(q_len, k_len\) or \(n, q_len, k_len\), "
        with pytest.raises(ValueError, match=layouts + r"got shape \(4,\)"):
            viz.plot_attention(np.zeros(4))
        with pytest.raises(ValueError, match=r"weights must have shape .*got shape \(1, 2, 3, 3\)"):
            viz.plot_attention(np.zeros((1, 2, 3, 3)))
        with pytest.raises(ValueError, match=r"titles must have 2 entries, one per map, got 1"):
            viz.plot_attention(np.zeros((2, 3, 3)), titles=["only one"])
        with pytest.raises(ValueError, match=r"x_labels must have 3 entries"):
            viz.plot_attention(np.zeros((3, 3)), x_labels=TOKENS)


class TestPlotAttentionGrid:
    def test_grid(self):
        w = torch.softmax(torch.randn(2, 3, 4, 4), -1)
        fig = viz.plot_attention_grid(w, x_labels=TOKENS, suptitle="all heads")
        maps = image_axes(fig)
        assert len(maps) == 6 and len(fig.axes) == 7  # 2 layers x 3 heads and one colour bar
        assert [ax.get_title() for ax in maps[:3]] == ["head 1", "head 2", "head 3"]
        assert [maps[0].get_ylabel(), maps[3].get_ylabel()] == ["layer 1", "layer 2"]
        assert labels(maps[3].get_xticklabels()) == TOKENS  # the bottom row names the keys
        assert maps[0].get_xticks().size == 0
        assert labels(maps[0].get_yticklabels()) == TOKENS
        assert fig.axes[-1].get_ylabel() == "attention weight"
        np.testing.assert_allclose(maps[4].images[0].get_array(), w[1, 1].numpy())
        assert {t.get_fontsize() for t in maps[3].get_xticklabels()} == {7}
        small = image_axes(viz.plot_attention_grid(w, x_labels=TOKENS, label_size=5))
        assert {t.get_fontsize() for t in small[3].get_xticklabels() + small[0].get_yticklabels()} == {5}

    def test_errors(self):
        layout = r"weights must have shape \(layers, heads, q_len, k_len\), "
        with pytest.raises(ValueError, match=layout + r"got shape \(3, 4, 4\)"):
            viz.plot_attention_grid(np.zeros((3, 4, 4)))
        with pytest.raises(ValueError, match=r"x_labels must have 5 entries to match the weights, got 4"):
            viz.plot_attention_grid(np.zeros((1, 2, 5, 5)), x_labels=TOKENS)
        with pytest.raises(ValueError, match=r"y_labels must have 3 entries to match the weights, got 4"):
            viz.plot_attention_grid(np.zeros((1, 2, 3, 4)), x_labels=TOKENS, y_labels=TOKENS)


class TestPlotCurve:
    def test_curve(self):
        ax = viz.plot_curve([3.0, 2.0, 1.5], title="training", logy=True)
        line = ax.lines[0]
        np.testing.assert_array_equal(line.get_xdata(), [1, 2, 3])
        np.testing.assert_array_equal(line.get_ydata(), [3.0, 2.0, 1.5])
        assert (ax.get_xlabel(), ax.get_ylabel(), ax.get_title()) == ("step", "loss", "training")
        assert ax.get_yscale() == "log"

    def test_tensor_and_given_axes(self):
        _, given = plt.subplots()
        ax = viz.plot_curve(torch.tensor([1.0, 0.5], requires_grad=True), ax=given, xlabel="epoch", ylabel="lr")
        assert ax is given and (ax.get_xlabel(), ax.get_ylabel()) == ("epoch", "lr")

    def test_error(self):
        with pytest.raises(ValueError, match=r"values must be one-dimensional .*got shape \(2, 2\)"):
            viz.plot_curve(np.zeros((2, 2)))


# --------------------------------------------------------------------------- widgets


def render_figure(power, colour):
    fig, ax = plt.subplots(figsize=(2, 1.5))
    x = np.linspace(0, 1, 20)
    ax.plot(x, x**power, color=colour)
    ax.set_title(f"x^{power}")
    return fig


def walk(w):
    yield w
    for child in getattr(w, "children", ()):
        yield from walk(child)


def links_into(box):
    """Every jslink whose target is a widget inside ``box``."""
    inside = {id(w) for w in walk(box)}
    return [
        w for w in list(widget_module._instances.values())
        if isinstance(w, Link) and id(w.target[0]) in inside
    ]


POWERS = [1, 2, 3, 4, 5]
COLOURS = ["red", "blue"]


@pytest.fixture(scope="module")
def box():
    """Two controls (5 x 2 figures), built once for the tests that only inspect it."""
    return tl_widgets.precomputed_interact(
        render_figure, {"power": POWERS, "colour": COLOURS},
        initial={"power": 3, "colour": "blue"}, caption="Pick <a> power", dpi=40,
    )


class TestPrecomputedInteract:
    POWERS = POWERS
    COLOURS = COLOURS

    def test_tree(self, box):
        assert isinstance(box, widgets.VBox) and "precomputed-interact" in box._dom_classes
        caption, controls, stack = box.children
        assert isinstance(caption, widgets.HTML) and caption.value == "<p>Pick &lt;a&gt; power</p>"
        slider, toggles = controls.children
        assert isinstance(slider, widgets.SelectionSlider) and slider.description == "power"
        assert isinstance(toggles, widgets.ToggleButtons) and toggles.description == "colour"
        assert list(slider.options) == [(str(p), p) for p in self.POWERS]
        assert list(toggles.options) == [(c, c) for c in self.COLOURS]
        assert (slider.value, toggles.value) == (3, "blue")
        assert (slider.index, toggles.index) == (2, 1)  # the initial values
        assert isinstance(stack, widgets.Stack) and len(stack.children) == 5
        assert stack.selected_index == 2
        for inner in stack.children:
            assert isinstance(inner, widgets.Stack) and len(inner.children) == 2 and inner.selected_index == 1
            assert all(isinstance(leaf, widgets.Image) and leaf.format == "png" for leaf in inner.children)

    def test_controls_are_jslinked_to_stacks(self, box):
        _, controls, stack = box.children
        slider, toggles = controls.children
        links = links_into(box)
        pairs = {(id(link.source[0]), link.source[1], id(link.target[0]), link.target[1]) for link in links}
        assert (id(slider), "index", id(stack), "selected_index") in pairs
        for inner in stack.children:
            assert (id(toggles), "index", id(inner), "selected_index") in pairs
        assert len(links) == 1 + len(stack.children)

    def test_one_output_per_combination(self, box):
        frames = box.frames
        assert frames.names == ("power", "colour")
        assert set(frames.outputs) == {(p, c) for p in self.POWERS for c in self.COLOURS}
        assert len(set(frames.outputs.values())) == 10  # every frame differs
        stack = box.children[2]
        for i, p in enumerate(self.POWERS):
            for j, c in enumerate(self.COLOURS):
                assert stack.children[i].children[j].value == frames.outputs[(p, c)]
                assert frames.outputs[(p, c)].startswith(b"\x89PNG")
        assert frames.slowest == max(frames.seconds.values()) and frames.slowest > 0
        assert not plt.get_fignums()  # every figure was closed after rendering

    def test_html_outputs_and_calls(self):
        calls = []

        def render(word, size):
            calls.append((word, size))
            return f"<b style='font-size:{size}px'>{word}</b>"

        words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta"]
        box = tl_widgets.precomputed_interact(render, {"word": words, "size": [10, 20]})
        assert sorted(calls) == sorted((w, s) for w in words for s in [10, 20])  # each exactly once
        controls, stack = box.children  # no caption
        assert isinstance(controls.children[0], widgets.Dropdown)  # many long labels
        assert isinstance(controls.children[1], widgets.ToggleButtons)
        assert (controls.children[0].index, stack.selected_index) == (0, 0)
        leaf = stack.children[4].children[1]
        assert isinstance(leaf, widgets.HTML) and leaf.value == "<b style='font-size:20px'>epsilon</b>"

    def test_single_control_and_bool_values(self):
        box = tl_widgets.precomputed_interact(lambda causal: f"causal={causal}", {"causal": [False, True]},
                                              initial={"causal": True})
        control = box.children[0].children[0]
        stack = box.children[1]
        assert isinstance(control, widgets.ToggleButtons) and control.index == 1
        assert [leaf.value for leaf in stack.children] == ["causal=False", "causal=True"]
        assert stack.selected_index == 1

    def test_errors(self):
        with pytest.raises(ValueError, match=r"controls must name at least one control"):
            tl_widgets.precomputed_interact(render_figure, {})
        with pytest.raises(ValueError, match=r"control 'colour' must offer at least one value"):
            tl_widgets.precomputed_interact(render_figure, {"power": [1], "colour": []})
        with pytest.raises(ValueError, match=r"initial names controls that do not exist: \['size'\]"):
            tl_widgets.precomputed_interact(render_figure, {"power": [1]}, initial={"size": 3})
        with pytest.raises(ValueError, match=r"initial value for 'power' must be one of \[1, 2\], got 7"):
            tl_widgets.precomputed_interact(render_figure, {"power": [1, 2]}, initial={"power": 7})
        with pytest.raises(TypeError, match=r"render must return a matplotlib Figure or an HTML str, got int"):
            tl_widgets.precomputed_interact(lambda a: 3, {"a": [1]})
        with pytest.raises(ValueError, match=r"controls give 441 combinations; at most 400"):
            tl_widgets.precomputed_interact(lambda a, b: "", {"a": range(21), "b": range(21)})

    def test_figure_to_png_closes(self):
        fig = render_figure(2, "red")
        png = tl_widgets.figure_to_png(fig, dpi=30)
        assert png.startswith(b"\x89PNG") and not plt.fignum_exists(fig.number)


def test_a_precomputed_widget_prints_as_one_short_line():
    box = tl_widgets.precomputed_interact(lambda n: f"<b>{n}</b>", {"n": [1, 2, 3]})
    text = box._repr_mimebundle_()["text/plain"]
    assert text == "<precomputed widget: n; 3 views>"
    assert isinstance(box, widgets.VBox)
