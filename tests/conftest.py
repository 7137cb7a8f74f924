"""Shared test set-up: a non-interactive plotting backend and no figure left open."""

from __future__ import annotations

import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

# The tests use small tensors and run two workers on two cores (pytest -n 2): one thread
# each avoids oversubscription and keeps the timings steady.
torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _close_figures():
    """Close every matplotlib figure a test opened, so memory stays flat."""
    yield
    plt.close("all")


ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def chapter(request):
    """The module's chapter (``CHAPTER = "05_masking"``), executed top to bottom in a kernel.

    A module may name cells its widgets do not need, ``CELLS_NOT_NEEDED = {cell id: why}``
    (a live training run whose results no widget reads): they are left out, and every other
    cell runs in order. nbval still runs the whole chapter.

    Tests reach the chapter's own names through testbook: ``chapter.inject(code)`` runs
    code in the kernel (an ``AssertionError`` there fails the test) and
    ``chapter.value(expression)`` brings a JSON value back; ``_best_seconds(call)`` in the
    kernel times a widget's computation. Widget speed and distinctness
    checks live here, beside the chapter rather than in it, and call the same render
    functions the chapter's widgets do.
    """
    from testbook import testbook

    path = ROOT / "chapters" / f"{request.module.CHAPTER}.ipynb"
    execute = True
    skipped = getattr(request.module, "CELLS_NOT_NEEDED", {})
    if skipped:  # cell id -> why the widgets do not need it (a live training run the chapter shows)
        import nbformat

        cells = nbformat.read(path, as_version=4).cells
        missing = set(skipped) - {c.get("id") for c in cells}
        assert not missing, f"{path.name} has no cells with ids {sorted(missing)}: update CELLS_NOT_NEEDED"
        execute = [i for i, c in enumerate(cells) if c.get("id") not in skipped]
    with testbook(path, execute=execute, timeout=600) as tb:
        tb.inject("import torch; torch.set_num_threads(1)")
        tb.inject(BEST_SECONDS)
        yield tb


def assert_frames_fit_the_column(chapter, widget: str, max_width: int = 700) -> None:
    """Every precomputed frame of the chapter's ``widget`` fits the book's column, ``max_width`` pixels.

    A figure's frame is one PNG at most ``max_width`` pixels wide (bytes 16-24 of a PNG hold its
    width and height). An HTML frame is a ``<div>`` whose ``max-width`` bounds it, every width it
    sets in pixels is at most ``max_width``, and long words wrap (``overflow-wrap:anywhere``)
    rather than widen it. The check runs in the kernel, under names that leave the chapter's alone.
    """
    chapter.inject(
        f"""
import re as _re
import struct as _struct

assert {widget}.frames.outputs, "{widget} has no frames"
for _key, _frame in {widget}.frames.outputs.items():
    if isinstance(_frame, bytes):
        assert _frame.startswith(b"\\x89PNG\\r\\n\\x1a\\n"), (_key, "not a PNG", _frame[:8])
        _width = _struct.unpack(">II", _frame[16:24])[0]
        assert _width <= {max_width}, (_key, _width)
    else:
        assert _re.match(r"<div style='max-width:\\s*\\d+px;", _frame), (_key, _frame[:60])
        _widths = [int(w) for w in _re.findall(r"width:\\s*(\\d+)px", _frame)]
        assert max(_widths) <= {max_width}, (_key, _widths)
        assert "overflow-wrap:anywhere" in _frame, (_key, "long words widen the frame")
"""
    )


@pytest.fixture
def one_thread():
    """One thread for a test that trains: small models train fastest on one, the recorded runs
    used one (so a rerun repeats them), and the other cores are left alone."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# Injected into every chapter's kernel: the time a widget's computation takes, as processor
# time and the best of a few runs, so that a busy machine does not decide a speed check.
BEST_SECONDS = """
def _best_seconds(call, repeats=5):
    import time

    seconds = []
    for _ in range(repeats):
        start = time.process_time()
        call()
        seconds.append(time.process_time() - start)
    return min(seconds)
"""


def ratio_of_rounded(ratio: float, num: float, den: float, step: float, ratio_step: float) -> bool:
    """Whether a rounded ``ratio`` agrees with ``num / den`` when ``num`` and ``den`` were rounded
    to multiples of ``step`` and the ratio (from the unrounded values) to a multiple of ``ratio_step``.

    Benchmark rows keep a few decimals of each time, so at tiny sizes the quotient of the
    printed times can be far from the printed ratio; this is the widest honest interval.
    """
    half, slack = step / 2, ratio_step / 2 + 1e-12
    low = (num - half) / (den + half)
    high = (num + half) / max(den - half, 1e-12)
    return low - slack <= ratio <= high + slack


@pytest.fixture
def rounded_ratio():
    """``ratio_of_rounded`` for tests: ``rounded_ratio(ratio, num, den, step, ratio_step)``."""
    return ratio_of_rounded


def sleep_in_encoder(model: torch.nn.Module, in_steps: float, in_evaluation: float) -> dict[bool, list[float]]:
    """Make every pass through ``model.encoder`` sleep: ``in_steps`` seconds in training mode,
    ``in_evaluation`` in evaluation mode. Returns the seconds slept, keyed by ``module.training``
    (filled as the model runs), so that a test can tell wall time from processor time."""
    slept: dict[bool, list[float]] = {True: [], False: []}

    def sleep(module, args) -> None:
        seconds = in_steps if module.training else in_evaluation
        slept[module.training].append(seconds)
        time.sleep(seconds)

    model.encoder.register_forward_pre_hook(sleep)
    return slept


@pytest.fixture
def sleepy_encoder():
    """``sleep_in_encoder`` for tests: ``sleepy_encoder(model, in_steps, in_evaluation)``."""
    return sleep_in_encoder


def padded_batch(seed: int = 0):
    """Right-padded source and target ids (pad 0) and their masks: 3 pairs, sources of 8, 5 and 2
    tokens (width 8), targets of 6, 3 and 5 (width 6)."""
    import transformer_lib as tl  # here, so that collecting the tests does not import the library

    g = torch.Generator().manual_seed(seed)
    src = torch.randint(3, 11, (3, 8), generator=g)
    tgt = torch.randint(3, 13, (3, 6), generator=g)
    for i, (s, t) in enumerate([(8, 6), (5, 3), (2, 5)]):
        src[i, s:] = 0
        tgt[i, t:] = 0
    src_mask = tl.padding_mask(src, 0)  # (batch, 1, 1, src_len)
    tgt_mask = tl.causal_mask(6) & tl.padding_mask(tgt, 0)  # (batch, 1, tgt_len, tgt_len)
    return src, tgt, src_mask, tgt_mask
