"""Checkers of set 3: splitting and merging heads, multi-head attention, its parameter count.

The weights ``params`` have the names and the orientation of ``tl.MultiHeadAttention``'s four
``nn.Linear`` layers: ``W_q, W_k, W_v, W_o`` ``(d_model, d_model)`` as ``(out, in)``, applied as
``x @ W.T + b``. The expected output and weights come from ``tl.MultiHeadAttention`` with those
weights copied in; :func:`multi_head_reference` recomputes the classic mistakes in numpy.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from numpy import asarray as _asarray
from numpy import ndarray as _ndarray

from .compare import LINEAR_HINT, MATMUL_HINT, expect_array, expect_order, expect_tuple, matches
from .recording import call
from .reference import tl


def check_split_heads(split_heads: Any, x: Any, num_heads: int) -> None:
    """Check ``split_heads(x, num_heads)``: ``(batch, num_heads, seq, d_k)``."""
    x = _asarray(x, dtype=np.float64)
    got = call("split_heads", split_heads, x, num_heads)
    b, s, d = x.shape
    d_k = d // num_heads
    want = x.reshape(b, s, num_heads, d_k).transpose(0, 2, 1, 3)
    expect_array(
        got, want, f"split_heads(x, num_heads={num_heads})",
        mistakes={
            "x was reshaped straight to (batch, heads, seq, d_k), which mixes positions; reshape to "
            "(batch, seq, heads, d_k) first, then swap the seq and heads axes": lambda: (
                x.reshape(b, num_heads, s, d_k)),
            "the heads axis is still after seq: transpose (batch, seq, heads, d_k) to "
            "(batch, heads, seq, d_k)": lambda: x.reshape(b, s, num_heads, d_k),
            "head i should hold features i*d_k .. (i+1)*d_k - 1, a contiguous slice; this takes every "
            "num_heads-th feature": lambda: x.reshape(b, s, d_k, num_heads).transpose(0, 3, 1, 2),
        },
    )


def check_merge_heads(merge_heads: Any, x: Any) -> None:
    """Check ``merge_heads(x)``: back to ``(batch, seq, num_heads * d_k)``."""
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


def library_attention(params: dict, d_model: int, num_heads: int) -> Any:
    """``tl.MultiHeadAttention`` in float64 with the weights of ``params`` copied in (no transposes)."""
    import torch

    mha = tl.MultiHeadAttention(d_model, num_heads).double().eval()
    with torch.no_grad():
        for name in ("q", "k", "v", "o"):
            layer = getattr(mha, f"W_{name}")
            layer.weight.copy_(torch.from_numpy(np.ascontiguousarray(params[f"W_{name}"])))
            layer.bias.copy_(torch.from_numpy(np.ascontiguousarray(params[f"b_{name}"])))
    return mha


def multi_head_reference(query, key, value, params, num_heads, mask=None, scale_dim=None, skip_out=False,
                         swap_kv=False, right_multiply=False) -> tuple[np.ndarray, np.ndarray]:
    """numpy multi-head attention, ``(output, weights)``, with optional deliberate mistakes (for hints).

    ``scale_dim``: divide the scores by its square root instead of sqrt(d_k); ``skip_out``: no
    ``W_o``; ``swap_kv``: projected keys and values swapped; ``right_multiply``: ``x @ W`` instead
    of the library's ``x @ W.T``.
    """
    b, q_len, d_model = query.shape
    k_len = key.shape[1]
    d_k = d_model // num_heads

    def project(x, name):
        W = params[f"W_{name}"]
        return x @ (W if right_multiply else W.T) + params[f"b_{name}"]

    def split(x, n):
        return x.reshape(b, n, num_heads, d_k).transpose(0, 2, 1, 3)  # (batch, heads, n, d_k)

    q = split(project(query, "q"), q_len)
    k = split(project(key, "k"), k_len)
    v = split(project(value, "v"), k_len)
    if swap_kv:
        k, v = v, k
    out, w = tl.attention(q, k, v, mask=mask, scale=math.sqrt(scale_dim or d_k))
    out = out.transpose(0, 2, 1, 3).reshape(b, q_len, d_model)  # (batch, q_len, d_model)
    return (out if skip_out else project(out, "o")), w


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
        return "; ".join(f"axis {i} ({names[i]}) has length {shape[i]}, expected {want.shape[i]}"
                         for i in wrong)
    if got.ndim == 3:
        heads_gone = shape == (b, q, k)
        batch_gone = shape == (h, q, k)
        if heads_gone and batch_gone:  # batch == num_heads: tell them apart by the values
            if any(matches(got, lambda i=i: want[i]) for i in range(b)):
                heads_gone = False
            elif (any(matches(got, lambda i=i: want[:, i]) for i in range(h))
                  or matches(got, lambda: want.mean(1))):
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


def check_multi_head_attention(multi_head_attention: Any, query: Any, key: Any, value: Any, params: dict,
                               num_heads: int, mask: Any = None) -> None:
    """Check ``multi_head_attention(...)``: ``tl.MultiHeadAttention``'s output and weights."""
    import torch

    query, key, value = (_asarray(a, dtype=np.float64) for a in (query, key, value))
    params = {k: _asarray(v, dtype=np.float64) for k, v in params.items()}
    args = (query, key, value, params, num_heads) + (() if mask is None else (_asarray(mask, dtype=bool),))
    out = call("multi_head_attention", multi_head_attention, *args, error_hint=MATMUL_HINT)
    got = expect_tuple(out, 2, "multi_head_attention(...)", "(output, weights)")
    mha = library_attention(params, query.shape[-1], num_heads)
    with torch.no_grad():
        t_mask = None if mask is None else torch.from_numpy(np.asarray(mask, dtype=bool))
        want_out = mha(torch.from_numpy(query), torch.from_numpy(key), torch.from_numpy(value), mask=t_mask)
    want_out, want_w = want_out.numpy(), mha.attention_weights.numpy()
    expect_order(got, (want_out, want_w), "multi_head_attention(...)", "(output, weights)")

    def mistake(**how: Any) -> Callable[[], tuple[np.ndarray, np.ndarray]]:
        return lambda: multi_head_reference(query, key, value, params, num_heads, mask, **how)

    mistakes = {
        "the weights were applied as x @ W + b; " + LINEAR_HINT: mistake(right_multiply=True),
        "each head's scores were divided by sqrt(d_model); a head works in d_k = d_model / num_heads "
        "dimensions, so divide by sqrt(d_k)": mistake(scale_dim=query.shape[-1]),
        "the output projection W_o (and b_o) is missing after concatenating the heads": mistake(
            skip_out=True),
        "each head's scores were divided by sqrt(k_len), the number of keys (key.shape[1]); divide by "
        "sqrt(d_k), the width of each head's queries and keys, d_k = d_model / num_heads": mistake(
            scale_dim=key.shape[1]),
        "keys and values are swapped: scores come from the keys, the weighted sum from the values": lambda: (
            multi_head_reference(query, value, key, params, num_heads, mask)),
        "the projected keys and values were swapped: the scores compare the queries with the projected "
        "keys (key @ W_k.T + b_k), and the weighted sum is over the projected values "
        "(value @ W_v.T + b_v)": mistake(swap_kv=True),
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


def check_count_parameters(count_parameters: Any, d_model: int, num_heads: int) -> None:
    """Check ``count_parameters(d_model, num_heads)``: ``tl.MultiHeadAttention``'s count."""
    got = call("count_parameters", count_parameters, d_model, num_heads)
    want = sum(p.numel() for p in tl.MultiHeadAttention(d_model, num_heads).parameters())
    expect_array(
        got, np.asarray(want), f"count_parameters(d_model={d_model}, num_heads={num_heads})", exact=True,
        mistakes={
            "the biases are missing: each of the four projections has d_model biases": lambda: 4 * d_model**2,
            "the count was multiplied by the number of heads; the heads share the four d_model x d_model "
            "matrices (each head uses a d_k-wide slice), so the total does not depend on num_heads": lambda: (
                num_heads * (4 * d_model**2 + 4 * d_model)),
            "W_o is missing: there are four projections (W_q, W_k, W_v and W_o)": lambda: (
                3 * d_model**2 + 3 * d_model),
        },
    )
