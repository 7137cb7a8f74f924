"""The reference the answers are compared with: the course library ``transformer_lib``.

It is imported here, once, everywhere but in the grading kernel (where :data:`RECORDING` is
True): there the library is not installed, nothing may reach for it, and every checker stops
at :func:`~exercise_checks.recording.call` before it needs a reference value. The checkers of
each set use ``tl``, the two softmaxes and :func:`library_decode` below only after that call.
"""

from __future__ import annotations

from collections.abc import Callable
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


class NextTokenModel:
    """A next-token function seen as a model through the two methods the library's decoders call.

    ``next_token(prefix)`` maps one prefix (a list of ids, the start token first) to ``(vocab_size,)``
    log-probabilities, or logits with ``logits=True`` (``decode`` then takes their log-softmax).
    ``encode`` ignores the source (the model has none); ``decode`` gives each row of ``tgt`` its
    next-token log-probabilities at the last position, the only one a decoder reads.
    """

    def __init__(self, next_token: Callable[[list[int]], np.ndarray], logits: bool = False):
        self.next_token, self.logits = next_token, logits

    def encode(self, src: Any, src_mask: Any) -> Any:
        import torch

        return torch.zeros(src.shape[0], src.shape[1], 1)  # (batch, src_len, 1): no source to read

    def decode(self, tgt: Any, memory: Any, src_mask: Any, tgt_mask: Any) -> Any:
        import torch

        rows = torch.from_numpy(np.stack([self.next_token(row) for row in tgt.tolist()]))  # (batch, vocab)
        if self.logits:
            rows = torch.log_softmax(rows, dim=-1)
        out = torch.zeros(tgt.shape[0], tgt.shape[1], rows.shape[-1], dtype=rows.dtype)
        out[:, -1] = rows
        return out  # (batch, tgt_len, vocab)


def library_decode(decoder: Callable[..., Any], next_token: Callable[[list[int]], np.ndarray], *args: Any,
                   logits: bool = False, **kwargs: Any) -> list[int]:
    """``decoder`` (``tl.greedy_decode``, ``tl.beam_search``) on :class:`NextTokenModel` and one source.

    Calls ``decoder(model, src, *args, **kwargs)`` with a source of one token that the model does
    not read, and returns the one row it produces: the ids after the start token, never padded,
    since a single row stops at its end token.
    """
    import torch

    src = torch.zeros((1, 1), dtype=torch.long)  # (batch=1, src_len=1)
    return decoder(NextTokenModel(next_token, logits), src, *args, **kwargs)[0].tolist()
