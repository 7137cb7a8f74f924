"""Checkers of set 7: causal self-attention, a pre-norm decoder block, the next-token loss, a uniform model.

The weights ``params`` have the names and the orientation of the library's ``nn.Linear`` layers (see
:func:`~exercise_checks.inputs.random_params`), applied as ``x @ W.T + b``. The expected values
come from the library: ``tl.MultiHeadAttention`` with ``tl.causal_mask`` (``True`` on and below the
diagonal: a token sees itself and the tokens before it); ``tl.DecoderLayer`` as a GPT-2 block
(``norm_first=True``, ``activation="gelu_tanh"``, ``cross_attention=False``); the mean
cross-entropy of the predictions of ``ids[:, 1:]`` from the logits at ``ids[:, :-1]``, over the
targets that are not padding, as ``tl.LabelSmoothingLoss(0.0, pad_id)`` averages it (and as
chapter 14's ``next_token_loss`` computes it with ``ignore_index``).

Slips that give ``nan`` (a query whose keys are all masked) are recognised too: candidates are
compared with NaNs in the same places counting as equal.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from numpy import asarray as _asarray

from .compare import LINEAR_HINT, MATMUL_HINT, expect_array, expect_order, expect_tuple
from .recording import call
from .reference import tl
from .set03_multi_head import library_attention

CAUSAL_HINT = (
    "the causal mask is True on and below the diagonal, np.tril(np.ones((n, n), dtype=bool)): query i sees "
    "keys 0 .. i, itself included"
)


def _same(got: Any, candidate: Callable[[], Any]) -> bool:
    """Whether ``got`` equals what a slip computes, NaNs in the same places counting as equal."""
    try:
        with np.errstate(all="ignore"):
            c = np.asarray(candidate(), dtype=np.float64)
        g = np.asarray(got)
        return (g.shape == c.shape and g.dtype.kind in "biuf"
                and bool(np.allclose(g.astype(np.float64), c, rtol=1e-6, atol=1e-9, equal_nan=True)))
    except Exception:
        return False


def _softmax(s: np.ndarray) -> np.ndarray:
    e = np.exp(s - s.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _attention_np(x: np.ndarray, params: dict, num_heads: int, *, allowed: np.ndarray | None = None,
                  fill: str = "-inf", after_softmax: bool = False, scale_dim: int | None = None,
                  right_multiply: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Causal self-attention in numpy, ``(output, weights)``, with a slip chosen by the arguments.

    ``allowed``: the ``(n, n)`` mask used (default: the causal mask); ``fill``: what masked scores
    become, ``"-inf"`` (a row with nothing allowed is NaN), ``"-1e9"`` (it is uniform) or ``"zero"``
    (``-inf``, then NaNs set to 0); ``after_softmax``: the mask multiplies the weights instead;
    ``scale_dim``: divide by its square root instead of ``sqrt(d_k)``; ``right_multiply``: ``x @ W``.
    """
    b, n, d = x.shape
    d_k = d // num_heads
    if allowed is None:
        allowed = np.tril(np.ones((n, n), dtype=bool))

    def project(h, name):
        W = params[f"W_{name}"]
        return h @ (W if right_multiply else W.T) + params[f"b_{name}"]

    def split(h):
        return h.reshape(b, n, num_heads, d_k).transpose(0, 2, 1, 3)

    q, k, v = split(project(x, "q")), split(project(x, "k")), split(project(x, "v"))
    s = q @ np.swapaxes(k, -1, -2) / math.sqrt(scale_dim or d_k)
    with np.errstate(all="ignore"):
        if after_softmax:
            w = _softmax(s) * allowed
        else:
            s = np.where(allowed, s, -1e9 if fill == "-1e9" else -np.inf)
            w = _softmax(s)
            if fill == "zero":
                w = np.nan_to_num(w, nan=0.0)
        out = (w @ v).transpose(0, 2, 1, 3).reshape(b, n, d)
    return project(out, "o"), w


