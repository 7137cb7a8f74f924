"""Checkers of set 2: scaled scores, the causal and padding masks, masked attention, the decoder mask.

The masks are the library's: boolean, ``True`` where a query may attend to a key, shaped to
broadcast over ``(batch, heads, q_len, k_len)``. ``tl.causal_mask(n)`` is ``(n, n)``,
``tl.padding_mask(tokens, pad_id)`` is ``(batch, 1, 1, seq)``, and a decoder's mask is their
``&``, ``(batch, 1, seq, seq)``, as ``tl.make_batch`` builds it. The expected values come from
those functions and from ``tl.attention``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from numpy import asarray as _asarray

from .compare import MATMUL_HINT, expect_array, expect_order, expect_tuple
from .recording import call
from .reference import reference_softmax, tl


def _library_masks(tokens: np.ndarray, pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """The library's masks: ``tl.causal_mask`` ``(seq, seq)``, ``tl.padding_mask`` ``(batch, 1, 1, seq)``."""
    import torch

    causal = tl.causal_mask(tokens.shape[1]).numpy()
    ids = torch.from_numpy(np.ascontiguousarray(tokens, dtype=np.int64))
    padding = tl.padding_mask(ids, int(pad_id)).numpy()
    return causal, padding


def check_attention_scores(attention_scores: Any, Q: Any, K: Any) -> None:
    """Check ``attention_scores(Q, K)``: ``Q K^T / sqrt(d_k)``, ``(..., q_len, k_len)``."""
    Q, K = _asarray(Q, dtype=np.float64), _asarray(K, dtype=np.float64)
    got = call("attention_scores", attention_scores, Q, K, error_hint=MATMUL_HINT)
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
    """Check ``causal_mask(n)``: the ``(n, n)`` boolean ``tl.causal_mask(n)``."""
    got = call("causal_mask", causal_mask, n)
    want = tl.causal_mask(n).numpy()
    expect_array(
        got, want, f"causal_mask({n})",
        mistakes={
            "the diagonal is False: every position may attend to itself (np.tril with k=0)": lambda: np.tril(
                np.ones((n, n), dtype=bool), -1),
            "the mask is inverted or upper-triangular: True means 'may attend', i.e. key j <= query i": (
                lambda: np.triu(np.ones((n, n), dtype=bool), 1 if n > 1 else 0)),
            "the mask is upper-triangular; query i (row) may attend to keys j <= i (columns)": lambda: (
                np.triu(np.ones((n, n), dtype=bool))),
        },
    )


def check_padding_mask(padding_mask: Any, tokens: Any, pad_id: int) -> None:
    """Check ``padding_mask(tokens, pad_id)``: ``tl.padding_mask``'s ``(batch, 1, 1, seq)``."""
    tokens = _asarray(tokens)
    got = call("padding_mask", padding_mask, tokens, pad_id)
    _, want = _library_masks(tokens, pad_id)
    keep = tokens != pad_id  # (batch, seq)
    expect_array(
        got, want, f"padding_mask(tokens, pad_id={pad_id})",
        mistakes={
            "the shape is (batch, seq); add a heads axis and a query axis, both of length 1, so the mask "
            "broadcasts over heads and queries: (batch, 1, 1, seq)": lambda: keep,
            "one axis is missing: a mask broadcasts to the scores (batch, heads, q_len, k_len), so the "
            "padding mask is (batch, 1, 1, seq), as tl.padding_mask returns, with "
            "(tokens != pad_id)[:, None, None, :]": lambda: keep[:, None, :],
            "the new axes are in the wrong place: the mask hides keys, the last axis, so use "
            "(batch, 1, 1, seq)": lambda: keep[:, :, None, None],
            "the sequence axis is in the queries' place: the mask hides keys, the last axis, so use "
            "(batch, 1, 1, seq)": lambda: keep[:, None, :, None],
            "the mask is inverted: True means a real token that may be attended to": lambda: ~want,
            "the pad id is hard-coded as 0; compare with pad_id": lambda: (tokens != 0)[:, None, None, :],
        },
    )


