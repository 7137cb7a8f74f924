"""Checks for the graded exercises: one checker per answer, used by public and hidden tests alike.

Every test in an instructor notebook is a small function that builds an input and hands the
student's function to a checker here, for example ``check_softmax(softmax, x)``. A checker

1. calls the student's function through :func:`call` (on copies of the inputs, so an answer
   that writes into its input cannot spoil the comparison);
2. computes the expected value with ``transformer_lib`` or PyTorch, never from stored numbers,
   so the hidden tests hold inputs but no answers;
3. compares the two and, when they differ, says what is wrong in words a student can act on:
   the shape, a NaN, the axis, or a named classic mistake ("you divided by d_k instead of
   sqrt(d_k)") recognised by recomputing that mistake and finding it equal to the answer.

Grading runs each checker twice (see ``exercises/grade.py``). In the grading kernel, where the
reference library is not installed, :func:`call` runs the student's function, records the
returned value as plain arrays in the directory named by the environment variable
``EXERCISES_RECORD_DIR`` (keyed by a hash of the answer's name and inputs) and stops the test
there, before any expected value is needed. Then, in the grader's
own process, where no student code ever ran, the same tests run again with :class:`Replay`
placeholders instead of the student's functions: :func:`call` looks the recorded value up by the
same hash and the checker compares it with a reference computed there. Only that second verdict
counts, so rebinding ``np.allclose``, patching this module or otter inside the notebook, or
rewriting the test files cannot move the score: the only way to pass is to return the right values.

Functions used for comparisons are bound when this module is imported (before any student code
when grading), so rebinding ``numpy`` attributes later does not change them in the notebook either.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import zipfile
from collections.abc import Callable
from typing import Any

import numpy as np
from numpy import abs as _abs
from numpy import argmax as _argmax
from numpy import array as _array
from numpy import asarray as _asarray
from numpy import isfinite as _isfinite
from numpy import isnan as _isnan
from numpy import ndarray as _ndarray
from numpy import unravel_index as _unravel_index

RECORD_DIR_ENV = "EXERCISES_RECORD_DIR"
_RECORD_DIR = os.environ.get(RECORD_DIR_ENV)  # read once, at import

if not _RECORD_DIR:  # a self-check, or the grader's own process: the reference is the library
    import transformer_lib as tl
_MAX_RECORD_BYTES = 8_000_000  # a recorded answer larger than this is not loaded back

RTOL, ATOL = 1e-5, 1e-7


# --------------------------------------------------------------------------------------------
# Calling, recording and replaying answers
# --------------------------------------------------------------------------------------------


class Replay:
    """Stands in for a student's function in the grader's clean process.

    :func:`call` recognises it and returns the value recorded in the notebook for the same
    inputs instead of running anything.
    """

    def __init__(self, name: str, record_dir: str):
        self.name = name
        self.record_dir = record_dir

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"tests must call {self.name} through exercise_checks.call")

    def lookup(self, key: str) -> Any:
        path = os.path.join(self.record_dir, key + ".npz")
        if os.path.exists(os.path.join(self.record_dir, key + ".conflict")):
            raise AssertionError(f"{self.name} gave different answers for the same input")
        if not os.path.isfile(path) or os.path.getsize(path) > _MAX_RECORD_BYTES:
            raise AssertionError(f"no answer of {self.name} was recorded for this input")
        try:
            return load_answer(path)
        except Exception as e:  # a malformed file counts as no answer
            raise AssertionError(f"the recorded answer of {self.name} is unreadable ({e})") from None


class _Unconvertible:
    """An answer that is not numbers (a string, a dict, a list of odd shapes, ...)."""

    def __init__(self, type_name: str):
        self.type_name = type_name

    def __repr__(self) -> str:
        return f"<a {self.type_name}>"


def _canon(obj: Any, h: Any) -> None:
    """Feed a canonical description of ``obj`` into the hash ``h``."""
    if obj is None:
        h.update(b"N;")
    elif isinstance(obj, (bool, np.bool_)):
        h.update(b"B1;" if obj else b"B0;")
    elif isinstance(obj, (int, np.integer)):
        h.update(b"I" + str(int(obj)).encode() + b";")
    elif isinstance(obj, (float, np.floating)):
        h.update(b"F" + float(obj).hex().encode() + b";")
    elif isinstance(obj, str):
        h.update(b"S" + str(len(obj)).encode() + b":" + obj.encode() + b";")
    elif isinstance(obj, _ndarray):
        a = np.ascontiguousarray(obj)
        h.update(f"A{a.dtype.str}{a.shape}:".encode() + a.tobytes() + b";")
    elif type(obj).__module__.split(".")[0] == "torch" and hasattr(obj, "detach"):
        _canon(obj.detach().cpu().numpy(), h)
    elif isinstance(obj, (tuple, list)):
        h.update(b"T" + str(len(obj)).encode() + b"(")
        for item in obj:
            _canon(item, h)
        h.update(b");")
    elif isinstance(obj, dict):
        h.update(b"D" + str(len(obj)).encode() + b"{")
        for k in sorted(obj):
            _canon(str(k), h)
            _canon(obj[k], h)
        h.update(b"};")
    elif hasattr(obj, "fingerprint"):
        h.update(b"O")
        _canon(obj.fingerprint, h)
    else:
        raise TypeError(f"cannot fingerprint a test input of type {type(obj).__name__}")


def fingerprint(name: str, args: tuple, kwargs: dict) -> str:
    """The key under which the answer of ``name`` for these inputs is recorded."""
    h = hashlib.sha256()
    _canon(name, h)
    _canon(tuple(args), h)
    _canon(dict(kwargs), h)
    return h.hexdigest()[:40]


def _copy(obj: Any) -> Any:
    if isinstance(obj, _ndarray):
        return obj.copy()
    if isinstance(obj, dict):
        return {k: _copy(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_copy(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(_copy(v) for v in obj)
    return obj


def to_plain(out: Any) -> Any:
    """An answer as plain numpy arrays (tuples stay tuples), or an :class:`_Unconvertible`."""
    if out is None:
        return None
    if isinstance(out, tuple):
        return tuple(to_plain(o) for o in out)
    if type(out).__module__.split(".")[0] == "torch" and hasattr(out, "detach"):
        out = out.detach().cpu().numpy()
    if isinstance(out, (_ndarray, int, float, bool, np.generic, list)):
        try:
            a = _array(out)
        except Exception:
            return _Unconvertible(type(out).__name__)
        if a.dtype.kind in "biuf":
            return a
        return _Unconvertible(f"{type(out).__name__} of {a.dtype}")
    return _Unconvertible(type(out).__name__)


def _structure(plain: Any, arrays: list) -> Any:
    if plain is None:
        return {"t": "none"}
    if isinstance(plain, tuple):
        return {"t": "tuple", "items": [_structure(p, arrays) for p in plain]}
    if isinstance(plain, _Unconvertible):
        return {"t": "bad", "type": plain.type_name[:200]}
    arrays.append(plain)
    return {"t": "array", "i": len(arrays) - 1}


def _rebuild(s: Any, arrays: dict, depth: int = 0) -> Any:
    if depth > 8 or not isinstance(s, dict):
        raise ValueError("bad structure")
    kind = s.get("t")
    if kind == "none":
        return None
    if kind == "bad":
        return _Unconvertible(str(s.get("type", "?")))
    if kind == "tuple":
        return tuple(_rebuild(item, arrays, depth + 1) for item in s["items"])
    if kind == "array":
        a = arrays[f"a{int(s['i'])}"]
        if a.dtype.kind not in "biuf":
            raise ValueError("not numbers")
        return a
    raise ValueError(f"unknown kind {kind!r}")


def save_answer(path: str, plain: Any) -> None:
    arrays: list = []
    structure = _structure(plain, arrays)
    payload = {f"a{i}": a for i, a in enumerate(arrays)}
    tmp = path + ".tmp.npz"
    np.savez(tmp, structure=np.array(json.dumps(structure)), **payload)
    os.replace(tmp, path)


def _check_sizes(path: str) -> None:
    """Refuse a file whose arrays claim more data than it holds (before numpy allocates them)."""
    with zipfile.ZipFile(path) as zf:
        for info in zf.infolist():
            if info.file_size > _MAX_RECORD_BYTES:
                raise ValueError("an array is too large")
            with zf.open(info) as f:
                version = np.lib.format.read_magic(f)
                read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                               else np.lib.format.read_array_header_2_0)
                shape, _, dtype = read_header(f)
                if dtype.hasobject or math.prod(shape) * dtype.itemsize > info.file_size:
                    raise ValueError("an array's header does not match its data")


def load_answer(path: str) -> Any:
    """Read a recorded answer: plain arrays only (``allow_pickle=False``), sizes checked first."""
    _check_sizes(path)
    with np.load(path, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files if k != "structure"}
        structure = json.loads(str(z["structure"]))
    return _rebuild(structure, arrays)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, _ndarray) and isinstance(b, _ndarray):
        return a.shape == b.shape and a.dtype == b.dtype and bool(np.array_equal(a, b, equal_nan=True))
    if isinstance(a, _Unconvertible) and isinstance(b, _Unconvertible):
        return a.type_name == b.type_name
    return a is None and b is None


def _record(key: str, plain: Any) -> None:
    try:
        os.makedirs(_RECORD_DIR, exist_ok=True)
        path = os.path.join(_RECORD_DIR, key + ".npz")
        if os.path.exists(path):
            if not _same(load_answer(path), plain):
                open(os.path.join(_RECORD_DIR, key + ".conflict"), "w").close()
            return
        save_answer(path, plain)
    except Exception:  # recording must never break a notebook; a missing record scores 0
        pass


def call(name: str, fn: Any, *args: Any, error_hint: str = "", **kwargs: Any) -> Any:
    """Run the answer ``name`` (the student's ``fn``) on copies of the inputs; return plain arrays.

    Raises AssertionError with a readable message when ``fn`` is missing, raises, or returns None.
    When it raises, the message ends with a hint: for numpy's broadcasting error after a reduction
    that lost its axis, how ``keepdims=True`` fixes it; otherwise ``error_hint``, if given.
    """
    if isinstance(fn, Replay):
        out = fn.lookup(fingerprint(name, args, kwargs))
    else:
        if fn is None:
            raise AssertionError(f"{name} is not defined: run the cell that defines it (keep the name {name})")
        if not callable(fn):
            raise AssertionError(f"{name} should be a function, but it is a {type(fn).__name__}")
        key = fingerprint(name, args, kwargs) if _RECORD_DIR else None
        try:
            raw = fn(*_copy(args), **_copy(kwargs))
        except Exception as e:
            message = f"{name} raised {type(e).__name__}: {e}"
            hint = _keepdims_hint(e) or error_hint
            raise AssertionError(message + (f"\nHint: {hint}" if hint else "")) from None
        out = to_plain(raw)
        if key is not None:
            # In the grading kernel the library is not there: record the answer and stop this
            # test. The grader checks the answer outside the notebook (every test calls one
            # checker, and every checker calls the answer once, before any reference is needed).
            _record(key, out)
            raise AssertionError(f"{name}: answer recorded; the grader checks it outside the notebook")
    if out is None:
        raise AssertionError(
            f"{name} returned None: its body is still `...` or it has no `return` statement"
        )
    if _has_placeholder(out):
        raise AssertionError(f"{name} returned `...`: replace the `...` placeholders with your code")
    return out


def _shape_text(shape: tuple[int, ...]) -> str:
    return "(" + ", ".join(str(n) for n in shape) + ("," if len(shape) == 1 else "") + ")"


def _keepdims_hint(e: Exception) -> str:
    """Explain numpy's broadcasting error when it comes from a reduction that lost its axis.

    ``x / x.sum(axis=-1)`` for ``x`` of shape (3, 4) fails with "operands could not be broadcast
    together with shapes (3,4) (3,)": the second shape is the first with one axis reduced away.
    """
    text = str(e)
    if not isinstance(e, ValueError) or "could not be broadcast together with shapes" not in text:
        return ""
    found = re.findall(r"\(([\d,\s]*)\)", text.split("with shapes", 1)[1])
    shapes = [tuple(int(n) for n in f.replace(" ", "").split(",") if n) for f in found]
    for full in shapes:
        for part in shapes:
            for axis in range(len(full)):
                if len(full) > 1 and part == full[:axis] + full[axis + 1:]:
                    kept = full[:axis] + (1,) + full[axis + 1:]
                    return (
                        f"an array of shape {_shape_text(full)} was combined with one of shape "
                        f"{_shape_text(part)}, the same shape with axis {axis} reduced away. A reduction such as "
                        f".max(axis=...) or .sum(axis=...) drops its axis, and numpy then lines the shapes up "
                        f"from the right, so they do not fit (or, for a square array, fit the wrong way). Pass "
                        f"keepdims=True to the max and the sum: the result has shape {_shape_text(kept)} and "
                        "broadcasts along the reduced axis"
                    )
    return ""


def _has_placeholder(out: Any) -> bool:
    if isinstance(out, tuple):
        return any(_has_placeholder(o) for o in out)
    return isinstance(out, _Unconvertible) and out.type_name == "ellipsis"


# --------------------------------------------------------------------------------------------
# Comparing, with messages that point at the problem
# --------------------------------------------------------------------------------------------


def _fmt(a: Any) -> str:
    return np.array2string(_asarray(a), precision=4, suppress_small=True, max_line_width=100, threshold=40)


def _close(got: np.ndarray, want: np.ndarray, rtol: float = RTOL, atol: float = ATOL) -> bool:
    if not isinstance(got, _ndarray) or got.shape != want.shape:
        return False
    if want.dtype.kind == "b" or got.dtype.kind == "b":
        return bool((got == want).all())
    g, w = got.astype(np.float64), want.astype(np.float64)
    finite = _isfinite(w)
    if not bool((_isfinite(g) == finite).all()) or not bool((g[~finite] == w[~finite]).all()):
        return False
    return bool((_abs(g[finite] - w[finite]) <= atol + rtol * _abs(w[finite])).all())


def _matches(got: Any, candidate: Callable[[], Any], rtol: float = 1e-6) -> bool:
    """Whether the answer equals a known mistake (which may itself fail to compute)."""
    try:
        with np.errstate(all="ignore"):
            c = candidate()
        if isinstance(got, tuple) and isinstance(c, tuple):
            return len(got) == len(c) and all(
                _close(g, _asarray(x, dtype=np.float64), rtol) for g, x in zip(got, c, strict=True)
            )
        return _close(got, _asarray(c, dtype=np.float64), rtol)
    except Exception:
        return False


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
    has, does, contains, is_ = ("have", "do", "contain", "are") if plural else ("has", "does", "contains", "is")
    want = _asarray(want)
    if isinstance(got, tuple):
        raise AssertionError(f"{what} should be one array of shape {want.shape}, but it is a tuple of {len(got)}")
    if isinstance(got, _Unconvertible):
        raise AssertionError(f"{what} should be an array of numbers, but it is {got!r}")
    got = _asarray(got)
    if got.shape != want.shape:
        message = f"{what} {has} shape {got.shape}, expected {want.shape}"
        if got.ndim == want.ndim and got.shape == want.shape[::-1]:
            message += " (the axes are swapped)"
        raise AssertionError(message + _mistake_note(got, mistakes))
    if want.dtype.kind == "b":
        if got.dtype.kind != "b":
            raise AssertionError(f"{what} should hold booleans (dtype bool), got dtype {got.dtype}; "
                                 "compare or use np.tril(...).astype(bool)")
        if not bool((got == want).all()):
            wrong = np.argwhere(got != want)
            raise AssertionError(
                f"{what} {is_} wrong at {len(wrong)} of {got.size} entries, first at index "
                f"{tuple(int(i) for i in wrong[0])}\ngot:\n{_fmt(got)}\nexpected:\n{_fmt(want)}"
                + _mistake_note(got, mistakes)
            )
        return
    if got.dtype.kind not in "biuf":
        raise AssertionError(f"{what} should hold numbers, got dtype {got.dtype}")
    finite_expected = bool(_isfinite(want).all())
    if finite_expected and not bool(_isfinite(got).all()):
        kind = "NaN" if bool(_isnan(got).any()) else "inf"
        raise AssertionError(f"{what} {contains} {kind}" + (f": {nan_hint}" if nan_hint else "")
                             + _mistake_note(got, mistakes))
    if exact:
        ok = bool((got == want).all())
    else:
        ok = _close(got, want, rtol, atol)
    if ok:
        return
    g, w = got.astype(np.float64), want.astype(np.float64)
    diff = _abs(np.where(_isfinite(w), g - w, np.where(g == w, 0.0, np.inf)))
    where = _unravel_index(int(_argmax(diff)), diff.shape) if diff.ndim else ()
    idx = tuple(int(i) for i in where)
    message = (
        f"{what} {does} not match the expected values: the largest difference is at index {idx} "
        f"(got {g[idx]:.6g}, expected {w[idx]:.6g})"
    )
    if got.size <= 40:
        message += f"\ngot:\n{_fmt(got)}\nexpected:\n{_fmt(want)}"
    note = _mistake_note(got, mistakes)
    if not note and fallback_hint:
        note = f"\nHint: {fallback_hint}"
    raise AssertionError(message + note)


def _mistake_note(got: Any, mistakes: dict[str, Callable[[], Any]] | None) -> str:
    for explanation, candidate in (mistakes or {}).items():
        if _matches(got, candidate):
            return f"\nHint: {explanation}"
    return ""


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
    elif _matches(got, lambda: swapped):
        reason = "they hold the right values, the wrong way round"
    else:
        return
    raise AssertionError(f"{what} returned its two values in the wrong order: {reason}. Return them in the "
                         f"order {names}")


def _sum_hint(got: Any, axis: int, shape: tuple) -> str:
    """Say along which axis an answer's values sum to 1, when it is not the requested one."""
    if not isinstance(got, _ndarray) or got.shape != shape or got.dtype.kind not in "biuf" or not got.ndim:
        return ""
    with np.errstate(all="ignore"):
        g = got.astype(np.float64)
        if _close(g.sum(axis=axis), np.ones(np.delete(shape, axis % len(shape))), 1e-6, 1e-9):
            return ""
        for a in range(g.ndim):
            if a != axis % g.ndim and _close(g.sum(axis=a), np.ones(np.delete(shape, a)), 1e-6, 1e-9):
                return (f"the values sum to 1 along axis {a}, not along axis {axis}: take the maximum and the "
                        f"sum along the same axis, axis={axis}, with keepdims=True")
        return f"the values along axis {axis} should sum to 1; here they sum to {_fmt(g.sum(axis=axis))}"


def _softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    return tl.softmax(x, axis=axis)


def _naive_softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    e = np.exp(x)
    return e / e.sum(axis=axis, keepdims=True)


# --------------------------------------------------------------------------------------------
# Set 1: cosine similarity, a stable softmax, cosine attention
# --------------------------------------------------------------------------------------------


def check_cosine_similarity(cosine_similarity: Any, A: Any, B: Any = None) -> None:
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
            "these are plain dot products A @ B.T; divide each by the two vectors' lengths": lambda: A @ other.T,
            "the norms were taken down the columns (axis=0); each vector is a row, so use axis=1": lambda: (
                A / np.linalg.norm(A, axis=0)) @ (other / np.linalg.norm(other, axis=0)).T,
            "only A's rows were normalised; divide by the norms of B's rows too": lambda: (
                A / np.linalg.norm(A, axis=1, keepdims=True)) @ other.T,
        },
    )