def _attention_slips(x: np.ndarray, params: dict, num_heads: int) -> dict[str, list[Callable[[], tuple]]]:
    """Each slip of causal attention, with the ways a student's softmax may compute it."""
    n = x.shape[1]
    ones = np.ones((n, n), dtype=bool)

    def variants(**how: Any) -> list[Callable[[], tuple]]:
        return [lambda f=f: _attention_np(x, params, num_heads, fill=f, **how) for f in ("-inf", "-1e9", "zero")]

    return {
        "the mask is off by one: a token does not see itself (np.tril(..., k=-1) leaves out the diagonal), so "
        "the first token has nothing to attend to; " + CAUSAL_HINT: variants(allowed=np.tril(ones, k=-1)),
        "the mask is off by one: a token also sees the next token (np.tril(..., k=1)); " + CAUSAL_HINT:
            variants(allowed=np.tril(ones, k=1)),
        "the mask is upside down: each token sees itself and the tokens after it (np.triu); " + CAUSAL_HINT:
            variants(allowed=np.triu(ones)),
        "the mask was used the wrong way round: True marks what a query may see, so keep the scores where "
        "the mask is True and set the others to -inf (np.where(mask, scores, -np.inf))":
            variants(allowed=~np.tril(ones)),
        "the mask was applied after the softmax, so each row's weights no longer sum to 1; set the masked "
        "scores to -inf before the softmax": [lambda: _attention_np(x, params, num_heads, after_softmax=True)],
        "there is no causal mask: every token sees the whole sequence, the future included; " + CAUSAL_HINT:
            [lambda: _attention_np(x, params, num_heads, allowed=ones)],
        "each head's scores were divided by sqrt(d_model); a head works in d_k = d_model / num_heads "
        "dimensions, so divide by sqrt(d_k)": [lambda: _attention_np(x, params, num_heads, scale_dim=x.shape[-1])],
        "the weights were applied as x @ W + b; " + LINEAR_HINT: [
            lambda: _attention_np(x, params, num_heads, right_multiply=True)],
    }


def _name_slip(got: Any, want: np.ndarray, slips: dict[str, list[Callable[[], tuple]]], part: int,
               what: str) -> None:
    """Name the slip whose result the answer equals, unless the answer is right (a slip may change nothing)."""
    if _same(got, lambda: want):
        return
    for explanation, candidates in slips.items():
        if any(_same(got, lambda c=c: c()[part]) for c in candidates):
            raise AssertionError(f"{what} do not match the expected values.\nHint: {explanation}")


def _library_causal(x: np.ndarray, params: dict, num_heads: int) -> tuple[np.ndarray, np.ndarray]:
    """``tl.MultiHeadAttention`` with these weights, on ``(x, x, x)`` with ``tl.causal_mask``."""
    import torch

    mha = library_attention(params, x.shape[-1], num_heads)
    with torch.no_grad():
        t = torch.from_numpy(np.ascontiguousarray(x))
        out = mha(t, t, t, mask=tl.causal_mask(x.shape[1]), need_weights=True)
    return out.numpy(), mha.attention_weights.numpy()


def check_causal_self_attention(causal_self_attention: Any, x: Any, params: dict, num_heads: int) -> None:
    """Check ``causal_self_attention(x, params, num_heads)``: ``tl.MultiHeadAttention`` with ``tl.causal_mask``."""
    x = _asarray(x, dtype=np.float64)
    params = {k: _asarray(v, dtype=np.float64) for k, v in params.items()}
    out = call("causal_self_attention", causal_self_attention, x, params, num_heads,
               error_hint=f"{MATMUL_HINT}; {LINEAR_HINT}")
    what = f"causal_self_attention(x, params, num_heads={num_heads})"
    got = expect_tuple(out, 2, what, "(output, weights)")
    want_out, want_w = _library_causal(x, params, num_heads)
    expect_order(got, (want_out, want_w), what, "(output, weights)")
    slips = _attention_slips(x, params, num_heads)
    b, n, _ = x.shape
    if isinstance(got[1], np.ndarray) and got[1].shape != want_w.shape:
        raise AssertionError(
            f"the weights have shape {got[1].shape}; return every head's weights, shape (batch, num_heads, seq, "
            f"seq) = {want_w.shape}, before the heads are merged")
    _name_slip(got[1], want_w, slips, 1, "the attention weights of " + what)
    expect_array(got[1], want_w, "the attention weights of " + what, plural=True,
                 nan_hint="a query has no key it may see (a row of -inf gives 0/0); " + CAUSAL_HINT)
    _name_slip(got[0], want_out, slips, 0, "the output values of " + what)
    expect_array(got[0], want_out, "the output of " + what)


def _gelu_tanh(h: np.ndarray) -> np.ndarray:
    return 0.5 * h * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * h**3)))


