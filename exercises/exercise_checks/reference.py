"""The reference the answers are compared with: the course library ``transformer_lib``.

It is imported here, once, everywhere but in the grading kernel (where :data:`RECORDING` is
True): there the library is not installed, nothing may reach for it, and every checker stops
at :func:`~exercise_checks.recording.call` before it needs a reference value. The checkers of
each set use ``tl`` and the two softmaxes below only after that call.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .recording import RECORDING

tl: Any = None
if not RECORDING:  # a self-check, or the grader's own process
    import transformer_lib as tl


def reference_softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """The library's softmax (the answer a softmax question expects)."""
    return tl.softmax(x, axis=axis)


def naive_softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """``exp(x) / sum(exp(x))`` without the maximum subtracted: what overflows for large logits."""
    e = np.exp(x)
    return e / e.sum(axis=axis, keepdims=True)