def check_softmax(softmax: Any, x: Any, axis: int | None = None) -> None:
    x = _asarray(x, dtype=np.float64)
    if axis is None:
        got = call("softmax", softmax, x)
        axis_ = -1
    else:
        got = call("softmax", softmax, x, axis=axis)
        axis_ = axis
    what = "softmax(x)" if axis is None else f"softmax(x, axis={axis})"
    want = _softmax(x, axis=axis_)
    mistakes: dict[str, Callable[[], Any]] = {}
    for a in range(x.ndim):
        if a != axis_ % x.ndim:
            mistakes[f"the values sum to 1 along axis {a}; normalise along axis={axis_} "
                     "(np.sum(..., axis=axis, keepdims=True))"] = lambda a=a: _softmax(x, axis=a)
    mistakes["the maximum was subtracted over the whole array, not per slice along the axis: "
             "slices far below the global maximum underflow to 0/0"] = lambda: _naive_softmax(x - x.max(), axis_)
    mistakes["the exponentials were not divided by their sum"] = lambda: np.exp(x - x.max(axis=axis_, keepdims=True))
    if x.ndim > 1:  # without keepdims a reduction lines up with the last axis (a square array shows no error)
        def lost_axis(max_keeps: bool | None, sum_keeps: bool) -> np.ndarray:
            e = np.exp(x if max_keeps is None else x - x.max(axis=axis_, keepdims=max_keeps))
            return e / e.sum(axis=axis_, keepdims=sum_keeps)

        for parts, max_keeps, sum_keeps in (("the maximum and the sum were", False, False),
                                            ("the sum was", True, False), ("the maximum was", False, True),
                                            ("the sum was", None, False)):
            mistakes[f"{parts} taken without keepdims=True: the reduced array has lost axis {axis_}, so numpy "
                     "lines it up with the last axis and each entry is combined with another slice's maximum or "
                     "sum (for a square array there is no error, only wrong values); pass keepdims=True"
                     + ("" if max_keeps is not None else ", and subtract the maximum first")] = (
                lambda m=max_keeps, k=sum_keeps: lost_axis(m, k))
    if x.shape and x.shape[axis_] > 0 and not bool(np.isinf(x).any()):
        with np.errstate(all="ignore"):
            naive = _naive_softmax(x, axis_)
        overflow = not bool(_isfinite(naive).all())
    else:
        overflow = False
    expect_array(
        got, want, what, mistakes=mistakes, fallback_hint=_sum_hint(got, axis_, want.shape),
        nan_hint=(
            "np.exp overflowed (or underflowed to 0/0) for these large logits; subtract the "
            f"maximum along axis={axis_} first (keepdims=True): softmax(x) = softmax(x - max(x))"
            if overflow else
            "an entry of -inf must get weight exactly 0 (exp(-inf) = 0); a NaN means 0/0 or "
            "inf - inf somewhere"
        ),
    )


