"""Checkers of set 5: layer normalisation, the feed-forward network, an encoder layer, greedy decoding.

Weights have the names and the orientation of the library's ``nn.Linear`` layers (see
:func:`~exercise_checks.inputs.random_params`): ``W_1 (d_ff, d_model)`` and ``W_2 (d_model, d_ff)``
as in ``tl.FeedForward``, applied as ``x @ W.T + b``. The expected values come from PyTorch
(``F.layer_norm``, ``nn.TransformerEncoderLayer`` with the weights copied in), from
``tl.FeedForward``, and from ``tl.greedy_decode``, whose contract the greedy decoder follows: the
tokens produced, without the start token, at most ``max_len`` of them, up to and including the
end token.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
from numpy import asarray as _asarray

from .compare import LINEAR_HINT, MATMUL_HINT, expect_array, expect_ids
from .inputs import ToyLanguageModel
from .recording import call
from .reference import library_decode, tl
from .set03_multi_head import multi_head_reference


def _torch_layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> np.ndarray:
    import torch
    import torch.nn.functional as F

    t = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float64))
    return F.layer_norm(t, (x.shape[-1],), torch.from_numpy(gamma), torch.from_numpy(beta), eps).numpy()


def check_layer_norm(layer_norm: Any, x: Any, gamma: Any, beta: Any, eps: float = 1e-5) -> None:
    """Check ``layer_norm(x, gamma, beta, eps)`` over the last axis: PyTorch's ``F.layer_norm``."""
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
            "cancels catastrophically, compute the variance as the mean of (x - mean)**2"
            if spread > 1e3 else ""
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


def _library_feed_forward(x: np.ndarray, W_1: np.ndarray, b_1: np.ndarray, W_2: np.ndarray,
                          b_2: np.ndarray) -> np.ndarray:
    """``tl.FeedForward`` in float64, without dropout, with these weights copied in (no transposes)."""
    import torch

    d_ff, d_model = W_1.shape
    ffn = tl.FeedForward(d_model, d_ff, dropout=0.0).double().eval()
    with torch.no_grad():
        for layer, W, b in ((ffn.W_1, W_1, b_1), (ffn.W_2, W_2, b_2)):
            layer.weight.copy_(torch.from_numpy(np.ascontiguousarray(W)))
            layer.bias.copy_(torch.from_numpy(np.ascontiguousarray(b)))
        return ffn(torch.from_numpy(np.ascontiguousarray(x)).reshape(-1, 1, d_model)).reshape(x.shape).numpy()


def check_feed_forward(feed_forward: Any, x: Any, W_1: Any, b_1: Any, W_2: Any, b_2: Any) -> None:
    """Check ``feed_forward(x, W_1, b_1, W_2, b_2)``: ``tl.FeedForward``'s output."""
    x, W_1, b_1, W_2, b_2 = (_asarray(a, dtype=np.float64) for a in (x, W_1, b_1, W_2, b_2))
    got = call("feed_forward", feed_forward, x, W_1, b_1, W_2, b_2, error_hint=LINEAR_HINT)
    want = _library_feed_forward(x, W_1, b_1, W_2, b_2)
    hidden = x @ W_1.T + b_1  # (..., d_ff)
    expect_array(
        got, want, "feed_forward(x, W_1, b_1, W_2, b_2)",
        mistakes={
            "there is no ReLU between the two layers: max(0, x @ W_1.T + b_1)": lambda: hidden @ W_2.T + b_2,
            "a ReLU was also applied to the output; only the hidden layer has one": lambda: (
                np.maximum(want, 0.0)),
            "the ReLU was applied before adding b_1": lambda: (
                (np.maximum(x @ W_1.T, 0.0) + b_1) @ W_2.T + b_2),
            "the weights were applied as x @ W + b; " + LINEAR_HINT: lambda: (
                np.maximum(x @ W_1 + b_1, 0.0) @ W_2 + b_2),
        },
    )


def _encoder_torch(x: np.ndarray, params: dict, num_heads: int, mask: Any) -> np.ndarray:
    """``nn.TransformerEncoderLayer`` (post-norm, ReLU, no dropout) with the weights of ``params``."""
    import torch
    from torch import nn

    d_model = x.shape[-1]
    d_ff = params["W_1"].shape[0]
    layer = nn.TransformerEncoderLayer(d_model, num_heads, d_ff, dropout=0.0, batch_first=True,
                                       layer_norm_eps=1e-5).double().eval()

    def t(a):
        return torch.from_numpy(np.ascontiguousarray(a, dtype=np.float64))

    with torch.no_grad():  # the same (out, in) orientation as nn.Linear: copied as they are
        sa = layer.self_attn
        sa.in_proj_weight.copy_(torch.cat([t(params["W_q"]), t(params["W_k"]), t(params["W_v"])]))
        sa.in_proj_bias.copy_(torch.cat([t(params["b_q"]), t(params["b_k"]), t(params["b_v"])]))
        sa.out_proj.weight.copy_(t(params["W_o"]))
        sa.out_proj.bias.copy_(t(params["b_o"]))
        layer.linear1.weight.copy_(t(params["W_1"]))
        layer.linear1.bias.copy_(t(params["b_1"]))
        layer.linear2.weight.copy_(t(params["W_2"]))
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