def _library_block(x: np.ndarray, params: dict, num_heads: int) -> np.ndarray:
    """``tl.DecoderLayer`` as a GPT-2 block (pre-norm, tanh GELU, no cross-attention) with these weights."""
    import torch

    d_model, d_ff = x.shape[-1], params["W_1"].shape[0]
    block = tl.DecoderLayer(d_model, num_heads, d_ff, dropout=0.0, norm_first=True, activation="gelu_tanh",
                            cross_attention=False).double().eval()

    def t(a):
        return torch.from_numpy(np.ascontiguousarray(a, dtype=np.float64))

    with torch.no_grad():
        for name in "qkvo":
            layer = getattr(block.self_attn, f"W_{name}")
            layer.weight.copy_(t(params[f"W_{name}"]))
            layer.bias.copy_(t(params[f"b_{name}"]))
        for i in (1, 2):
            getattr(block.feed_forward, f"W_{i}").weight.copy_(t(params[f"W_{i}"]))
            getattr(block.feed_forward, f"W_{i}").bias.copy_(t(params[f"b_{i}"]))
        for norm, i in ((block.add_norm1.norm, 1), (block.add_norm3.norm, 2)):
            norm.weight.copy_(t(params[f"gamma_{i}"]))
            norm.bias.copy_(t(params[f"beta_{i}"]))
        return block(t(x), tgt_mask=tl.causal_mask(x.shape[1])).numpy()


def _block_np(x: np.ndarray, params: dict, num_heads: int, *, post_norm: bool = False, residual: bool = True,
              ffn_reads_x: bool = False, causal: bool = True, activation: str = "gelu_tanh") -> np.ndarray:
    """The block in numpy, with a slip chosen by the arguments (the hints' candidates)."""
    def ln(h, i):
        m = h.mean(-1, keepdims=True)
        return (h - m) / np.sqrt(h.var(-1, keepdims=True) + 1e-5) * params[f"gamma_{i}"] + params[f"beta_{i}"]

    def attn(h):
        n = h.shape[1]
        allowed = np.tril(np.ones((n, n), dtype=bool)) if causal else np.ones((n, n), dtype=bool)
        return _attention_np(h, params, num_heads, allowed=allowed)[0]

    def ffn(h):
        pre = h @ params["W_1"].T + params["b_1"]
        act = np.maximum(pre, 0.0) if activation == "relu" else _gelu_tanh(pre)
        return act @ params["W_2"].T + params["b_2"]

    if post_norm:
        h = ln(x + attn(x), 1)
        return ln(h + ffn(h), 2)
    if not residual:
        return ffn(ln(attn(ln(x, 1)), 2))
    h = x + attn(ln(x, 1))
    return h + ffn(ln(x if ffn_reads_x else h, 2))


def check_decoder_block(decoder_block: Any, x: Any, params: dict, num_heads: int) -> None:
    """Check ``decoder_block(x, params, num_heads)``: ``tl.DecoderLayer`` as a GPT-2 block."""
    x = _asarray(x, dtype=np.float64)
    params = {k: _asarray(v, dtype=np.float64) for k, v in params.items()}
    got = call("decoder_block", decoder_block, x, params, num_heads, error_hint=f"{MATMUL_HINT}; {LINEAR_HINT}")
    want = _library_block(x, params, num_heads)
    expect_array(
        got, want, f"decoder_block(x, params, num_heads={num_heads})", rtol=1e-5, atol=1e-6,
        mistakes={
            "this is the post-norm block of the original Transformer, LN(x + sublayer(x)); GPT-2's block is "
            "pre-norm: x + sublayer(LN(x)), the residual path left untouched": lambda: (
                _block_np(x, params, num_heads, post_norm=True)),
            "the residual connections are missing: add each sublayer's input, h = x + attention(LN_1(x)), then "
            "h + FFN(LN_2(h))": lambda: _block_np(x, params, num_heads, residual=False),
            "the feed-forward network read LN_2(x), the block's input; it reads LN_2(h), with "
            "h = x + attention(LN_1(x))": lambda: _block_np(x, params, num_heads, ffn_reads_x=True),
            "the attention is not causal: the block's self-attention uses the causal mask": lambda: (
                _block_np(x, params, num_heads, causal=False)),
            "the feed-forward network used ReLU; GPT-2's uses GELU (the given feed_forward)": lambda: (
                _block_np(x, params, num_heads, activation="relu")),
        },
    )


def _log_softmax(z: np.ndarray) -> np.ndarray:
    m = z.max(-1, keepdims=True)
    return z - m - np.log(np.exp(z - m).sum(-1, keepdims=True))


