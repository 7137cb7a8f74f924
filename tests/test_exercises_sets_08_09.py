"""Sets 08 (generation) and 09 (decoding and scoring translations): slips named, alternatives in full.

On the session's release (``test_exercises.release``): each classic slip of the two sets fails a
public test whose message names it, and so scores fewer than full marks; two solutions written
differently from each instructor notebook's score full marks on every public and hidden test.
"""

from __future__ import annotations

import pytest
from test_exercises import _run_question, release  # noqa: F401  (the session's release fixture)

# --------------------------------------------------------------------------------------------
# Set 08: temperature, top-k, top-p, sampling, one step of attention with a cache
# --------------------------------------------------------------------------------------------

SOFTMAX = """
def softmax(x, axis=-1):
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)
"""

_STEP = SOFTMAX + """
def attention_step(x, K_cache, V_cache, pe, params):
    t = len(K_cache)
    h = x + pe[{position}]
    q = h @ params["W_q"].T + params["b_q"]
    k = h @ params["W_k"].T + params["b_k"]
    v = h @ params["W_v"].T + params["b_v"]
    K, V = np.vstack([K_cache, k[None]]), np.vstack([V_cache, v[None]])
    Ka, Va = {attended}
    weights = softmax(Ka @ q / np.sqrt(len(q)))
    return (weights @ Va) @ params["W_o"].T + params["b_o"], K, V
"""

# slip: (set, question, answer, source, words the message of a failing public test must hold)
SLIPS_08 = {
    "temperature applied after the softmax": ("08_generation", "q1", "temperature_probs", SOFTMAX + """
def temperature_probs(logits, T):
    return softmax(softmax(logits) / T)
""", ["temperature_probs", "after the softmax", "softmax(logits / T)"]),
    "top-p that drops the crossing token": ("08_generation", "q3", "top_p_filter", SOFTMAX + """
def top_p_filter(logits, p):
    probs = softmax(logits)
    order = np.argsort(-probs, axis=-1)
    cum = np.cumsum(np.take_along_axis(probs, order, axis=-1), axis=-1)
    keep = np.zeros(probs.shape, dtype=bool)
    np.put_along_axis(keep, order, cum <= p, axis=-1)
    return np.where(keep, logits, -np.inf)
""", ["top_p_filter", "crosses p", "dropped"]),
    "top-k that keeps exactly k tokens when some tie": ("08_generation", "q2", "top_k_filter", """
def top_k_filter(logits, k):
    top = np.argsort(-logits, axis=-1)[:, :k]
    keep = np.zeros(logits.shape, dtype=bool)
    np.put_along_axis(keep, top, True, axis=-1)
    return np.where(keep, logits, -np.inf)
""", ["top_k_filter", "tied with the k-th", "exactly k"]),
    "the cache without the position offset": ("08_generation", "q5", "attention_step",
                                              _STEP.format(position="0", attended="K, V"),
                                              ["attention_step", "pe[0]", "position t = len(K_cache)"]),
    "the new key appended after attention is computed": (
        "08_generation", "q5", "attention_step", _STEP.format(position="t", attended="K_cache, V_cache"),
        ["attention_step", "attend", "before computing the attention"]),
}