def check_cosine_attention(cosine_attention: Any, X: Any) -> None:
    X = _asarray(X, dtype=np.float64)
    got = expect_tuple(call("cosine_attention", cosine_attention, X), 2, "cosine_attention(X)", "(Z, weights)")
    Z_want, w_want = tl.cosine_attention(X)
    cos = tl.cosine_similarity(X)
    expect_order(got, (Z_want, w_want), "cosine_attention(X)", "(Z, weights)")
    w_got = got[1]
    expect_array(
        w_got, w_want, "the weights returned by cosine_attention(X)", fallback_hint=_sum_hint(w_got, -1, w_want.shape),
        plural=True,
        mistakes={
            "the weights use dot products X @ X.T; use cosine similarities, so long vectors do not "
            "dominate": lambda: _softmax(X @ X.T),
            "the softmax normalised the columns (axis=0); each query's row must sum to 1": lambda: _softmax(cos, 0),
            "these are the raw cosine similarities; apply the softmax row by row": lambda: cos,
        },
    )
    expect_array(
        got[0], Z_want, "Z returned by cosine_attention(X)",
        mistakes={
            "Z = weights.T @ X; row i of Z is sum_j weights[i, j] X[j], i.e. weights @ X": lambda: w_want.T @ X,
            "Z is X itself; each new vector is the weighted average weights @ X": lambda: X,
        },
    )


