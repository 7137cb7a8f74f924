"""Checkers of set 8: temperature, top-k, top-p, seeded sampling, one attention step with a cache.

The expected values come from ``transformer_lib.sampling`` (``sampling_distribution``,
``top_k_filter``, ``top_p_filter``) and from full causal attention
(:func:`~exercise_checks.set03_multi_head.multi_head_reference`, one head, with ``tl.causal_mask``).
The answers work on 2-d scores ``(batch, vocab)``, as the library does: logits or log-probabilities,
``-inf`` for a banned token. A draw is the inverse of the cumulative distribution at uniform numbers
from ``np.random.default_rng(seed).random(n)``, which is what ``rng.choice(vocab, size=n, p=probs)``
computes.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy import asarray as _asarray

from .compare import expect_array, expect_tuple, fmt
from .recording import Replay, Unconvertible, call
from .reference import reference_softmax, tl
from .set03_multi_head import multi_head_reference


def _torch(x: np.ndarray) -> Any:
    import torch

    return torch.from_numpy(np.ascontiguousarray(x, dtype=np.float64))


def _probs(x: np.ndarray) -> np.ndarray:
    """A softmax along the last axis in which ``-inf`` gets 0 (numpy, for the mistakes)."""
    return reference_softmax(x, axis=-1)


def _distribution(logits: np.ndarray, temperature: float, top_k: int | None = None,
                  top_p: float | None = None) -> np.ndarray:
    """``tl.sampling_distribution``: temperature, top-k, top-p, softmax; ``(batch, vocab)``."""
    return tl.sampling_distribution(_torch(logits), temperature, top_k, top_p).numpy()


def check_temperature_probs(temperature_probs: Any, logits: Any, T: float) -> None:
    """Check ``temperature_probs(logits, T)``: ``tl.sampling_distribution(logits, temperature=T)``."""
    logits = _asarray(logits, dtype=np.float64)
    got = call("temperature_probs", temperature_probs, logits, T)
    want = _distribution(logits, T)
    p = _probs(logits)
    mistakes = {
        "the temperature was applied after the softmax: divide the logits by T first, then take the "
        "softmax, softmax(logits / T) (dividing the probabilities changes nothing once renormalised, "
        "and their softmax is not p ** (1 / T))": lambda: _probs(p / T),
        "the probabilities were divided by T after the softmax; divide the logits by T before it, "
        "softmax(logits / T)": lambda: p / T,
        "the logits were multiplied by T; divide them by T (a higher temperature flattens)": lambda: _probs(
            logits * T),
        "the temperature was ignored": lambda: p,
    }
    expect_array(
        got, want, f"temperature_probs(logits, T={T})", plural=True, mistakes=mistakes,
        nan_hint=(
            "T = 0 is the limit of small temperatures, greedy decoding: put probability 1 on each row's "
            "largest logit (the first one if several tie) instead of dividing by 0" if T == 0 else
            "a banned token (-inf) must get probability exactly 0; subtract each row's maximum, which is "
            "finite, before np.exp"
        ),
    )


def check_top_k_filter(top_k_filter: Any, logits: Any, k: int) -> None:
    """Check ``top_k_filter(logits, k)``: ``tl.sampling.top_k_filter``, ties with the k-th kept."""
    logits = _asarray(logits, dtype=np.float64)
    got = call("top_k_filter", top_k_filter, logits, k)
    want = tl.sampling.top_k_filter(_torch(logits), k).numpy()

    def exactly_k() -> np.ndarray:
        order = np.argsort(-logits, axis=-1, kind="stable")[:, :k]
        keep = np.zeros(logits.shape, dtype=bool)
        np.put_along_axis(keep, order, True, axis=-1)
        return np.where(keep, logits, -np.inf)

    kth = np.sort(logits, axis=-1)[:, ::-1][:, min(k, logits.shape[-1]) - 1 : min(k, logits.shape[-1])]
    expect_array(
        got, want, f"top_k_filter(logits, k={k})",
        mistakes={
            "exactly k tokens were kept, so a token tied with the k-th highest logit was dropped; keep every "
            "token whose logit is at least the k-th highest (logits >= kth), as the library's top_k_filter and "
            "Hugging Face's TopKLogitsWarper do": exactly_k,
            "the tokens below the k-th were set to 0, not -inf: a logit of 0 still has probability; use -np.inf":
                lambda: np.where(logits >= kth, logits, 0.0),
            "the k lowest logits were kept instead of the k highest": lambda: np.where(
                logits <= np.sort(logits, axis=-1)[:, k - 1 : k], logits, -np.inf),
        },
    )


def _top_p_variant(logits: np.ndarray, p: float, keep_crossing: bool = True) -> np.ndarray:
    """Top-p from the most probable token down (numpy); without the crossing token when asked."""
    probs = _probs(logits)
    order = np.argsort(-probs, axis=-1, kind="stable")
    sorted_p = np.take_along_axis(probs, order, axis=-1)
    cum = np.cumsum(sorted_p, axis=-1)
    keep_sorted = (cum - sorted_p < p) if keep_crossing else (cum <= p)
    keep = np.zeros(logits.shape, dtype=bool)
    np.put_along_axis(keep, order, keep_sorted, axis=-1)
    return np.where(keep, logits, -np.inf)


def check_top_p_filter(top_p_filter: Any, logits: Any, p: float) -> None:
    """Check ``top_p_filter(logits, p)``: ``tl.sampling.top_p_filter``, the token that crosses ``p`` kept."""
    logits = _asarray(logits, dtype=np.float64)
    got = call("top_p_filter", top_p_filter, logits, p)
    want = tl.sampling.top_p_filter(_torch(logits), p).numpy()
    dropped = _top_p_variant(logits, p, keep_crossing=False)

    def at_least_one() -> np.ndarray:
        out = dropped.copy()
        best = np.argmax(logits, axis=-1)
        out[np.arange(len(out)), best] = logits[np.arange(len(out)), best]
        return out

    expect_array(
        got, want, f"top_p_filter(logits, p={p})",
        mistakes={
            "the token whose probability makes the mass cross p was dropped: keep the smallest set of most "
            "probable tokens whose mass reaches p, so the last token kept is the one that crosses p (keep a "
            "token while the mass of the tokens before it is below p)": lambda: dropped,
            "the token whose probability makes the mass cross p was dropped (only the most probable token was "
            "kept when it alone exceeds p): keep the token that crosses p, so that the kept mass reaches p":
                at_least_one,
            "the dropped tokens were set to 0, not -inf: a logit of 0 still has probability; use -np.inf":
                lambda: np.where(np.isfinite(want), logits, 0.0),
        },
    )


def inverse_cdf(probs: np.ndarray, u: np.ndarray) -> np.ndarray:
    """The tokens at uniform numbers ``u`` of the distribution ``probs`` ``(vocab,)``, as ``rng.choice`` does."""
    cdf = np.cumsum(probs)
    cdf /= cdf[-1]
    return np.searchsorted(cdf, u, side="right")


def check_sample_tokens(sample_tokens: Any, logits: Any, n: int, seed: int, temperature: float = 1.0,
                        top_k: int | None = None, top_p: float | None = None) -> None:
    """Check ``sample_tokens(logits, n, seed, temperature, top_k, top_p)``: ``n`` draws, ``(n,)`` ids.

    ``logits`` ``(vocab,)``; the draws are the inverse cumulative distribution of
    ``tl.sampling_distribution`` at ``np.random.default_rng(seed).random(n)``.
    """
    logits = _asarray(logits, dtype=np.float64)
    got = call("sample_tokens", sample_tokens, logits, n, seed, temperature=temperature, top_k=top_k,
               top_p=top_p)
    probs = _distribution(logits[None], temperature, top_k, top_p)[0]
    u = np.random.default_rng(seed).random(n)
    want = inverse_cdf(probs, u)
    what = f"sample_tokens(logits, n={n}, seed={seed}, temperature={temperature}, top_k={top_k}, top_p={top_p})"
    if isinstance(got, (Unconvertible, tuple)):
        raise AssertionError(f"{what} should return an array of {n} token ids, got {got!r}")
    got = np.asarray(got)
    if got.shape != (n,):
        raise AssertionError(f"{what} should return {n} token ids, shape ({n},), got shape {got.shape}")
    if got.dtype.kind not in "iu" and not (got.dtype.kind == "f" and bool((got == np.round(got)).all())):
        raise AssertionError(f"{what} should return integer token ids, got {fmt(got)}")
    got = got.astype(np.int64)
    if got.tolist() == want.tolist():
        return
    if ((got < 0) | (got >= len(probs))).any():
        raise AssertionError(f"{what} returned ids outside the vocabulary 0..{len(probs) - 1}: {got.tolist()}")
    banned = [int(t) for t in got if probs[t] == 0]
    reorder = {}
    if top_k is not None or top_p is not None:
        raw = logits[None]
        if top_k is not None:
            raw = tl.sampling.top_k_filter(_torch(raw), top_k).numpy()
        if top_p is not None:
            raw = tl.sampling.top_p_filter(_torch(raw), top_p).numpy()
        reorder["the filters came before the temperature; divide by the temperature first, then top-k, then "
                "top-p (the order of tl.sampling_distribution and of Hugging Face's generate)"] = (
            lambda: inverse_cdf(_probs(raw / temperature)[0], u))
    slips = {
        f"every draw is the same token: the generator was created again (with the same seed) for each draw; "
        f"create it once, rng = np.random.default_rng(seed), and draw all {n} numbers from it":
            lambda: np.full(n, want[0]),
        "these are the most probable tokens, not draws: sample from the distribution": lambda: np.full(
            n, int(np.argmax(probs))),
        **reorder,
        "the draws ignore the temperature and the filters: sample from the distribution after temperature, "
        "top-k and top-p": lambda: inverse_cdf(_probs(logits[None])[0], u),
        "the draws use the cumulative distribution the wrong way: a token is the first whose cumulative "
        "probability exceeds the uniform number (np.searchsorted(cdf, u, side='right'))": lambda: (
            np.searchsorted(np.cumsum(probs[::-1]), u, side="right")),
    }
    for text, slip in slips.items():
        try:
            if np.asarray(slip()).tolist() == got.tolist():
                raise AssertionError(f"{what} returned {got.tolist()}, expected {want.tolist()}\nHint: {text}")
        except AssertionError:
            raise
        except Exception:
            pass
    first = int(np.argmax(got != want))
    message = (f"{what} returned {got.tolist()}, expected {want.tolist()}: draw {first} is {got[first]}, "
               f"expected {want[first]}")
    if banned:
        message += (f"\nHint: token(s) {sorted(set(banned))} have probability 0 after the temperature and the "
                    "filters, so they can never be drawn")
    else:
        message += ("\nHint: draw with rng = np.random.default_rng(seed), u = rng.random(n), each token the first "
                    "whose cumulative probability exceeds u (or rng.choice(len(probs), size=n, p=probs), the same)")
    raise AssertionError(message)


# --------------------------------------------------------------------------------------------
# One step of attention with a cache of keys and values
# --------------------------------------------------------------------------------------------


def sinusoidal_table(max_len: int, d_model: int) -> np.ndarray:
    """The sinusoidal positional encodings ``(max_len, d_model)`` (numpy; the tests' ``pe``)."""
    pos = np.arange(max_len)[:, None]
    freq = np.exp(-math.log(10000.0) * np.arange(0, d_model, 2) / d_model)
    pe = np.zeros((max_len, d_model))
    pe[:, 0::2] = np.sin(pos * freq)
    pe[:, 1::2] = np.cos(pos * freq)
    return pe


def cache_of(X: np.ndarray, pe: np.ndarray, params: dict) -> tuple[np.ndarray, np.ndarray]:
    """The keys and values ``(t, d_model)`` of the embeddings ``X`` ``(t, d_model)`` at positions 0..t-1."""
    h = X + pe[: len(X)]
    return h @ params["W_k"].T + params["b_k"], h @ params["W_v"].T + params["b_v"]


def _full_causal(X: np.ndarray, pe: np.ndarray, params: dict, offset_free: bool = False,
                 self_excluded: bool = False) -> np.ndarray:
    """Causal single-head attention over ``X + pe`` ``(n, d)``: every position's output, ``(n, d)``.

    The mistakes: ``offset_free`` adds ``pe[0]`` to every token (a step that ignores its position);
    ``self_excluded`` lets a token attend only to the ones before it (the new key appended after).
    """
    n = len(X)
    h = X + (pe[:1] if offset_free else pe[:n])
    mask = tl.causal_mask(n).numpy()
    if self_excluded:
        mask = np.tril(np.ones((n, n), dtype=bool), k=-1)
    out, _ = multi_head_reference(h[None], h[None], h[None], params, 1, mask)
    return out[0]


def _step_mistakes(x, K_cache, V_cache, pe, params) -> dict:
    """What the slips of one step compute, ``(output, K, V)``."""
    t = len(K_cache)

    def step(position: int, self_included: bool = True) -> tuple:
        h = x + pe[position]
        q = h @ params["W_q"].T + params["b_q"]
        k = h @ params["W_k"].T + params["b_k"]
        v = h @ params["W_v"].T + params["b_v"]
        K, V = np.vstack([K_cache, k[None]]), np.vstack([V_cache, v[None]])
        Ka, Va = (K, V) if self_included else (K_cache, V_cache)
        w = _probs((Ka @ q / math.sqrt(len(q)))[None])[0]
        return (w @ Va) @ params["W_o"].T + params["b_o"], K, V

    return {
        "the new token's positional encoding is pe[0]: with a cache, the token is at position t = "
        "len(K_cache), the number of tokens before it, so add pe[t]": lambda: step(0),
        "the new token did not attend to itself: append its key and value to the cache before computing the "
        "attention, so that the query sees t + 1 keys": lambda: step(t, self_included=False),
    }


def check_attention_step(attention_step: Any, x: Any, K_cache: Any, V_cache: Any, pe: Any, params: dict) -> None:
    """Check ``attention_step(x, K_cache, V_cache, pe, params)``: ``(output, K, V)`` of the token at ``t``.

    The output is row ``t`` of full causal attention over the tokens so far; ``K``, ``V`` the cache
    with the new token's key and value appended.
    """
    x = _asarray(x, dtype=np.float64)
    K_cache, V_cache, pe = (_asarray(a, dtype=np.float64) for a in (K_cache, V_cache, pe))
    params = {k: _asarray(v, dtype=np.float64) for k, v in params.items()}
    out = call("attention_step", attention_step, x, K_cache, V_cache, pe, params)
    what = f"attention_step(x, K_cache, V_cache, pe, params) with t = {len(K_cache)} cached tokens"
    got = expect_tuple(out, 3, what, "(output, K, V)")
    t = len(K_cache)
    h = x + pe[t]
    k_new, v_new = h @ params["W_k"].T + params["b_k"], h @ params["W_v"].T + params["b_v"]
    K_want, V_want = np.vstack([K_cache, k_new[None]]), np.vstack([V_cache, v_new[None]])
    # the output is full causal attention's last row; with the cached keys and values as given
    q = h @ params["W_q"].T + params["b_q"]
    att, _ = tl.attention(q[None], K_want, V_want)  # (1, d): one query, t + 1 keys
    want = att[0] @ params["W_o"].T + params["b_o"]
    mistakes = _step_mistakes(x, K_cache, V_cache, pe, params)
    note = ""
    for text, slip in mistakes.items():
        try:
            s = slip()
        except Exception:
            continue
        if all(isinstance(g, np.ndarray) and g.shape == np.shape(w) and np.allclose(g, w, rtol=1e-6, atol=1e-9)
               for g, w in zip(got, s, strict=True)):
            note = text
            break
    for value, expected, name in ((got[1], K_want, "K"), (got[2], V_want, "V"), (got[0], want, "the output")):
        expect_array(
            value, expected, f"{name} returned by {what}",
            fallback_hint=note or (
                "append the new token's key and value to the cache: K has one row per token, t + 1 rows"
                if name != "the output" else ""),
        )


def check_attention_over_sequence(attention_step: Any, X: Any, pe: Any, params: dict) -> None:
    """Run ``attention_step`` over ``X`` ``(n, d)`` from an empty cache: ``(n, d)`` equals causal attention."""
    X, pe = _asarray(X, dtype=np.float64), _asarray(pe, dtype=np.float64)
    params = {k: _asarray(v, dtype=np.float64) for k, v in params.items()}

    def over_sequence(X: np.ndarray, pe: np.ndarray, params: dict) -> np.ndarray:
        d = X.shape[1]
        K, V, outputs = np.zeros((0, d)), np.zeros((0, d)), []
        for x in X:
            out, K, V = attention_step(x, K, V, pe, params)
            outputs.append(np.asarray(out, dtype=np.float64))
        return np.stack(outputs)

    # the student's step called once per token, from an empty cache; recorded as one answer
    fn = attention_step if isinstance(attention_step, Replay) or attention_step is None else over_sequence
    got = call("attention_step", fn, X, pe, params,
               error_hint="start from an empty cache, K_cache and V_cache of shape (0, d_model)")
    want = _full_causal(X, pe, params)
    expect_array(
        got, want, f"the outputs of attention_step over a sequence of {len(X)} tokens (one step each, from an "
        "empty cache)", plural=True,
        mistakes={
            "every token got the positional encoding pe[0]: with a cache, the token is at position t = "
            "len(K_cache), so add pe[t]": lambda: _full_causal(X, pe, params, offset_free=True),
            "each token attended only to the tokens before it (the first one to nothing): append its key and "
            "value to the cache before computing the attention": lambda: _full_causal(
                X, pe, params, self_excluded=True),
        },
        nan_hint=(
            "the first token had nothing to attend to: append its key and value to the (empty) cache before "
            "computing the attention, so that it attends to itself"
        ),
    )