def _masked_attention_mistakes(Q: np.ndarray, K: np.ndarray, V: np.ndarray, mask: Any) -> dict[str, Callable]:
    """What the classic slips of masked attention compute, as weights."""
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
        "the softmax normalised over the queries (axis -2); each query's weights (last axis) sum to 1": (
            lambda: reference_softmax(np.where(mask, scores, -np.inf) if mask is not None else scores, -2)),
    })
    if mask is not None:
        full = np.broadcast_to(mask, np.broadcast_shapes(mask.shape, scores.shape))
        mistakes.update({
            "the mask is inverted: True means 'may attend'; set the scores where mask is False to -inf": (
                lambda: reference_softmax(np.where(~full, scores, -np.inf))),
            "the scores were multiplied by the mask; a score of 0 still gets weight, set masked scores to "
            "-inf instead (np.where(mask, scores, -np.inf))": lambda: reference_softmax(scores * full),
            "the weights were masked after the softmax without renormalising; mask the scores before": (
                lambda: reference_softmax(scores) * full),
            "a query with no allowed key got uniform weights; it should get all-zero weights and a zero "
            "output": lambda: reference_softmax(np.where(full, scores, -1e9)),
        })
    return mistakes


def check_masked_attention(masked_attention: Any, Q: Any, K: Any, V: Any, mask: Any = None) -> None:
    """Check ``masked_attention(Q, K, V[, mask])``: ``(output, weights)`` of ``tl.attention``."""
    Q, K, V = (_asarray(a, dtype=np.float64) for a in (Q, K, V))
    if mask is None:
        out = call("masked_attention", masked_attention, Q, K, V, error_hint=MATMUL_HINT)
    else:
        mask = _asarray(mask, dtype=bool)
        out = call("masked_attention", masked_attention, Q, K, V, mask, error_hint=MATMUL_HINT)
    got = expect_tuple(out, 2, "masked_attention(Q, K, V, mask)", "(output, weights)")
    want_out, want_w = tl.attention(Q, K, V, mask=mask)
    expect_order(got, (want_out, want_w), "masked_attention(Q, K, V, mask)", "(output, weights)")
    empty_rows = mask is not None and bool((~np.broadcast_to(mask, want_w.shape).any(axis=-1)).any())
    nan_hint = (
        "a query whose keys are all masked has nothing to attend to: give it zero weights and a zero "
        "output (softmax of an all -inf row is 0/0)" if empty_rows else
        "-inf scores should get weight exactly 0; a NaN means 0/0 or inf - inf"
    )
    expect_array(got[1], want_w, "the attention weights", mistakes=_masked_attention_mistakes(Q, K, V, mask),
                 nan_hint=nan_hint, plural=True)
    expect_array(got[0], want_out, "the attention output", nan_hint=nan_hint, mistakes={
        "output = weights.T @ V; use weights @ V": lambda: np.swapaxes(want_w, -1, -2) @ V,
    })


def check_decoder_mask(decoder_mask: Any, tokens: Any, pad_id: int) -> None:
    """Check ``decoder_mask(tokens, pad_id)``: causal and padding, ``(batch, 1, seq, seq)``."""
    tokens = _asarray(tokens)
    got = call("decoder_mask", decoder_mask, tokens, pad_id)
    causal, padding = _library_masks(tokens, pad_id)  # (seq, seq), (batch, 1, 1, seq)
    want = causal & padding  # (batch, 1, seq, seq), as tl.make_batch builds tgt_mask
    shape = want.shape
    expect_array(
        got, want, f"decoder_mask(tokens, pad_id={pad_id})",
        mistakes={
            "the heads axis is missing: combine causal_mask(seq) (seq, seq) with "
            "padding_mask(tokens, pad_id) (batch, 1, 1, seq); broadcasting gives (batch, 1, seq, seq), as "
            "the library's decoder mask":
                lambda: want[:, 0],
            "the masks were combined with `or`; a key must be both earlier and not padding (&)": lambda: (
                causal | padding),
            # before "only the causal part": without a token 0 a hard-coded 0 hides no key either
            f"the padding keys are not hidden: the pad id is hard-coded as 0, compare the tokens with pad_id="
            f"{pad_id}": lambda: causal & (tokens != 0)[:, None, None, :],
            "only the causal part is there; also hide the padding keys": lambda: (
                np.broadcast_to(causal, shape)),
            "only the padding part is there; also hide future positions": lambda: (
                np.broadcast_to(padding, shape)),
        },
    )
