"""Calling a student's answer: run it, or record it in the grading kernel, or replay the record.

Every checker calls the answer exactly once, through :func:`call`, before it needs any reference
value. What :func:`call` does depends on where it runs:

- **a self-check** (the student's notebook, or a test): it runs the answer on copies of the
  inputs and returns what came back as plain numpy arrays (:func:`to_plain`);
- **the grading kernel** (the environment variable ``EXERCISES_RECORD_DIR`` names a folder; the
  reference library is not installed there): it runs the answer, saves the returned value in
  that folder under :func:`fingerprint` of the answer's name and inputs, and stops the test
  with an AssertionError, before any expected value is needed;
- **the grader's own process**, where no student code ever runs: the answer is a :class:`Replay`
  placeholder, and :func:`call` returns the value recorded for the same fingerprint.

Records are ``.npz`` files of plain arrays, read back with ``allow_pickle=False`` and their sizes
checked before numpy allocates anything (:func:`load_answer`). numpy functions used here are
bound when the module is imported, before any student code runs in the kernel.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import zipfile
from typing import Any

import numpy as np
from numpy import array as _array
from numpy import ndarray as _ndarray

RECORD_DIR_ENV = "EXERCISES_RECORD_DIR"
RECORD_DIR = os.environ.get(RECORD_DIR_ENV) or None  # read once, at import
RECORDING = RECORD_DIR is not None  # True in the grading kernel: the reference library is absent
MAX_RECORD_BYTES = 8_000_000  # a recorded answer larger than this is not loaded back


class Unconvertible:
    """An answer that is not numbers (a string, a dict, a list of odd shapes, ...)."""

    def __init__(self, type_name: str):
        self.type_name = type_name

    def __repr__(self) -> str:
        return f"<a {self.type_name}>"


# --------------------------------------------------------------------------------------------
# Fingerprints of inputs, plain answers
# --------------------------------------------------------------------------------------------


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
    """An answer as plain numpy arrays (tuples stay tuples), or an :class:`Unconvertible`."""
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
            return Unconvertible(type(out).__name__)
        if a.dtype.kind in "biuf":
            return a
        return Unconvertible(f"{type(out).__name__} of {a.dtype}")
    return Unconvertible(type(out).__name__)


# --------------------------------------------------------------------------------------------
# Records on disk
# --------------------------------------------------------------------------------------------


def _structure(plain: Any, arrays: list) -> Any:
    if plain is None:
        return {"t": "none"}
    if isinstance(plain, tuple):
        return {"t": "tuple", "items": [_structure(p, arrays) for p in plain]}
    if isinstance(plain, Unconvertible):
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
        return Unconvertible(str(s.get("type", "?")))
    if kind == "tuple":
        return tuple(_rebuild(item, arrays, depth + 1) for item in s["items"])
    if kind == "array":
        a = arrays[f"a{int(s['i'])}"]
        if a.dtype.kind not in "biuf":
            raise ValueError("not numbers")
        return a
    raise ValueError(f"unknown kind {kind!r}")


def save_answer(path: str, plain: Any) -> None:
    """Write a plain answer (arrays, tuples, None, :class:`Unconvertible`) to the ``.npz`` ``path``."""
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
            if info.file_size > MAX_RECORD_BYTES:
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
    if isinstance(a, Unconvertible) and isinstance(b, Unconvertible):
        return a.type_name == b.type_name
    return a is None and b is None


def _record(key: str, plain: Any) -> None:
    """Save the answer under ``key``; a second, different answer for the same key marks a conflict."""
    try:
        os.makedirs(RECORD_DIR, exist_ok=True)
        path = os.path.join(RECORD_DIR, key + ".npz")
        if os.path.exists(path):
            if not _same(load_answer(path), plain):
                open(os.path.join(RECORD_DIR, key + ".conflict"), "w").close()
            return
        save_answer(path, plain)
    except Exception:  # recording must never break a notebook; a missing record scores 0
        pass


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
        """The answer recorded under ``key``; AssertionError when there is none or it conflicts."""
        path = os.path.join(self.record_dir, key + ".npz")
        if os.path.exists(os.path.join(self.record_dir, key + ".conflict")):
            raise AssertionError(f"{self.name} gave different answers for the same input")
        if not os.path.isfile(path) or os.path.getsize(path) > MAX_RECORD_BYTES:
            raise AssertionError(f"no answer of {self.name} was recorded for this input")
        try:
            return load_answer(path)
        except Exception as e:  # a malformed file counts as no answer
            raise AssertionError(f"the recorded answer of {self.name} is unreadable ({e})") from None


# --------------------------------------------------------------------------------------------
# Calling the answer
# --------------------------------------------------------------------------------------------


def shape_text(shape: tuple[int, ...]) -> str:
    """A shape as Python writes it: ``(3,)``, ``(2, 4)``."""
    return "(" + ", ".join(str(n) for n in shape) + ("," if len(shape) == 1 else "") + ")"


def keepdims_hint(e: Exception) -> str:
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
                        f"an array of shape {shape_text(full)} was combined with one of shape "
                        f"{shape_text(part)}, the same shape with axis {axis} reduced away. A reduction "
                        "such as .max(axis=...) or .sum(axis=...) drops its axis, and numpy then lines the "
                        "shapes up from the right, so they do not fit (or, for a square array, fit the "
                        f"wrong way). Pass keepdims=True to the max and the sum: the result has shape "
                        f"{shape_text(kept)} and broadcasts along the reduced axis"
                    )
    return ""


def _has_placeholder(out: Any) -> bool:
    if isinstance(out, tuple):
        return any(_has_placeholder(o) for o in out)
    return isinstance(out, Unconvertible) and out.type_name == "ellipsis"


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
            raise AssertionError(
                f"{name} is not defined: run the cell that defines it (keep the name {name})")
        if not callable(fn):
            raise AssertionError(f"{name} should be a function, but it is a {type(fn).__name__}")
        key = fingerprint(name, args, kwargs) if RECORDING else None
        try:
            raw = fn(*_copy(args), **_copy(kwargs))
        except Exception as e:
            message = f"{name} raised {type(e).__name__}: {e}"
            hint = keepdims_hint(e) or error_hint
            raise AssertionError(message + (f"\nHint: {hint}" if hint else "")) from None
        out = to_plain(raw)
        if key is not None:
            # In the grading kernel the library is not there: record the answer and stop this
            # test. The grader checks the answer outside the notebook (every test calls one
            # checker, and every checker calls the answer once, before any reference is needed).
            _record(key, out)
            raise AssertionError(f"{name}: answer recorded; the grader checks it outside the notebook")
    if out is None:
        raise AssertionError(f"{name} returned None: its body is still `...` or it has no `return` statement")
    if _has_placeholder(out):
        raise AssertionError(f"{name} returned `...`: replace the `...` placeholders with your code")
    return out