def _library_loss(logits: np.ndarray, ids: np.ndarray, pad_id: int) -> float:
    """The mean cross-entropy over the targets that are not padding, as ``tl.LabelSmoothingLoss(0.0, pad_id)``."""
    import torch

    log_probs = torch.log_softmax(torch.from_numpy(np.ascontiguousarray(logits[:, :-1])), dim=-1)
    targets = torch.from_numpy(np.ascontiguousarray(ids[:, 1:], dtype=np.int64))
    return float(tl.LabelSmoothingLoss(0.0, pad_id)(log_probs, targets))


def _loss_slips(logits: np.ndarray, ids: np.ndarray, pad_id: int) -> dict[str, Callable[[], float]]:
    def nll(z, targets):  # (batch, n, V), (batch, n) -> (batch, n)
        return -np.take_along_axis(_log_softmax(z), targets[..., None], axis=-1)[..., 0]

    shifted = nll(logits[:, :-1], ids[:, 1:])
    real = ids[:, 1:] != pad_id
    return {
        "the loss was averaged over the padding too: the padded positions add 0 but count in the denominator; "
        "divide the sum over real targets by their number, (targets != pad_id).sum()": lambda: (
            (shifted * real).sum() / real.size),
        "the padding was not ignored: a target that is pad_id is no prediction to score; average only over the "
        "targets that are not padding": lambda: shifted.mean(),
        "the logits were not shifted: the logits at position t predict the token at t + 1, so score "
        "logits[:, :-1] against ids[:, 1:]": lambda: (
            (nll(logits, ids) * (ids != pad_id)).sum() / (ids != pad_id).sum()),
        "the shift goes the wrong way: the logits at position t predict the token at t + 1, so score "
        "logits[:, :-1] against ids[:, 1:], not logits[:, 1:] against ids[:, :-1]": lambda: (
            (nll(logits[:, 1:], ids[:, :-1]) * (ids[:, :-1] != pad_id)).sum() / (ids[:, :-1] != pad_id).sum()),
        "the padding was found in the inputs ids[:, :-1]; it is the targets ids[:, 1:] that are skipped when "
        "they are padding": lambda: (
            (shifted * (ids[:, :-1] != pad_id)).sum() / (ids[:, :-1] != pad_id).sum()),
        "each sequence's mean was averaged over the batch, which weighs the tokens of short sequences more; "
        "average over all the real targets of the batch at once": lambda: (
            ((shifted * real).sum(1) / real.sum(1)).mean()),
        "the loss was summed; return the mean over the real targets": lambda: (shifted * real).sum(),
    }


def check_next_token_loss(next_token_loss: Any, logits: Any, ids: Any, pad_id: int) -> None:
    """Check ``next_token_loss(logits, ids, pad_id)``: the mean cross-entropy over the targets that are not padding."""
    logits = _asarray(logits, dtype=np.float64)
    ids = _asarray(ids, dtype=np.int64)
    got = call("next_token_loss", next_token_loss, logits, ids, pad_id)
    want = np.asarray(_library_loss(logits, ids, pad_id))
    expect_array(
        got, want, f"next_token_loss(logits, ids, pad_id={pad_id})",
        nan_hint="exp overflowed for these large logits; take the log-softmax as z - max(z) - "
                 "log(sum(exp(z - max(z)))), never log(softmax(z))",
        mistakes=_loss_slips(logits, ids, pad_id),
    )


def check_uniform_loss(uniform_loss: Any, vocab_size: int) -> None:
    """Check ``uniform_loss(vocab_size)``: the cross-entropy of equal logits, PyTorch's ``F.cross_entropy``."""
    import torch
    import torch.nn.functional as F

    got = call("uniform_loss", uniform_loss, vocab_size)
    want = np.asarray(float(F.cross_entropy(torch.zeros(1, vocab_size, dtype=torch.float64), torch.tensor([0]))))
    V = vocab_size
    expect_array(
        got, want, f"uniform_loss({vocab_size})",
        mistakes={
            "this is in bits (log base 2); the loss is in nats, the natural logarithm (np.log)": lambda: math.log2(V),
            "this is log base 10; the loss is in nats, the natural logarithm (np.log)": lambda: math.log10(V),
            "this is the probability of the right token, 1 / V; the loss is its negative logarithm, "
            "-log(1 / V)": lambda: 1.0 / V,
            "the sign is wrong: the loss is -log(1 / V) = log V, which is positive": lambda: -math.log(V),
        },
    )