def check_softmax_with_temperature(softmax_with_temperature: Any, x: Any, T: float) -> None:
    x = _asarray(x, dtype=np.float64)
    got = call("softmax_with_temperature", softmax_with_temperature, x, T)
    want = _softmax(x / T)
    with np.errstate(all="ignore"):
        overflow = not bool(_isfinite(_naive_softmax(x / T)).all())
    expect_array(
        got, want, f"softmax_with_temperature(x, T={T})",
        nan_hint=(
            "dividing by a small temperature makes the logits huge, so np.exp overflows; "
            "use your stable softmax on x / T" if overflow else "check for 0/0"
        ),
        mistakes={
            "x was multiplied by T; divide the logits by T (a higher temperature flattens the "
            "distribution)": lambda: _softmax(x * T),
            "the temperature was ignored": lambda: _softmax(x),
            "the softmax normalised along axis 0; use the last axis": lambda: _softmax(x / T, 0),
        },
    )


# --------------------------------------------------------------------------------------------
# Set 2: scaled dot-product attention with padding and causal masks
# --------------------------------------------------------------------------------------------

_MATMUL_HINT = (
    "for batched arrays swap only the last two axes of K, with np.swapaxes(K, -1, -2) "
    "(K.T reverses every axis)"
)


def check_attention_scores(attention_scores: Any, Q: Any, K: Any) -> None:
    Q, K = _asarray(Q, dtype=np.float64), _asarray(K, dtype=np.float64)
    got = call("attention_scores", attention_scores, Q, K, error_hint=_MATMUL_HINT)
    raw = Q @ np.swapaxes(K, -1, -2)
    d_k = Q.shape[-1]
    expect_array(
        got, raw / math.sqrt(d_k), "attention_scores(Q, K)",
        mistakes={
            "the scores are not scaled; divide by sqrt(d_k)": lambda: raw,
            "the scores were divided by d_k; divide by its square root, sqrt(d_k)": lambda: raw / d_k,
            "the scale uses the number of keys k_len (K.shape[-2]); d_k is the width of each query and key, "
            "the last axis (Q.shape[-1])": lambda: raw / math.sqrt(K.shape[-2]),
            "the scale uses the number of queries (Q.shape[-2]); d_k is the width of each query and key, the "
            "last axis (Q.shape[-1])": lambda: raw / math.sqrt(Q.shape[-2]),
            "the scores were multiplied by sqrt(d_k); divide instead": lambda: raw * math.sqrt(d_k),
        },
    )


def check_causal_mask(causal_mask: Any, n: int) -> None:
    got = call("causal_mask", causal_mask, n)
    want = np.tril(np.ones((n, n), dtype=bool))
    expect_array(
        got, want, f"causal_mask({n})",
        mistakes={
            "the diagonal is False: every position may attend to itself (np.tril with k=0)": lambda: np.tril(
                np.ones((n, n), dtype=bool), -1),
            "the mask is inverted or upper-triangular: True means 'may attend', i.e. key j <= query i": lambda: np.triu(
                np.ones((n, n), dtype=bool), 1 if n > 1 else 0),
            "the mask is upper-triangular; query i (row) may attend to keys j <= i (columns)": lambda: np.triu(
                np.ones((n, n), dtype=bool)),
        },
    )


def check_padding_mask(padding_mask: Any, tokens: Any, pad_id: int) -> None:
    tokens = _asarray(tokens)
    got = call("padding_mask", padding_mask, tokens, pad_id)
    keep = tokens != pad_id
    want = keep[:, None, :]
    expect_array(
        got, want, f"padding_mask(tokens, pad_id={pad_id})",
        mistakes={
            "the shape is (batch, seq); add a query axis so it broadcasts over queries: "
            "(batch, 1, seq)": lambda: keep,
            "the new axis is in the wrong place: the mask hides keys, the last axis, so use "
            "(batch, 1, seq)": lambda: keep[:, :, None],
            "the mask is inverted: True means a real token that may be attended to": lambda: ~want,
            "the pad id is hard-coded as 0; compare with pad_id": lambda: (tokens != 0)[:, None, :],
        },
    )


def _masked_reference(Q: np.ndarray, K: np.ndarray, V: np.ndarray, mask: Any) -> tuple[np.ndarray, np.ndarray]:
    return tl.attention(Q, K, V, mask=mask)


