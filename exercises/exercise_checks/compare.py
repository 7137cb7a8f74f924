"""Comparing an answer with the expected value, with messages that point at the problem.

:func:`expect_array` is the comparison every checker ends with: the shape, the dtype, a NaN or
an inf and where it comes from, the entry that differs most, and, when the answer equals what a
known mistake computes (``mistakes``: explanation -> function computing that mistake), the name
of that mistake. :func:`expect_tuple` and :func:`expect_order` check pairs such as
``(output, weights)``, :func:`expect_ids` a list of token ids; :func:`sum_hint` says along which
axis a softmax's values sum to 1.

numpy functions used for comparisons are bound when the module is imported, before any student
code runs in the grading kernel, so rebinding ``numpy`` attributes later does not change them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from numpy import abs as _abs
from numpy import argmax as _argmax
from numpy import asarray as _asarray
from numpy import isfinite as _isfinite
from numpy import isnan as _isnan
from numpy import ndarray as _ndarray
from numpy import round as _round
from numpy import unravel_index as _unravel_index

from .recording import Unconvertible

RTOL, ATOL = 1e-5, 1e-7

# shared hints
MATMUL_HINT = (
    "for batched arrays swap only the last two axes of K, with np.swapaxes(K, -1, -2) "
    "(K.T reverses every axis)"
)
LINEAR_HINT = (
    "each weight matrix is stored as nn.Linear stores it, (out_features, in_features), as in the "
    "library's MultiHeadAttention and FeedForward: project with x @ W.T + b"
)


def fmt(a: Any) -> str:
    """An array printed short: 4 digits, at most about 40 entries."""
    return np.array2string(_asarray(a), precision=4, suppress_small=True, max_line_width=100, threshold=40)


def close(got: np.ndarray, want: np.ndarray, rtol: float = RTOL, atol: float = ATOL) -> bool:
    """Same shape, the same infinities in the same places, and every finite entry within tolerance."""
    if not isinstance(got, _ndarray) or got.shape != want.shape:
        return False
    if want.dtype.kind == "b" or got.dtype.kind == "b":
        return bool((got == want).all())
    g, w = got.astype(np.float64), want.astype(np.float64)
    finite = _isfinite(w)
    if not bool((_isfinite(g) == finite).all()) or not bool((g[~finite] == w[~finite]).all()):
        return False
    return bool((_abs(g[finite] - w[finite]) <= atol + rtol * _abs(w[finite])).all())


def matches(got: Any, candidate: Callable[[], Any], rtol: float = 1e-6) -> bool:
    """Whether the answer equals a known mistake (which may itself fail to compute)."""
    try:
        with np.errstate(all="ignore"):
            c = candidate()
        if isinstance(got, tuple) and isinstance(c, tuple):
            return len(got) == len(c) and all(
                close(g, _asarray(x, dtype=np.float64), rtol) for g, x in zip(got, c, strict=True)
            )
        return close(got, _asarray(c, dtype=np.float64), rtol)
    except Exception:
        return False


def mistake_note(got: Any, mistakes: dict[str, Callable[[], Any]] | None) -> str:
    """``"\\nHint: <explanation>"`` for the first mistake equal to the answer, else ``""``."""
    for explanation, candidate in (mistakes or {}).items():
        if matches(got, candidate):
            return f"\nHint: {explanation}"
    return ""


def _first_difference(got: np.ndarray, want: np.ndarray, what: str, does: str) -> str:
    g, w = got.astype(np.float64), want.astype(np.float64)
    diff = _abs(np.where(_isfinite(w), g - w, np.where(g == w, 0.0, np.inf)))
    where = _unravel_index(int(_argmax(diff)), diff.shape) if diff.ndim else ()
    idx = tuple(int(i) for i in where)
    message = (
        f"{what} {does} not match the expected values: the largest difference is at index {idx} "
        f"(got {g[idx]:.6g}, expected {w[idx]:.6g})"
    )
    if got.size <= 40:
        message += f"\ngot:\n{fmt(got)}\nexpected:\n{fmt(want)}"
    return message


def expect_array(
    got: Any,
    want: Any,
    what: str,
    *,
    mistakes: dict[str, Callable[[], Any]] | None = None,
    nan_hint: str = "",
    rtol: float = RTOL,
    atol: float = ATOL,
    exact: bool = False,
    fallback_hint: str = "",
    plural: bool = False,
) -> None:
    """Assert that ``got`` equals ``want``; otherwise explain the difference.

    ``mistakes`` maps an explanation to a function computing what that mistake would return;
    the first one equal to the answer is named in the message, else ``fallback_hint`` if given.
    ``plural`` says that ``what`` is a plural noun ("the attention weights"), for the verbs.
    """
    verbs = ("have", "do", "contain", "are") if plural else ("has", "does", "contains", "is")
    has, does, contains, is_ = verbs
    want = _asarray(want)
    if isinstance(got, tuple):
        raise AssertionError(
            f"{what} should be one array of shape {want.shape}, but it is a tuple of {len(got)}")
    if isinstance(got, Unconvertible):
        raise AssertionError(f"{what} should be an array of numbers, but it is {got!r}")
    got = _asarray(got)
    if got.shape != want.shape:
        message = f"{what} {has} shape {got.shape}, expected {want.shape}"
        if got.ndim == want.ndim and got.shape == want.shape[::-1]:
            message += " (the axes are swapped)"
        raise AssertionError(message + mistake_note(got, mistakes))
    if want.dtype.kind == "b":
        if got.dtype.kind != "b":
            raise AssertionError(f"{what} should hold booleans (dtype bool), got dtype {got.dtype}; "
                                 "compare or use np.tril(...).astype(bool)")
        if not bool((got == want).all()):
            wrong = np.argwhere(got != want)
            raise AssertionError(
                f"{what} {is_} wrong at {len(wrong)} of {got.size} entries, first at index "
                f"{tuple(int(i) for i in wrong[0])}\ngot:\n{fmt(got)}\nexpected:\n{fmt(want)}"
                + mistake_note(got, mistakes)
            )
        return
    if got.dtype.kind not in "biuf":
        raise AssertionError(f"{what} should hold numbers, got dtype {got.dtype}")
    if bool(_isfinite(want).all()) and not bool(_isfinite(got).all()):
        kind = "NaN" if bool(_isnan(got).any()) else "inf"
        raise AssertionError(f"{what} {contains} {kind}" + (f": {nan_hint}" if nan_hint else "")
                             + mistake_note(got, mistakes))
    ok = bool((got == want).all()) if exact else close(got, want, rtol, atol)
    if ok:
        return
    note = mistake_note(got, mistakes)
    if not note and fallback_hint:
        note = f"\nHint: {fallback_hint}"
    raise AssertionError(_first_difference(got, want, what, does) + note)


def expect_ids(got: Any, what: str) -> list[int]:
    """The answer as a flat list of integer token ids (floats that are whole numbers accepted);
    an AssertionError saying what came instead."""
    if isinstance(got, (Unconvertible, tuple)):
        raise AssertionError(f"{what} should return a list of integer token ids, but it returned {got!r}")
    ids = _asarray(got)
    integral = ids.dtype.kind in "iu" or (ids.dtype.kind == "f" and bool((ids == _round(ids)).all()))
    if ids.ndim != 1 or not integral:
        raise AssertionError(f"{what} should return a flat list of integer token ids, got {fmt(ids)}")
    return [int(i) for i in ids]


def expect_tuple(got: Any, n: int, what: str, names: str) -> tuple:
    """Assert that the answer is a tuple of ``n`` values (e.g. ``(output, weights)``)."""
    if not isinstance(got, tuple) or len(got) != n:
        kind = f"a tuple of {len(got)}" if isinstance(got, tuple) else "a single value"
        raise AssertionError(f"{what} should return a tuple {names}, but it returned {kind}")
    return got


def expect_order(got: tuple, want: tuple, what: str, names: str) -> None:
    """Say so when a pair was returned the wrong way round, e.g. ``(weights, output)``.

    Recognised by the shapes (each value has the shape of the other one) or, when the two shapes
    are equal, by the values (the pair reversed equals the expected pair).
    """
    swapped = tuple(reversed(want))
    shapes = tuple(getattr(g, "shape", None) for g in got)
    wanted = tuple(_asarray(w).shape for w in want)
    if wanted[0] != wanted[1] and shapes == wanted[::-1]:
        reason = f"the first value has the shape of the second, {wanted[1]}, and the second that of the first"
    elif matches(got, lambda: swapped):
        reason = "they hold the right values, the wrong way round"
    else:
        return
    raise AssertionError(f"{what} returned its two values in the wrong order: {reason}. Return them in the "
                         f"order {names}")


def sum_hint(got: Any, axis: int, shape: tuple) -> str:
    """Say along which axis an answer's values sum to 1, when it is not the requested one."""
    if not isinstance(got, _ndarray) or got.shape != shape or got.dtype.kind not in "biuf" or not got.ndim:
        return ""
    with np.errstate(all="ignore"):
        g = got.astype(np.float64)
        if close(g.sum(axis=axis), np.ones(np.delete(shape, axis % len(shape))), 1e-6, 1e-9):
            return ""
        for a in range(g.ndim):
            if a != axis % g.ndim and close(g.sum(axis=a), np.ones(np.delete(shape, a)), 1e-6, 1e-9):
                return (f"the values sum to 1 along axis {a}, not along axis {axis}: take the maximum and "
                        f"the sum along the same axis, axis={axis}, with keepdims=True")
        return f"the values along axis {axis} should sum to 1; here they sum to {fmt(g.sum(axis=axis))}"