# two solutions of the whole set, each written differently from the instructor notebook's
ALTERNATIVES_08 = {
    "log-space temperature, np.partition, searchsorted, an explicit inverse CDF, einsum": """
def temperature_probs(logits, T):
    logits = np.asarray(logits, dtype=float)
    if T == 0:
        return np.eye(logits.shape[-1])[np.argmax(logits, axis=-1)]
    m = logits.max(axis=-1, keepdims=True)
    log_p = logits - m - np.log(np.exp(logits - m).sum(axis=-1, keepdims=True))  # log-probabilities
    z = log_p / T
    z = z - z.max(axis=-1, keepdims=True)
    return np.exp(z) / np.exp(z).sum(axis=-1, keepdims=True)


def top_k_filter(logits, k):
    vocab = logits.shape[-1]
    if k >= vocab:
        return logits.copy()
    kth = np.partition(logits, vocab - k, axis=-1)[:, vocab - k : vocab - k + 1]
    out = logits.copy()
    out[out < kth] = -np.inf
    return out


def top_p_filter(logits, p):
    out = np.array(logits, dtype=float)
    for row, z in zip(out, np.asarray(logits, dtype=float)):
        probs = np.exp(z - z.max())
        probs /= probs.sum()
        desc = np.sort(probs)[::-1]
        count = int(np.searchsorted(np.cumsum(desc), p, side="left")) + 1  # the crossing token included
        threshold = desc[min(count, len(desc)) - 1]
        row[probs < threshold] = -np.inf
    return out


def sample_tokens(logits, n, seed, temperature=1.0, top_k=None, top_p=None):
    z = np.atleast_2d(np.asarray(logits, dtype=float))
    if temperature == 0:
        probs = temperature_probs(z, 0)[0]
    else:
        z = z / temperature
        z = z if top_k is None else top_k_filter(z, top_k)
        z = z if top_p is None else top_p_filter(z, top_p)
        probs = temperature_probs(z, 1)[0]
    cdf = np.cumsum(probs)
    cdf /= cdf[-1]
    u = np.random.default_rng(seed).random(n)
    return np.searchsorted(cdf, u, side="right").astype(int)


def attention_step(x, K_cache, V_cache, pe, params):
    position = K_cache.shape[0]
    h = x + pe[position]
    q, k, v = (np.einsum("od,d->o", params[f"W_{n}"], h) + params[f"b_{n}"] for n in "qkv")
    K = np.concatenate([K_cache, k.reshape(1, -1)], axis=0)
    V = np.concatenate([V_cache, v.reshape(1, -1)], axis=0)
    scores = np.einsum("td,d->t", K, q) / np.sqrt(q.size)
    w = np.exp(scores - scores.max())
    w /= w.sum()
    return np.einsum("t,td->d", w, V) @ params["W_o"].T + params["b_o"], K, V
""",
    "row by row: loops, argpartition, a sorted walk, comparisons with the CDF": """
import math


def temperature_probs(logits, T):
    rows = []
    for z in np.asarray(logits, dtype=float):
        if T == 0:
            row = np.zeros(len(z))
            row[int(np.argmax(z))] = 1.0
        else:
            w = np.array([math.exp((v - z.max()) / T) if np.isfinite(v) else 0.0 for v in z])
            row = w / w.sum()
        rows.append(row)
    return np.array(rows)


def top_k_filter(logits, k):
    out = np.full(logits.shape, -np.inf)
    for i, z in enumerate(logits):
        if k >= len(z):
            out[i] = z
            continue
        kth = z[np.argpartition(-z, k - 1)[k - 1]]
        out[i] = np.where(z >= kth, z, -np.inf)
    return out


def top_p_filter(logits, p):
    out = np.full(logits.shape, -np.inf)
    probs = temperature_probs(logits, 1.0)
    for i in range(len(logits)):
        mass = 0.0
        for j in sorted(range(len(probs[i])), key=lambda j: -probs[i][j]):
            out[i, j] = logits[i, j]
            mass += probs[i][j]
            if mass >= p:
                break
    return out


def sample_tokens(logits, n, seed, temperature=1.0, top_k=None, top_p=None):
    z = np.asarray(logits, dtype=float).reshape(1, -1)
    if temperature > 0:
        z = z / temperature
        if top_k is not None:
            z = top_k_filter(z, top_k)
        if top_p is not None:
            z = top_p_filter(z, top_p)
    probs = temperature_probs(z, temperature if temperature == 0 else 1.0)[0]
    rng = np.random.default_rng(seed)
    u = rng.random(n)
    cdf = np.cumsum(probs) / probs.sum()
    return np.array([int((cdf <= ui).sum()) for ui in u])


def attention_step(x, K_cache, V_cache, pe, params):
    h = x + pe[K_cache.shape[0]]
    proj = {n: params[f"W_{n}"] @ h + params[f"b_{n}"] for n in "qkvo" if n != "o"}
    K = np.append(K_cache, [proj["k"]], axis=0)
    V = np.append(V_cache, [proj["v"]], axis=0)
    scores = np.array([key @ proj["q"] for key in K]) / math.sqrt(len(h))
    weights = np.exp(scores - scores.max())
    weights = weights / weights.sum()
    mixed = sum(w * value for w, value in zip(weights, V))
    return params["W_o"] @ mixed + params["b_o"], K, V
""",
}

ANSWERS = {
    "08_generation": {"q1": "temperature_probs", "q2": "top_k_filter", "q3": "top_p_filter",
                      "q4": "sample_tokens", "q5": "attention_step"},
}

SLIPS = {**SLIPS_08}
ALTERNATIVES = {**{("08_generation", k): v for k, v in ALTERNATIVES_08.items()}}


@pytest.mark.parametrize("slip", sorted(SLIPS))
def test_the_public_self_check_names_the_slip_and_it_costs_points(release, slip, monkeypatch):  # noqa: F811
    """The answer with a classic slip fails a public test whose message names the slip: fewer than full marks."""
    set_name, question, answer, source, words = SLIPS[slip]
    public, hidden = _run_question(release, set_name, question, answer, source, monkeypatch)
    messages = [r.message for r in public if not r.passed]
    assert any(all(w in m for w in words) for m in messages), messages
    assert not all(r.passed for r in public + hidden)


@pytest.mark.parametrize("alternative", sorted(ALTERNATIVES), ids=lambda a: f"{a[0]}: {a[1]}")
def test_a_solution_written_differently_scores_full_marks(release, alternative, monkeypatch):  # noqa: F811
    """Every public and hidden test of every question passes on the alternative solution."""
    set_name, _ = alternative
    for question, answer in ANSWERS[set_name].items():
        public, hidden = _run_question(release, set_name, question, answer, ALTERNATIVES[alternative], monkeypatch)
        failed = [r.message for r in public + hidden if not r.passed]
        assert public and hidden and not failed, (question, failed)