def check_masked_attention(masked_attention: Any, Q: Any, K: Any, V: Any, mask: Any = None) -> None:
    Q, K, V = (_asarray(a, dtype=np.float64) for a in (Q, K, V))
    if mask is None:
        out = call("masked_attention", masked_attention, Q, K, V, error_hint=_MATMUL_HINT)
    else:
        mask = _asarray(mask, dtype=bool)
        out = call("masked_attention", masked_attention, Q, K, V, mask, error_hint=_MATMUL_HINT)
    got = expect_tuple(out, 2, "masked_attention(Q, K, V, mask)", "(output, weights)")
    want_out, want_w = _masked_reference(Q, K, V, mask)
    expect_order(got, (want_out, want_w), "masked_attention(Q, K, V, mask)", "(output, weights)")
    d_k, k_len = Q.shape[-1], K.shape[-2]
    scores = Q @ np.swapaxes(K, -1, -2) / math.sqrt(d_k)
    mistakes: dict[str, Callable[[], Any]] = {}
    if mask is not None:
        mistakes["the mask was ignored: these are the weights of attention without any mask. Where mask is "
                 "False, set the score to -inf before the softmax (np.where(mask, scores, -np.inf))"] = (
            lambda: tl.attention(Q, K, V)[1])
    mistakes.update({
        "the scores are not scaled by 1/sqrt(d_k)": lambda: tl.attention(Q, K, V, mask=mask, scale=False)[1],
        "the scores were divided by d_k; divide by its square root, sqrt(d_k)": lambda: tl.attention(
            Q, K, V, mask=mask, scale=float(d_k))[1],
        "the scale uses the number of keys k_len (K.shape[-2]); d_k is the width of each query and key, the "
        "last axis (Q.shape[-1])": lambda: tl.attention(Q, K, V, mask=mask, scale=math.sqrt(k_len))[1],
        "the softmax normalised over the queries (axis -2); each query's weights (last axis) sum to 1": lambda: (
            _softmax(np.where(mask, scores, -np.inf) if mask is not None else scores, -2)),
    })
    empty_rows = False
    if mask is not None:
        full = np.broadcast_to(mask, scores.shape)
        empty_rows = bool((~full.any(axis=-1)).any())
        mistakes.update({
            "the mask is inverted: True means 'may attend'; set the scores where mask is False to -inf": lambda: (
                _softmax(np.where(~full, scores, -np.inf))),
            "the scores were multiplied by the mask; a score of 0 still gets weight, set masked scores to "
            "-inf instead (np.where(mask, scores, -np.inf))": lambda: _softmax(scores * full),
            "the weights were masked after the softmax without renormalising; mask the scores before": lambda: (
                _softmax(scores) * full),
            "a query with no allowed key got uniform weights; it should get all-zero weights and a zero "
            "output": lambda: _softmax(np.where(full, scores, -1e9)),
        })
    nan_hint = (
        "a query whose keys are all masked has nothing to attend to: give it zero weights and a zero "
        "output (softmax of an all -inf row is 0/0)" if empty_rows else
        "-inf scores should get weight exactly 0; a NaN means 0/0 or inf - inf"
    )
    expect_array(got[1], want_w, "the attention weights", mistakes=mistakes, nan_hint=nan_hint, plural=True)
    expect_array(got[0], want_out, "the attention output", nan_hint=nan_hint, mistakes={
        "output = weights.T @ V; use weights @ V": lambda: np.swapaxes(want_w, -1, -2) @ V,
    })


def check_decoder_mask(decoder_mask: Any, tokens: Any, pad_id: int) -> None:
    tokens = _asarray(tokens)
    got = call("decoder_mask", decoder_mask, tokens, pad_id)
    seq = tokens.shape[1]
    causal = np.tril(np.ones((seq, seq), dtype=bool))
    keep = (tokens != pad_id)[:, None, :]
    expect_array(
        got, causal[None] & keep, f"decoder_mask(tokens, pad_id={pad_id})",
        mistakes={
            "the masks were combined with `or`; a key must be both earlier and not padding (&)": lambda: causal | keep,
            # before "only the causal part": without a token 0 a hard-coded 0 hides no key either
            f"the padding keys are not hidden: the pad id is hard-coded as 0, compare the tokens with pad_id="
            f"{pad_id}": lambda: causal[None] & (tokens != 0)[:, None, :],
            "only the causal part is there; also hide the padding keys": lambda: np.broadcast_to(
                causal, (tokens.shape[0], seq, seq)),
            "only the padding part is there; also hide future positions": lambda: np.broadcast_to(
                keep, (tokens.shape[0], seq, seq)),
        },
    )


# --------------------------------------------------------------------------------------------
# Set 3: multi-head attention
# --------------------------------------------------------------------------------------------


def check_split_heads(split_heads: Any, x: Any, num_heads: int) -> None:
    x = _asarray(x, dtype=np.float64)
    got = call("split_heads", split_heads, x, num_heads)
    b, s, d = x.shape
    d_k = d // num_heads
    want = x.reshape(b, s, num_heads, d_k).transpose(0, 2, 1, 3)
    expect_array(
        got, want, f"split_heads(x, num_heads={num_heads})",
        mistakes={
            "x was reshaped straight to (batch, heads, seq, d_k), which mixes positions; reshape to "
            "(batch, seq, heads, d_k) first, then swap the seq and heads axes": lambda: x.reshape(b, num_heads, s, d_k),
            "the heads axis is still after seq: transpose (batch, seq, heads, d_k) to "
            "(batch, heads, seq, d_k)": lambda: x.reshape(b, s, num_heads, d_k),
            "head i should hold features i*d_k .. (i+1)*d_k - 1, a contiguous slice; this takes every "
            "num_heads-th feature": lambda: x.reshape(b, s, d_k, num_heads).transpose(0, 3, 1, 2),
        },
    )


def check_merge_heads(merge_heads: Any, x: Any) -> None:
    x = _asarray(x, dtype=np.float64)
    got = call("merge_heads", merge_heads, x)
    b, h, s, d_k = x.shape
    want = x.transpose(0, 2, 1, 3).reshape(b, s, h * d_k)
    expect_array(
        got, want, "merge_heads(x)",
        mistakes={
            "x was reshaped without moving the heads axis back; transpose to (batch, seq, heads, d_k) "
            "first, then reshape": lambda: x.reshape(b, s, h * d_k),
            "the heads were interleaved feature by feature; each head's d_k features stay together": lambda: (
                x.transpose(0, 2, 3, 1).reshape(b, s, h * d_k)),
        },
    )


def _torch_mha(params: dict, d_model: int, num_heads: int) -> Any:
    import torch

    mha = tl.MultiHeadAttention(d_model, num_heads).double().eval()
    with torch.no_grad():
        for name in ("q", "k", "v", "o"):
            layer = getattr(mha, f"W_{name}")
            layer.weight.copy_(torch.from_numpy(params[f"W_{name}"].T.copy()))
            layer.bias.copy_(torch.from_numpy(params[f"b_{name}"].copy()))
    return mha


def _mha_reference(query, key, value, params, num_heads, mask=None, scale_dim=None, skip_out=False, swap_kv=False):
    """numpy multi-head attention with optional deliberate mistakes (for hints)."""
    b, q_len, d_model = query.shape
    k_len = key.shape[1]
    d_k = d_model // num_heads

    def split(x, n):
        return x.reshape(b, n, num_heads, d_k).transpose(0, 2, 1, 3)

    q = split(query @ params["W_q"] + params["b_q"], q_len)
    k = split(key @ params["W_k"] + params["b_k"], k_len)
    v = split(value @ params["W_v"] + params["b_v"], k_len)
    if swap_kv:
        k, v = v, k
    out, w = tl.attention(q, k, v, mask=mask, scale=math.sqrt(scale_dim or d_k))
    out = out.transpose(0, 2, 1, 3).reshape(b, q_len, d_model)
    return (out if skip_out else out @ params["W_o"] + params["b_o"]), w


