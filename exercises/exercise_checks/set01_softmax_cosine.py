"""Checkers of set 1: cosine similarity, a stable softmax, cosine attention, temperature.

Each checker calls the answer once (:func:`~exercise_checks.recording.call`), then computes the
expected value with the library (``tl.cosine_similarity``, ``tl.softmax``, ``tl.cosine_attention``)
and compares, naming the classic mistakes of each question.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from numpy import asarray as _asarray
from numpy import isfinite as _isfinite

from .compare import expect_array, expect_order, expect_tuple, sum_hint
from .recording import call
from .reference import naive_softmax, reference_softmax, tl


def check_cosine_similarity(cosine_similarity: Any, A: Any, B: Any = None) -> None:
    """Check ``cosine_similarity(A[, B])``: the ``(n, m)`` array of ``tl.cosine_similarity``."""
    A = _asarray(A, dtype=np.float64)
    B_ = None if B is None else _asarray(B, dtype=np.float64)
    if B_ is None:
        got = call("cosine_similarity", cosine_similarity, A)
    else:
        got = call("cosine_similarity", cosine_similarity, A, B_)
    other = A if B_ is None else B_
    want = tl.cosine_similarity(A, B_)
    has_zero_row = bool((np.linalg.norm(A, axis=1) == 0).any() or (np.linalg.norm(other, axis=1) == 0).any())
    expect_array(
        got, want, "cosine_similarity(A, B)" if B_ is not None else "cosine_similarity(A)",
        nan_hint=(
            "a row of zeros has no direction; define its similarity with anything as 0 instead of "
            "dividing by a zero norm (np.divide(..., where=norm > 0) or a mask)"
            if has_zero_row else "check for a division by zero"
        ),
        mistakes={
            "these are plain dot products A @ B.T; divide each by the two vectors' lengths": lambda: (
                A @ other.T),
            "the norms were taken down the columns (axis=0); each vector is a row, so use axis=1": lambda: (
                A / np.linalg.norm(A, axis=0)) @ (other / np.linalg.norm(other, axis=0)).T,
            "only A's rows were normalised; divide by the norms of B's rows too": lambda: (
                A / np.linalg.norm(A, axis=1, keepdims=True)) @ other.T,
        },
    )


def _softmax_mistakes(x: np.ndarray, axis: int) -> dict[str, Callable[[], Any]]:
    """What the classic slips of a softmax along ``axis`` compute."""
    mistakes: dict[str, Callable[[], Any]] = {}
    for a in range(x.ndim):
        if a != axis % x.ndim:
            mistakes[f"the values sum to 1 along axis {a}; normalise along axis={axis} "
                     "(np.sum(..., axis=axis, keepdims=True))"] = lambda a=a: reference_softmax(x, axis=a)
    mistakes["the maximum was subtracted over the whole array, not per slice along the axis: "
             "slices far below the global maximum underflow to 0/0"] = lambda: (
        naive_softmax(x - x.max(), axis))
    mistakes["the exponentials were not divided by their sum"] = lambda: (
        np.exp(x - x.max(axis=axis, keepdims=True)))
    if x.ndim > 1:  # without keepdims a reduction lines up with the last axis (a square array shows no error)
        def lost_axis(max_keeps: bool | None, sum_keeps: bool) -> np.ndarray:
            e = np.exp(x if max_keeps is None else x - x.max(axis=axis, keepdims=max_keeps))
            return e / e.sum(axis=axis, keepdims=sum_keeps)

        for parts, max_keeps, sum_keeps in (("the maximum and the sum were", False, False),
                                            ("the sum was", True, False), ("the maximum was", False, True),
                                            ("the sum was", None, False)):
            mistakes[f"{parts} taken without keepdims=True: the reduced array has lost axis {axis}, so "
                     "numpy lines it up with the last axis and each entry is combined with another slice's "
                     "maximum or sum (for a square array there is no error, only wrong values); pass "
                     "keepdims=True"
                     + ("" if max_keeps is not None else ", and subtract the maximum first")] = (
                lambda m=max_keeps, k=sum_keeps: lost_axis(m, k))
    return mistakes


def check_softmax(softmax: Any, x: Any, axis: int | None = None) -> None:
    """Check ``softmax(x[, axis=axis])``, ``x`` of any shape: ``tl.softmax`` along the axis."""
    x = _asarray(x, dtype=np.float64)
    if axis is None:
        got = call("softmax", softmax, x)
        axis_ = -1
    else:
        got = call("softmax", softmax, x, axis=axis)
        axis_ = axis
    what = "softmax(x)" if axis is None else f"softmax(x, axis={axis})"
    want = reference_softmax(x, axis=axis_)
    if x.shape and x.shape[axis_] > 0 and not bool(np.isinf(x).any()):
        with np.errstate(all="ignore"):
            overflow = not bool(_isfinite(naive_softmax(x, axis_)).all())
    else:
        overflow = False
    expect_array(
        got, want, what, mistakes=_softmax_mistakes(x, axis_), fallback_hint=sum_hint(got, axis_, want.shape),
        nan_hint=(
            "np.exp overflowed (or underflowed to 0/0) for these large logits; subtract the "
            f"maximum along axis={axis_} first (keepdims=True): softmax(x) = softmax(x - max(x))"
            if overflow else
            "an entry of -inf must get weight exactly 0 (exp(-inf) = 0); a NaN means 0/0 or "
            "inf - inf somewhere"
        ),
    )


def check_cosine_attention(cosine_attention: Any, X: Any) -> None:
    """Check ``cosine_attention(X)``: ``(Z, weights)`` of ``tl.cosine_attention``."""
    X = _asarray(X, dtype=np.float64)
    out = call("cosine_attention", cosine_attention, X)
    got = expect_tuple(out, 2, "cosine_attention(X)", "(Z, weights)")
    Z_want, w_want = tl.cosine_attention(X)
    cos = tl.cosine_similarity(X)
    expect_order(got, (Z_want, w_want), "cosine_attention(X)", "(Z, weights)")
    w_got = got[1]
    expect_array(
        w_got, w_want, "the weights returned by cosine_attention(X)", plural=True,
        fallback_hint=sum_hint(w_got, -1, w_want.shape),
        mistakes={
            "the weights use dot products X @ X.T; use cosine similarities, so long vectors do not "
            "dominate": lambda: reference_softmax(X @ X.T),
            "the softmax normalised the columns (axis=0); each query's row must sum to 1": lambda: (
                reference_softmax(cos, 0)),
            "these are the raw cosine similarities; apply the softmax row by row": lambda: cos,
        },
    )
    expect_array(
        got[0], Z_want, "Z returned by cosine_attention(X)",
        mistakes={
            "Z = weights.T @ X; row i of Z is sum_j weights[i, j] X[j], i.e. weights @ X": lambda: (
                w_want.T @ X),
            "Z is X itself; each new vector is the weighted average weights @ X": lambda: X,
        },
    )


def check_softmax_with_temperature(softmax_with_temperature: Any, x: Any, T: float) -> None:
    """Check ``softmax_with_temperature(x, T)``: ``tl.softmax(x / T)``, last axis."""
    x = _asarray(x, dtype=np.float64)
    got = call("softmax_with_temperature", softmax_with_temperature, x, T)
    want = reference_softmax(x / T)
    with np.errstate(all="ignore"):
        overflow = not bool(_isfinite(naive_softmax(x / T)).all())
    expect_array(
        got, want, f"softmax_with_temperature(x, T={T})",
        nan_hint=(
            "dividing by a small temperature makes the logits huge, so np.exp overflows; "
            "use your stable softmax on x / T" if overflow else "check for 0/0"
        ),
        mistakes={
            "x was multiplied by T; divide the logits by T (a higher temperature flattens the "
            "distribution)": lambda: reference_softmax(x * T),
            "the temperature was ignored": lambda: reference_softmax(x),
            "the softmax normalised along axis 0; use the last axis": lambda: reference_softmax(x / T, 0),
        },
    )
