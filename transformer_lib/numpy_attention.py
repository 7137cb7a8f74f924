"""Attention in plain numpy: the maths of chapters 01-04, before any learning framework.

Builds up from the smallest piece: a stable softmax, cosine similarity, parameter-free
cosine attention (chapter 03), general scaled dot-product attention (chapter 04) and
Bahdanau's additive attention (chapter 01).

Shape notation used throughout the library: ``n`` or ``q_len`` queries, ``k_len`` keys,
``d`` or ``d_k`` features per query and key, ``d_v`` features per value, ``...`` any
leading batch dimensions.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from . import _checks


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """Numerically stable softmax along ``axis``.

    Subtracting the maximum before exponentiating leaves the result unchanged (the factor
    cancels) but keeps ``exp`` from overflowing, so logits of magnitude 1e4 are fine.
    Entries equal to ``-inf`` get weight exactly 0; a slice that is entirely ``-inf``
    (nothing to attend to) gets all zeros rather than NaN; ``+inf`` entries share all the
    weight of their slice. The dtype of a floating input is kept.

    Args:
        x: array of logits, any shape.
        axis: the axis that sums to 1.

    Taught in chapter 03 (cosine-similarity attention).
    """
    x = _checks.as_float_array(x, "x")
    if x.ndim == 0:
        raise ValueError("x must have at least one dimension, got a scalar")
    if not -x.ndim <= axis < x.ndim:
        raise ValueError(f"axis must be in [{-x.ndim}, {x.ndim - 1}] for x of shape {x.shape}, got {axis}")
    if np.isnan(x).any():
        raise ValueError("x contains NaN")
    peak = np.max(x, axis=axis, keepdims=True)
    shifted = x - np.where(np.isfinite(peak), peak, 0.0)  # an all -inf slice stays -inf -> exp 0
    if np.isposinf(peak).any():
        # a +inf logit is the limit of ever larger ones: the +inf entries share all the weight
        zero, minus_inf = np.zeros((), x.dtype), np.array(-np.inf, x.dtype)
        shifted = np.where(np.isposinf(peak), np.where(np.isposinf(x), zero, minus_inf), shifted)
    e = np.exp(shifted)
    total = np.sum(e, axis=axis, keepdims=True)
    return np.divide(e, total, out=np.zeros_like(e), where=total > 0)


def cosine_similarity(A: np.ndarray, B: np.ndarray | None = None) -> np.ndarray:
    """Matrix of cosine similarities between the rows of ``A`` and the rows of ``B``.

    ``cos(a, b) = a . b / (|a| |b|)``: 1 for vectors pointing the same way, 0 for
    orthogonal ones, -1 for opposite ones. A zero row has no direction; its similarity
    with anything is defined as 0 (never NaN).

    Args:
        A: ``(n, d)`` array, one vector per row.
        B: ``(m, d)`` array, or None to compare ``A`` with itself.

    Returns:
        ``(n, m)`` array with entry ``[i, j] = cos(A[i], B[j])``.

    Taught in chapter 03.
    """
    A = _checks.as_float_array(A, "A")
    _checks.ndim_exactly(A, 2, "A", "(n, d)")
    if B is None:
        B = A
    else:
        B = _checks.as_float_array(B, "B")
        _checks.ndim_exactly(B, 2, "B", "(m, d)")
        _checks.same_size(A.shape[1], B.shape[1], "the feature sizes of A and B (d)")

    def unit_rows(M: np.ndarray) -> np.ndarray:
        norms = np.linalg.norm(M, axis=1, keepdims=True)
        return np.divide(M, norms, out=np.zeros_like(M), where=norms > 0)

    return np.clip(unit_rows(A) @ unit_rows(B).T, -1.0, 1.0)


def cosine_attention(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Parameter-free self-attention whose scores are cosine similarities.

    ``weights = softmax(cosine_similarity(X))`` row by row and ``Z = weights @ X``: each
    new vector is a weighted average of all the input vectors, weighted by how similar
    they are to it.

    Args:
        X: ``(n, d)`` array, one embedding per word.

    Returns:
        ``(Z, weights)``: the contextual embeddings ``(n, d)`` and the weights ``(n, n)``.

    Taught in chapter 03.
    """
    X = _checks.as_float_array(X, "X")
    _checks.ndim_exactly(X, 2, "X", "(n, d)")
    weights = softmax(cosine_similarity(X), axis=-1)
    return weights @ X, weights