def check_multi_head_attention(multi_head_attention: Any, query: Any, key: Any, value: Any, params: dict,
                               num_heads: int, mask: Any = None) -> None:
    import torch

    query, key, value = (_asarray(a, dtype=np.float64) for a in (query, key, value))
    params = {k: _asarray(v, dtype=np.float64) for k, v in params.items()}
    args = (query, key, value, params, num_heads) + (() if mask is None else (_asarray(mask, dtype=bool),))
    got = expect_tuple(call("multi_head_attention", multi_head_attention, *args, error_hint=_MATMUL_HINT),
                       2, "multi_head_attention(...)", "(output, weights)")
    d_model = query.shape[-1]
    mha = _torch_mha(params, d_model, num_heads)
    with torch.no_grad():
        t_mask = None if mask is None else torch.from_numpy(np.asarray(mask, dtype=bool))
        want_out = mha(torch.from_numpy(query), torch.from_numpy(key), torch.from_numpy(value), mask=t_mask)
    want_out, want_w = want_out.numpy(), mha.attention_weights.numpy()
    expect_order(got, (want_out, want_w), "multi_head_attention(...)", "(output, weights)")
    mistakes = {
        "each head's scores were divided by sqrt(d_model); a head works in d_k = d_model / num_heads "
        "dimensions, so divide by sqrt(d_k)": lambda: _mha_reference(query, key, value, params, num_heads, mask,
                                                                     scale_dim=d_model),
        "the output projection W_o (and b_o) is missing after concatenating the heads": lambda: _mha_reference(
            query, key, value, params, num_heads, mask, skip_out=True),
        "each head's scores were divided by sqrt(k_len), the number of keys (key.shape[1]); divide by "
        "sqrt(d_k), the width of each head's queries and keys, d_k = d_model / num_heads": lambda: _mha_reference(
            query, key, value, params, num_heads, mask, scale_dim=key.shape[1]),
        "keys and values are swapped: scores come from the keys, the weighted sum from the values": lambda: (
            _mha_reference(query, value, key, params, num_heads, mask)),
        "the projected keys and values were swapped: the scores compare the queries with the projected keys "
        "(key @ W_k + b_k), and the weighted sum is over the projected values (value @ W_v + b_v)": lambda: (
            _mha_reference(query, key, value, params, num_heads, mask, swap_kv=True)),
    }
    if isinstance(got[1], _ndarray) and got[1].shape != want_w.shape:
        raise AssertionError(
            f"the weights have shape {got[1].shape}; return every head's weights, shape "
            f"(batch, num_heads, q_len, k_len) = {want_w.shape}: " + _heads_axes_note(got[1], want_w)
        )
    expect_array(got[1], want_w, "the attention weights of multi_head_attention", plural=True,
                 mistakes={k: (lambda f=f: f()[1]) for k, f in mistakes.items()})
    expect_array(got[0], want_out, "the output of multi_head_attention",
                 mistakes={k: (lambda f=f: f()[0]) for k, f in mistakes.items()})


def _heads_axes_note(got: np.ndarray, want: np.ndarray) -> str:
    """Which axis of multi-head weights is wrong: batch, heads (or the two query and key axes)."""
    names = ("batch", "heads", "q_len", "k_len")
    b, h, q, k = want.shape
    shape = got.shape
    if got.ndim == 4:
        wrong = [i for i in range(4) if shape[i] != want.shape[i]]
        if sorted(shape) == sorted(want.shape):
            return (f"the axes are in the wrong order ({', '.join(names[i] for i in wrong)} out of place); "
                    "transpose them to (batch, num_heads, q_len, k_len)")
        return "; ".join(f"axis {i} ({names[i]}) has length {shape[i]}, expected {want.shape[i]}" for i in wrong)
    if got.ndim == 3:
        heads_gone = shape == (b, q, k)
        batch_gone = shape == (h, q, k)
        if heads_gone and batch_gone:  # batch == num_heads: tell them apart by the values
            if any(_matches(got, lambda i=i: want[i]) for i in range(b)):
                heads_gone = False
            elif any(_matches(got, lambda i=i: want[:, i]) for i in range(h)) or _matches(got, lambda: want.mean(1)):
                batch_gone = False
        if heads_gone and not batch_gone:
            return ("the heads axis (axis 1) is missing: these are the weights of one head, or of the heads "
                    "averaged or merged; return the weights of every head, before they are combined")
        if batch_gone and not heads_gone:
            return ("the batch axis (axis 0) is missing: these are the weights of one sequence of the batch; "
                    "keep the batch axis first")
        if heads_gone:
            return (f"one axis is missing, the batch or the heads (both have length {b}); keep both, batch "
                    "first, then heads")
        if shape == (b * h, q, k):
            return (f"the batch and heads axes were merged into one of length {b * h}; keep them apart, "
                    "for example with reshape(batch, num_heads, q_len, k_len)")
    if shape == (q, k):
        return "both the batch axis and the heads axis are missing"
    return "keep the weights of every head of every sequence, before merging the heads"


def check_count_parameters(count_parameters: Any, d_model: int, num_heads: int) -> None:
    got = call("count_parameters", count_parameters, d_model, num_heads)
    want = sum(p.numel() for p in tl.MultiHeadAttention(d_model, num_heads).parameters())
    expect_array(
        got, np.asarray(want), f"count_parameters(d_model={d_model}, num_heads={num_heads})", exact=True,
        mistakes={
            "the biases are missing: each of the four projections has d_model biases": lambda: 4 * d_model**2,
            "the count was multiplied by the number of heads; the heads share the four d_model x d_model "
            "matrices (each head uses a d_k-wide slice), so the total does not depend on num_heads": lambda: (
                num_heads * (4 * d_model**2 + 4 * d_model)),
            "W_o is missing: there are four projections (W_q, W_k, W_v and W_o)": lambda: 3 * d_model**2 + 3 * d_model,
        },
    )


# --------------------------------------------------------------------------------------------
# Set 4: sinusoidal positional encoding, the rotation matrix, the offset property
# --------------------------------------------------------------------------------------------