def _encoder_numpy(x, params, num_heads, mask, norm_first=False, residual=True) -> np.ndarray:
    """The encoder layer in numpy, pre-norm or without residuals (what those mistakes compute)."""
    def ln(h, i):
        m = h.mean(-1, keepdims=True)
        return (h - m) / np.sqrt(h.var(-1, keepdims=True) + 1e-5) * params[f"gamma_{i}"] + params[f"beta_{i}"]

    def attn(h):
        return multi_head_reference(h, h, h, params, num_heads, mask)[0]

    def ffn(h):
        return np.maximum(h @ params["W_1"].T + params["b_1"], 0.0) @ params["W_2"].T + params["b_2"]

    if norm_first:
        h = x + attn(ln(x, 1))
        return h + ffn(ln(h, 2))
    if not residual:
        h = ln(attn(x), 1)
        return ln(ffn(h), 2)
    h = ln(x + attn(x), 1)
    return ln(h + ffn(h), 2)


def check_encoder_layer(encoder_layer: Any, x: Any, params: dict, num_heads: int, mask: Any = None) -> None:
    """Check ``encoder_layer(x, params, num_heads[, mask])``: ``nn.TransformerEncoderLayer``'s."""
    x = _asarray(x, dtype=np.float64)
    params = {k: _asarray(v, dtype=np.float64) for k, v in params.items()}
    args = (x, params, num_heads) + (() if mask is None else (_asarray(mask, dtype=bool),))
    got = call("encoder_layer", encoder_layer, *args, error_hint=f"{MATMUL_HINT}; {LINEAR_HINT}")
    want = _encoder_torch(x, params, num_heads, mask)
    expect_array(
        got, want, "encoder_layer(x, params, num_heads)", rtol=1e-5, atol=1e-6,
        mistakes={
            "this is the pre-norm layer (normalise, then the sublayer, then add); the original layer is "
            "post-norm: x = layer_norm(x + sublayer(x))": lambda: (
                _encoder_numpy(x, params, num_heads, mask, True)),
            "the residual connections are missing: add each sublayer's input to its output before "
            "normalising": lambda: _encoder_numpy(x, params, num_heads, mask, residual=False),
        },
    )


def _library_greedy(model: ToyLanguageModel, max_len: int, bos_id: int, eos_id: int) -> np.ndarray:
    """``tl.greedy_decode`` on the toy model (its logits): the ids produced, without ``bos_id``."""
    return np.asarray(library_decode(tl.greedy_decode, model, max_len, logits=True, bos_id=bos_id, eos_id=eos_id,
                                     pad_id=0))


def check_greedy_decode(greedy_decode: Any, model: ToyLanguageModel, max_len: int, bos_id: int,
                        eos_id: int) -> None:
    """Check ``greedy_decode(model, max_len, ...)``: what ``tl.greedy_decode`` returns."""
    fresh = copy.deepcopy(model)  # before the answer can touch model
    got = call("greedy_decode", greedy_decode, model, max_len, bos_id=bos_id, eos_id=eos_id)
    want = _library_greedy(fresh, max_len, bos_id, eos_id)
    what = f"greedy_decode(model, max_len={max_len}, bos_id={bos_id}, eos_id={eos_id})"
    got = np.asarray(expect_ids(got, what), dtype=np.int64)
    if got.tolist() == want.tolist():
        return
    with_bos = [bos_id, *want.tolist()]
    if got.tolist() in (with_bos, with_bos[:max_len]):
        raise AssertionError(f"{what} returned {got.tolist()}, which starts with the start token "
                             f"bos_id={bos_id}; like tl.greedy_decode, return only the tokens produced after "
                             f"it: {want.tolist()}")
    if got.size > max_len:
        raise AssertionError(f"{what} returned {got.size} tokens; produce at most max_len={max_len} tokens "
                             "(the end token included, the start token not returned)")
    prefix = [bos_id]
    for i in range(min(got.size, want.size)):
        if got[i] != want[i]:
            raise AssertionError(
                f"{what}: token {i} is {got[i]} but the argmax of the model's logits for the prefix {prefix} "
                f"is {want[i]}; feed the whole prefix so far, the start token first, to the model and pick "
                "the largest logit"
            )
        prefix.append(int(want[i]))
    if got.size < want.size:
        raise AssertionError(f"{what} stopped after {got.size} tokens {got.tolist()}; expected "
                             f"{want.tolist()}: keep going until the end token appears or max_len tokens "
                             "have been produced")
    if got.size > want.size:
        raise AssertionError(f"{what} returned {got.tolist()}; expected {want.tolist()}: stop right after "
                             f"producing the end token eos_id={eos_id} (keep it in the output)")