def attention(
    Q: np.ndarray,
    K: np.ndarray,
    V: np.ndarray,
    mask: np.ndarray | None = None,
    scale: bool | float = True,
) -> tuple[np.ndarray, np.ndarray]:
    """(Scaled) dot-product attention: ``softmax(Q K^T / sqrt(d_k)) V``.

    Args:
        Q: ``(..., q_len, d_k)`` queries (a single query of shape ``(d_k,)`` is allowed).
        K: ``(..., k_len, d_k)`` keys.
        V: ``(..., k_len, d_v)`` values.
        mask: optional boolean array, ``True`` where query i may attend to key j,
            broadcastable to ``(..., q_len, k_len)``. Masked scores become ``-inf`` and
            get weight exactly 0; a fully masked row gets zero weights and a zero output.
        scale: True divides the scores by ``sqrt(d_k)``; False leaves them unscaled; a
            positive number divides by that number.

    Returns:
        ``(output, weights)``: ``(..., q_len, d_v)`` and ``(..., q_len, k_len)``.

    Taught in chapter 04 (queries, keys and values) and chapter 05 (masking).
    """
    Q = _checks.as_float_array(Q, "Q")
    K = _checks.as_float_array(K, "K")
    V = _checks.as_float_array(V, "V")
    single_query = Q.ndim == 1
    if single_query:
        Q = Q[None, :]
    _checks.ndim_at_least(K, 2, "K", "(..., k_len, d_k)")
    _checks.ndim_at_least(V, 2, "V", "(..., k_len, d_v)")
    _checks.same_size(Q.shape[-1], K.shape[-1], "the last dimensions of Q and K (d_k)")
    _checks.same_size(K.shape[-2], V.shape[-2], "the key and value counts of K and V (k_len)")
    if isinstance(scale, bool):
        divisor = math.sqrt(Q.shape[-1]) if scale else 1.0  # a Python float keeps float32 float32
    elif isinstance(scale, (int, float)) and scale > 0:
        divisor = float(scale)
    else:
        raise ValueError(f"scale must be True, False or a positive number, got {scale!r}")

    scores = Q @ np.swapaxes(K, -1, -2) / divisor  # (..., q_len, k_len)
    if mask is not None:
        mask = np.asarray(mask)
        if single_query and mask.ndim == 1:
            mask = mask[None, :]
        _checks.bool_mask(mask, "mask", scores.shape, "(..., q_len, k_len)")
        scores = np.where(mask, scores, -np.inf)
    weights = softmax(scores, axis=-1)
    output = weights @ V  # (..., q_len, d_v)
    if single_query:
        return output[0], weights[0]
    return output, weights


class AdditiveAttention(NamedTuple):
    """What :func:`additive_attention` returns."""

    context: np.ndarray  # (d_h,) or (m, d_h): c_t = sum_i alpha_{t,i} h_i
    weights: np.ndarray  # (n,) or (m, n): alpha_{t,i}, softmax of the scores
    scores: np.ndarray  # (n,) or (m, n): e_{t,i} = v^T tanh(W_s s + W_h h_i)


def additive_attention(
    s: np.ndarray, H: np.ndarray, W_s: np.ndarray, W_h: np.ndarray, v: np.ndarray
) -> AdditiveAttention:
    """Bahdanau (additive) attention of a decoder state over encoder states.

    The alignment score of decoder state ``s`` (the previous state ``s_{t-1}``) with
    encoder annotation ``h_i`` is ``e_i = v^T tanh(W_s s + W_h h_i)``; the weights are
    their softmax and the context vector is ``c = sum_i alpha_i h_i``.

    Args:
        s: ``(d_s,)`` one decoder state, or ``(m, d_s)`` several at once.
        H: ``(n, d_h)`` encoder annotations, one per source position.
        W_s: ``(d_a, d_s)`` projection of the decoder state.
        W_h: ``(d_a, d_h)`` projection of the annotations.
        v: ``(d_a,)`` the scoring vector.

    Returns:
        ``AdditiveAttention(context, weights, scores)``.

    Taught in chapter 01 (why attention).
    """
    s = _checks.as_float_array(s, "s")
    H = _checks.as_float_array(H, "H")
    W_s = _checks.as_float_array(W_s, "W_s")
    W_h = _checks.as_float_array(W_h, "W_h")
    v = _checks.as_float_array(v, "v")
    if s.ndim not in (1, 2):
        raise ValueError(f"s must have shape (d_s,) or (m, d_s), got shape {s.shape}")
    _checks.ndim_exactly(H, 2, "H", "(n, d_h)")
    _checks.ndim_exactly(W_s, 2, "W_s", "(d_a, d_s)")
    _checks.ndim_exactly(W_h, 2, "W_h", "(d_a, d_h)")
    _checks.ndim_exactly(v, 1, "v", "(d_a,)")
    _checks.same_size(W_s.shape[1], s.shape[-1], "W_s's columns and the size of s (d_s)")
    _checks.same_size(W_h.shape[1], H.shape[1], "W_h's columns and the size of H's rows (d_h)")
    _checks.same_size(W_s.shape[0], W_h.shape[0], "the rows of W_s and W_h (d_a)")
    _checks.same_size(v.shape[0], W_h.shape[0], "the length of v and the rows of W_h (d_a)")

    projected_s = s @ W_s.T  # (d_a,) or (m, d_a)
    projected_h = H @ W_h.T  # (n, d_a)
    hidden = np.tanh(projected_s[..., None, :] + projected_h)  # (n, d_a) or (m, n, d_a)
    scores = hidden @ v  # (n,) or (m, n)
    weights = softmax(scores, axis=-1)
    context = weights @ H  # (d_h,) or (m, d_h)
    return AdditiveAttention(context, weights, scores)