def _encoding_variant(n: int, d: int, exponent: str = "2k", layout: str = "interleaved", start: int = 0,
                      swap: bool = False) -> np.ndarray:
    k = np.arange(d // 2)
    power = 2 * k / d if exponent == "2k" else k / d
    omega = 1.0 / 10000.0**power
    angles = np.arange(start, start + n)[:, None] * omega[None, :]
    first, second = (np.cos(angles), np.sin(angles)) if swap else (np.sin(angles), np.cos(angles))
    if layout == "halves":
        return np.concatenate([first, second], axis=1)
    pe = np.empty((n, d))
    pe[:, 0::2], pe[:, 1::2] = first, second
    return pe


def check_sinusoidal_encoding(sinusoidal_encoding: Any, num_positions: int, d_model: int) -> None:
    got = call("sinusoidal_encoding", sinusoidal_encoding, num_positions, d_model)
    n, d = num_positions, d_model
    expect_array(
        got, tl.sinusoidal_encoding(n, d), f"sinusoidal_encoding({n}, {d})",
        mistakes={
            "the frequencies use k / d_model; the exponent is 2k / d_model, "
            "omega_k = 1 / 10000**(2k / d_model) (some texts misprint it)": lambda: _encoding_variant(n, d, "k"),
            "the sines fill the first half and the cosines the second; they are interleaved, sine in the even "
            "columns 2k and cosine in the odd columns 2k+1": lambda: _encoding_variant(n, d, layout="halves"),
            "sine and cosine are swapped: sine goes in the even columns": lambda: _encoding_variant(n, d, swap=True),
            "positions start at 1; the first row is position t = 0": lambda: _encoding_variant(n, d, start=1),
        },
    )


def check_rotation_matrix(rotation_matrix: Any, phi: float, omega: float) -> None:
    got = call("rotation_matrix", rotation_matrix, phi, omega)
    want = tl.rotation_matrix(phi, omega)
    expect_array(
        got, want, f"rotation_matrix(phi={phi}, omega={omega})",
        mistakes={
            "this is the transpose: it moves the pair phi positions backwards. Check with "
            "M @ [sin(wt), cos(wt)] = [sin(w(t+phi)), cos(w(t+phi))] and the angle-addition formulas": lambda: want.T,
            "the angle should be omega * phi, not phi alone": lambda: tl.rotation_matrix(phi, 1.0),
        },
    )


def check_offset_matrix(offset_matrix: Any, phi: float, d_model: int) -> None:
    got = call("offset_matrix", offset_matrix, phi, d_model)
    want = tl.offset_matrix(phi, d_model)

    def with_power(power):
        M = np.zeros((d_model, d_model))
        for k in range(d_model // 2):
            M[2 * k:2 * k + 2, 2 * k:2 * k + 2] = tl.rotation_matrix(phi, 1.0 / 10000.0 ** power(k))
        return M

    expect_array(
        got, want, f"offset_matrix(phi={phi}, d_model={d_model})",
        mistakes={
            "block k uses omega = 1 / 10000**(k / d_model); the exponent is 2k / d_model": lambda: with_power(
                lambda k: k / d_model),
            "every 2x2 block is transposed (moves backwards)": lambda: want.T,
            "the blocks use k as the exponent index for column 2k+1 too; block k acts on columns 2k and 2k+1 "
            "with one frequency omega_k": lambda: with_power(lambda k: 4 * k / d_model),
        },
    )


def _encoding_at(positions: np.ndarray, d_model: int) -> np.ndarray:
    """The sinusoidal encoding of arbitrary (even negative) positions: a test's input.

    Computed here with numpy alone (the frequencies as ``tl.frequencies`` computes them), since
    it is built before the answer is called, also in the grading kernel, where the library is
    not installed.
    """
    frequencies = 1.0 / 10000.0 ** (2 * np.arange(d_model // 2) / d_model)
    angles = np.asarray(positions, dtype=np.float64)[:, None] * frequencies[None, :]
    pe = np.empty((len(positions), d_model))
    pe[:, 0::2], pe[:, 1::2] = np.sin(angles), np.cos(angles)
    return pe


def check_shift_encoding(shift_encoding: Any, positions: Any, d_model: int, phi: int) -> None:
    positions = _asarray(positions)
    pe = _encoding_at(positions, d_model)
    got = call("shift_encoding", shift_encoding, pe, phi)
    M = tl.offset_matrix(phi, d_model)
    expect_array(
        got, _encoding_at(positions + phi, d_model), f"shift_encoding(pe, phi={phi})",
        mistakes={
            "the rows were multiplied by M instead of M^T: each row p is a column vector in M @ p, so "
            "for a stack of rows use pe @ M.T (this shifts backwards)": lambda: pe @ M,
            "the encoding was not shifted": lambda: pe,
        },
    )


# --------------------------------------------------------------------------------------------
# Set 5: layer normalisation, an encoder layer, greedy decoding
# --------------------------------------------------------------------------------------------


def _torch_layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> np.ndarray:
    import torch
    import torch.nn.functional as F

    t = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float64))
    return F.layer_norm(t, (x.shape[-1],), torch.from_numpy(gamma), torch.from_numpy(beta), eps).numpy()


def check_layer_norm(layer_norm: Any, x: Any, gamma: Any, beta: Any, eps: float = 1e-5) -> None:
    x, gamma, beta = (_asarray(a, dtype=np.float64) for a in (x, gamma, beta))
    got = call("layer_norm", layer_norm, x, gamma, beta, eps)
    want = _torch_layer_norm(x, gamma, beta, eps)
    mean = x.mean(-1, keepdims=True)

    def variant(ddof=0, axis=-1, eps_inside=True, naive_var=False):
        m = x.mean(axis, keepdims=True)
        v = (x**2).mean(axis, keepdims=True) - m**2 if naive_var else x.var(axis, ddof=ddof, keepdims=True)
        denom = np.sqrt(v + eps) if eps_inside else np.sqrt(v) + eps
        return (x - m) / denom * gamma + beta

    spread = float(np.abs(mean).max()) / max(float(x.std(-1).min()), 1e-300)
    expect_array(
        got, want, "layer_norm(x, gamma, beta)",
        fallback_hint=(
            "these vectors sit far from zero (mean much larger than the spread): mean(x**2) - mean**2 "
            "cancels catastrophically, compute the variance as the mean of (x - mean)**2" if spread > 1e3 else ""
        ),
        nan_hint=(
            "the variance came out negative or zero: compute it as the mean of (x - mean)**2, not "
            "mean(x**2) - mean**2 (which cancels catastrophically for large values), and add eps "
            "inside the square root"
        ),
        mistakes={
            "the variance is the unbiased one (ddof=1); layer norm divides by d (np.var's default, "
            "as PyTorch does)": lambda: variant(ddof=1),
            "each feature was normalised over the batch (axis 0); normalise each vector over its "
            "features, the last axis": lambda: variant(axis=0),
            "eps was added outside the square root; use sqrt(var + eps)": lambda: variant(eps_inside=False),
            "gamma and beta are swapped: scale by gamma, then shift by beta": lambda: (
                (x - mean) / np.sqrt(x.var(-1, keepdims=True) + eps) * beta + gamma),
            "the variance mean(x**2) - mean**2 loses all precision for large values; use mean((x - mean)**2)":
                lambda: variant(naive_var=True),
        },
    )


def check_feed_forward(feed_forward: Any, x: Any, W_1: Any, b_1: Any, W_2: Any, b_2: Any) -> None:
    x, W_1, b_1, W_2, b_2 = (_asarray(a, dtype=np.float64) for a in (x, W_1, b_1, W_2, b_2))
    got = call("feed_forward", feed_forward, x, W_1, b_1, W_2, b_2)
    hidden = x @ W_1 + b_1
    want = np.maximum(hidden, 0.0) @ W_2 + b_2
    expect_array(
        got, want, "feed_forward(x, W_1, b_1, W_2, b_2)",
        mistakes={
            "there is no ReLU between the two layers: max(0, x W_1 + b_1)": lambda: hidden @ W_2 + b_2,
            "a ReLU was also applied to the output; only the hidden layer has one": lambda: np.maximum(want, 0.0),
            "the ReLU was applied before adding b_1": lambda: (np.maximum(x @ W_1, 0.0) + b_1) @ W_2 + b_2,
        },
    )


def _encoder_torch(x: np.ndarray, params: dict, num_heads: int, mask: Any) -> np.ndarray:
    import torch
    from torch import nn

    d_model = x.shape[-1]
    d_ff = params["W_1"].shape[1]
    layer = nn.TransformerEncoderLayer(d_model, num_heads, d_ff, dropout=0.0, batch_first=True,
                                       layer_norm_eps=1e-5).double().eval()

    def t(a):
        return torch.from_numpy(np.ascontiguousarray(a, dtype=np.float64))

    with torch.no_grad():
        sa = layer.self_attn
        sa.in_proj_weight.copy_(torch.cat([t(params["W_q"].T), t(params["W_k"].T), t(params["W_v"].T)]))
        sa.in_proj_bias.copy_(torch.cat([t(params["b_q"]), t(params["b_k"]), t(params["b_v"])]))
        sa.out_proj.weight.copy_(t(params["W_o"].T))
        sa.out_proj.bias.copy_(t(params["b_o"]))
        layer.linear1.weight.copy_(t(params["W_1"].T))
        layer.linear1.bias.copy_(t(params["b_1"]))
        layer.linear2.weight.copy_(t(params["W_2"].T))
        layer.linear2.bias.copy_(t(params["b_2"]))
        for i in (1, 2):
            getattr(layer, f"norm{i}").weight.copy_(t(params[f"gamma_{i}"]))
            getattr(layer, f"norm{i}").bias.copy_(t(params[f"beta_{i}"]))
    key_padding = None
    if mask is not None:  # ours: (batch, 1, 1, seq), True = attend; torch's: (batch, seq), True = pad
        key_padding = ~torch.from_numpy(np.asarray(mask, dtype=bool).reshape(x.shape[0], x.shape[1]))
    # gradients on: PyTorch then takes the plain (not the fused inference) path
    out = layer(t(x), src_key_padding_mask=key_padding).detach()
    return out.numpy()


def _encoder_numpy(x, params, num_heads, mask, norm_first=False, residual=True):
    def ln(h, i):
        m = h.mean(-1, keepdims=True)
        return (h - m) / np.sqrt(h.var(-1, keepdims=True) + 1e-5) * params[f"gamma_{i}"] + params[f"beta_{i}"]

    def attn(h):
        return _mha_reference(h, h, h, params, num_heads, mask)[0]

    def ffn(h):
        return np.maximum(h @ params["W_1"] + params["b_1"], 0.0) @ params["W_2"] + params["b_2"]

    if norm_first:
        h = x + attn(ln(x, 1))
        return h + ffn(ln(h, 2))
    if not residual:
        h = ln(attn(x), 1)
        return ln(ffn(h), 2)
    h = ln(x + attn(x), 1)
    return ln(h + ffn(h), 2)


def check_encoder_layer(encoder_layer: Any, x: Any, params: dict, num_heads: int, mask: Any = None) -> None:
    x = _asarray(x, dtype=np.float64)
    params = {k: _asarray(v, dtype=np.float64) for k, v in params.items()}
    args = (x, params, num_heads) + (() if mask is None else (_asarray(mask, dtype=bool),))
    got = call("encoder_layer", encoder_layer, *args, error_hint=_MATMUL_HINT)
    want = _encoder_torch(x, params, num_heads, mask)
    expect_array(
        got, want, "encoder_layer(x, params, num_heads)", rtol=1e-5, atol=1e-6,
        mistakes={
            "this is the pre-norm layer (normalise, then the sublayer, then add); the original layer is "
            "post-norm: x = layer_norm(x + sublayer(x))": lambda: _encoder_numpy(x, params, num_heads, mask, True),
            "the residual connections are missing: add each sublayer's input to its output before "
            "normalising": lambda: _encoder_numpy(x, params, num_heads, mask, residual=False),
        },
    )


class ToyLanguageModel:
    """A tiny deterministic next-token model for the greedy-decoding exercise.

    ``model(tokens)`` takes the prefix (a list of token ids) and returns ``(vocab_size,)`` logits
    that depend on the last token, the position and the sum of the prefix. After ``eos_after``
    tokens the end token becomes by far the most likely.
    """

    def __init__(self, vocab_size: int, seed: int, eos_id: int, eos_after: int | None = None):
        rng = np.random.default_rng(seed)
        self.vocab_size, self.eos_id, self.eos_after = vocab_size, eos_id, eos_after
        self.table = rng.normal(size=(vocab_size, vocab_size))
        self.table[:, eos_id] -= 4.0  # the end token is unlikely until eos_after
        self.position = rng.normal(size=(16, vocab_size))
        self.mix = rng.normal(size=(7, vocab_size))
        self.fingerprint = ("ToyLanguageModel", vocab_size, seed, eos_id, eos_after)
        self.calls = 0

    def __call__(self, tokens: Any) -> np.ndarray:
        tokens = [int(t) for t in np.asarray(tokens).reshape(-1)]
        if not tokens:
            raise ValueError("the model needs at least the start token")
        self.calls += 1
        logits = self.table[tokens[-1]] + self.position[len(tokens) % 16] + self.mix[sum(tokens) % 7]
        logits[tokens[-1]] -= 2.0  # discourage repeating the last token
        if self.eos_after is not None and len(tokens) >= self.eos_after:
            logits[self.eos_id] += 100.0
        return logits.copy()


def _greedy_reference(model: ToyLanguageModel, bos_id: int, eos_id: int, max_len: int) -> list[int]:
    tokens = [bos_id]
    while len(tokens) < max_len and tokens[-1] != eos_id:
        tokens.append(int(np.argmax(model(tokens))))
    return tokens


def check_greedy_decode(greedy_decode: Any, model: ToyLanguageModel, bos_id: int, eos_id: int, max_len: int) -> None:
    want = np.asarray(_greedy_reference(model, bos_id, eos_id, max_len))  # before the answer can touch model
    got = call("greedy_decode", greedy_decode, model, bos_id, eos_id, max_len)
    if isinstance(got, _Unconvertible) or isinstance(got, tuple):
        raise AssertionError(f"greedy_decode should return a list of token ids, got {got!r}")
    got = np.asarray(got).reshape(-1) if np.asarray(got).ndim <= 1 else np.asarray(got)
    what = f"greedy_decode(model, bos_id={bos_id}, eos_id={eos_id}, max_len={max_len})"
    integral = got.dtype.kind in "iu" or (got.dtype.kind == "f" and bool((got == np.round(got)).all()))
    if got.ndim != 1 or not integral:
        raise AssertionError(f"{what} should return a flat list of integer token ids, got {_fmt(got)}")
    got = got.astype(np.int64)
    if got.size == 0 or got[0] != bos_id:
        raise AssertionError(f"{what} returned {got.tolist()}: the sequence must start with the start token "
                             f"bos_id={bos_id}")
    if got.size > max_len:
        raise AssertionError(f"{what} returned {got.size} tokens; a sequence holds at most max_len={max_len} "
                             "tokens, the start token included")
    n = min(got.size, want.size)
    for i in range(1, n):
        if got[i] != want[i]:
            raise AssertionError(
                f"{what}: token {i} is {got[i]} but the argmax of the model's logits for the prefix "
                f"{want[:i].tolist()} is {want[i]}; feed the whole prefix so far to the model and pick the "
                "largest logit"
            )
    if got.size < want.size:
        raise AssertionError(f"{what} stopped after {got.size} tokens {got.tolist()}; expected {want.tolist()}: "
                             "keep going until the end token appears or the sequence has max_len tokens")
    if got.size > want.size:
        raise AssertionError(f"{what} returned {got.tolist()}; expected {want.tolist()}: stop right after "
                             f"appending the end token eos_id={eos_id} (keep it in the output)")


# --------------------------------------------------------------------------------------------
# Inputs shared by tests and notebooks
# --------------------------------------------------------------------------------------------


def random_params(d_model: int, seed: int, d_ff: int | None = None) -> dict[str, np.ndarray]:
    """Weights for multi-head attention (and, with ``d_ff``, a whole encoder layer), as numpy arrays.

    ``W_q, W_k, W_v, W_o`` are ``(d_model, d_model)`` and act as ``x @ W + b``; with ``d_ff`` also
    ``W_1 (d_model, d_ff)``, ``b_1``, ``W_2 (d_ff, d_model)``, ``b_2`` and the two layer norms'
    ``gamma_1, beta_1, gamma_2, beta_2``.
    """
    rng = np.random.default_rng(seed)
    params = {f"W_{n}": rng.normal(size=(d_model, d_model)) / math.sqrt(d_model) for n in "qkvo"}
    params.update({f"b_{n}": 0.1 * rng.normal(size=d_model) for n in "qkvo"})
    if d_ff is not None:
        params.update(
            W_1=rng.normal(size=(d_model, d_ff)) / math.sqrt(d_model), b_1=0.1 * rng.normal(size=d_ff),
            W_2=rng.normal(size=(d_ff, d_model)) / math.sqrt(d_ff), b_2=0.1 * rng.normal(size=d_model),
        )
        for i in (1, 2):
            params[f"gamma_{i}"] = 1.0 + 0.1 * rng.normal(size=d_model)
            params[f"beta_{i}"] = 0.1 * rng.normal(size=d_model)
    return params
