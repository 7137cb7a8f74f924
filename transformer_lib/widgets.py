"""One way to build the course's interactive controls, so they work everywhere.

:func:`precomputed_interact` draws the output for every combination of control values
in advance and stacks them in an ``ipywidgets.Stack``; each control is linked to its
stack with ``jslink``, so switching happens in the browser. The same widget therefore
responds at once in a live notebook and keeps working in the static HTML book, where no
kernel runs: a control never moves without effect.

The drawing itself is a plain function (``render(**values)`` returning a matplotlib
figure or an HTML string), so chapters and tests can call it without a browser. This
module sits on top of the core and is never imported by it.
"""

from __future__ import annotations

import html
import io
import itertools
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import ipywidgets as widgets
import matplotlib.pyplot as plt
from matplotlib.figure import Figure

Rendered = Figure | str
MAX_FRAMES = 400


@dataclass
class Frames:
    """Every output of a ``render`` function, keyed by the tuple of control values."""

    names: tuple[str, ...]
    values: tuple[tuple[Any, ...], ...]
    outputs: dict[tuple[Any, ...], bytes | str] = field(default_factory=dict)
    seconds: dict[tuple[Any, ...], float] = field(default_factory=dict)

    @property
    def slowest(self) -> float:
        """The longest time one output took to compute and draw, in seconds."""
        return max(self.seconds.values())


def figure_to_png(fig: Figure, dpi: int = 100) -> bytes:
    """Render a matplotlib figure to PNG bytes and close it."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    return buffer.getvalue()


def precompute(render: Callable[..., Rendered], controls: Mapping[str, Sequence[Any]], dpi: int = 100) -> Frames:
    """Call ``render`` once for every combination of control values and keep the outputs.

    Args:
        render: ``render(**values)`` returns a matplotlib ``Figure`` or an HTML string.
        controls: control name -> the values it offers (at least one each).
    """
    if not controls:
        raise ValueError("controls must name at least one control, got none")
    names = tuple(controls)
    values = tuple(tuple(controls[name]) for name in names)
    for name, options in zip(names, values):
        if not options:
            raise ValueError(f"control {name!r} must offer at least one value, got none")
    combinations = list(itertools.product(*values))
    if len(combinations) > MAX_FRAMES:
        raise ValueError(
            f"controls give {len(combinations)} combinations; at most {MAX_FRAMES} can be precomputed"
        )
    frames = Frames(names, values)
    for combo in combinations:
        start = time.perf_counter()
        out = render(**dict(zip(names, combo)))
        if isinstance(out, Figure):
            out = figure_to_png(out, dpi=dpi)
        elif not isinstance(out, str):
            raise TypeError(f"render must return a matplotlib Figure or an HTML str, got {type(out).__name__}")
        frames.seconds[combo] = time.perf_counter() - start
        frames.outputs[combo] = out
    return frames


def _control(name: str, options: tuple[Any, ...], initial: Any, label_width: str = "initial") -> widgets.Widget:
    """A slider, toggle buttons or a drop-down for one control, its label beside it.

    ``label_width`` is the same for every control of a widget, so controls stacked on separate
    lines start at the same place (the book's style sheet sets labels in the body text's size
    and keeps each beside its control); a slider fills its line up to 420 px, so it shrinks on
    a phone instead of widening the page.
    """
    index = options.index(initial) if initial is not None else 0
    labels = [str(o) for o in options]
    style = {"description_width": label_width}
    if all(isinstance(o, (int, float)) and not isinstance(o, bool) for o in options) and len(options) > 3:
        return widgets.SelectionSlider(options=list(zip(labels, options)), index=index, description=name,
                                       continuous_update=True, style=style,
                                       layout=widgets.Layout(width="100%", max_width="420px"))
    if len(options) <= 4 and sum(len(s) for s in labels) <= 48:
        return widgets.ToggleButtons(options=list(zip(labels, options)), index=index, description=name,
                                     style=style)
    return widgets.Dropdown(options=list(zip(labels, options)), index=index, description=name, style=style,
                            layout=widgets.Layout(max_width="100%"))


def _leaf(output: bytes | str) -> widgets.Widget:
    if isinstance(output, bytes):
        return widgets.Image(value=output, format="png", layout=widgets.Layout(max_width="100%"))
    return widgets.HTML(value=output)


class PrecomputedInteract(widgets.VBox):
    """What :func:`precomputed_interact` returns: a ``VBox`` whose plain-text form is one short line.

    A notebook saved without widget state (or shown where widgets do not render) prints
    that line instead of a long ``VBox(children=(HTML(...``.
    """

    def __repr__(self) -> str:
        frames = getattr(self, "frames", None)
        if frames is None:
            return "<precomputed widget>"
        return f"<precomputed widget: {', '.join(frames.names)}; {len(frames.outputs)} views>"


def precomputed_interact(
    render: Callable[..., Rendered],
    controls: Mapping[str, Sequence[Any]],
    *,
    initial: Mapping[str, Any] | None = None,
    caption: str = "",
    dpi: int = 100,
) -> widgets.VBox:
    """Controls plus an output area, with every output drawn in advance.

    Args:
        render: ``render(**values)`` returns a matplotlib ``Figure`` or an HTML string.
        controls: control name -> the values it offers. Numbers become a slider, a few
            short options toggle buttons, anything else a drop-down.
        initial: control name -> the value shown first (default: each control's first).
        caption: a line of text shown above the controls.
        dpi: resolution of the precomputed figures (100, as the notebooks draw inline: a
            figure 6.7 inches wide fills the book's 670-pixel column at full size).

    Returns:
        A ``VBox`` to display; its ``frames`` attribute holds the precomputed
        :class:`Frames` (outputs and the time each took), for tests.
    """
    initial = dict(initial or {})
    unknown = set(initial) - set(controls)
    if unknown:
        raise ValueError(f"initial names controls that do not exist: {sorted(unknown)}")
    for name, value in initial.items():
        if value not in tuple(controls[name]):
            raise ValueError(f"initial value for {name!r} must be one of {list(controls[name])}, got {value!r}")
    frames = precompute(render, controls, dpi=dpi)
    label_width = f"{max(len(n) for n in frames.names) + 1}ch"  # the longest name, and a space
    inputs = [_control(n, v, initial.get(n), label_width) for n, v in zip(frames.names, frames.values)]

    def build(level: int, chosen: tuple[Any, ...]) -> widgets.Widget:
        if level == len(inputs):
            return _leaf(frames.outputs[chosen])
        children = [build(level + 1, (*chosen, v)) for v in frames.values[level]]
        stack = widgets.Stack(children, selected_index=inputs[level].index)
        widgets.jslink((inputs[level], "index"), (stack, "selected_index"))
        return stack

    parts: list[widgets.Widget] = []
    if caption:
        parts.append(widgets.HTML(value=f"<p>{html.escape(caption)}</p>"))
    controls_box = widgets.HBox(inputs, layout=widgets.Layout(flex_flow="row wrap"))
    controls_box.add_class("precomputed-controls")  # styled (and left out of print) by the book
    parts += [controls_box, build(0, ())]
    box = PrecomputedInteract(parts)
    box.add_class("precomputed-interact")
    box.frames = frames
    return box
