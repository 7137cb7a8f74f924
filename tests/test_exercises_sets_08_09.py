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

# --------------------------------------------------------------------------------------------
# Set 09: beam search with length normalisation, clipped counts, the brevity penalty, corpus BLEU
# --------------------------------------------------------------------------------------------

_BEAM = """
def beam_search(scorer, max_len, beam_size, alpha, *, bos_id=1, eos_id=2):
    def lp(n):
        return {lp}

    beams, finished = [([bos_id], 0.0)], []
    for _ in range(max_len):
        candidates = sorted(((score + float(value), tokens + [v]) for tokens, score in beams
                             for v, value in enumerate(scorer(tokens))), key=lambda c: -c[0])
        beams = []
        for rank, (score, tokens) in enumerate(candidates):
            if tokens[-1] == eos_id and {finish}:
                if rank < beam_size:
                    finished.append((score / lp(len(tokens) - 1), tokens[1:]))
            else:
                beams.append((tokens, score))
            if len(beams) == beam_size:
                break
        if not beams:
            break
    finished += [(s / lp(len(t) - 1), t[1:]) for t, s in beams if len(t) == max_len + 1]
    return max(finished, key=lambda f: f[0])[1]
"""


def _beam(lp: str = "((5 + n) / 6) ** alpha", finish: str = "True") -> str:
    return _BEAM.format(lp=lp, finish=finish)


_CLIPPED = """
from collections import Counter

def clipped_counts(hypothesis, references, n):
    def grams(tokens):
        return Counter(tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1))
    hyp = grams(hypothesis)
    refs = [grams(r) for r in references]
    return sum(min(c, {clip}) for g, c in hyp.items()), sum(hyp.values())
"""

_BREVITY = """
import math

def brevity_penalty(hypotheses, references):
    c = sum(len(h) for h in hypotheses)
    r = sum({pick} for h, refs in zip(hypotheses, references))
    return 1.0 if c >= r else math.exp(1 - r / c)
"""

SLIPS_09 = {
    "beam scores not normalised": ("09_translation", "q1", "beam_search", _beam(lp="1.0"),
                                   ["beam_search", "not normalised", "lp(n) = ((5 + n) / 6) ** alpha"]),
    "beam scores normalised twice": ("09_translation", "q1", "beam_search", _beam(lp="((5 + n) / 6) ** (2 * alpha)"),
                                     ["beam_search", "normalised twice", "once"]),
    "finished beams kept expanding": ("09_translation", "q1", "beam_search", _beam(finish="False"),
                                      ["beam_search", "finished beams kept expanding"]),
    "BLEU counts without clipping": ("09_translation", "q2", "clipped_counts",
                                     _CLIPPED.format(clip="(c if any(r[g] for r in refs) else 0)"),
                                     ["clipped_counts", "without clipping", "any one reference"]),
    "BLEU without clipping": ("09_translation", "q4", "corpus_bleu", _CLIPPED.format(
        clip="(c if any(r[g] for r in refs) else 0)") + _BREVITY.format(
        pick="min((len(x) for x in refs), key=lambda x: (abs(x - len(h)), x))") + """
def corpus_bleu(hypotheses, references):
    hyps, refs = [h.split() for h in hypotheses], [[r.split() for r in rs] for rs in references]
    counts = [[clipped_counts(h, rs, n) for h, rs in zip(hyps, refs)] for n in range(1, 5)]
    logs = [math.log(sum(m for m, _ in c) / sum(t for _, t in c)) for c in counts]
    return 100 * brevity_penalty(hyps, refs) * math.exp(sum(logs) / 4)
""", ["corpus_bleu", "without clipping"]),
    "brevity penalty against the shortest reference": (
        "09_translation", "q3", "brevity_penalty", _BREVITY.format(pick="min(len(x) for x in refs)"),
        ["brevity_penalty", "shortest reference", "closest"]),
    "brevity penalty against the average reference length": (
        "09_translation", "q3", "brevity_penalty",
        _BREVITY.format(pick="sum(len(x) for x in refs) / len(refs)"), ["brevity_penalty", "average", "closest"]),
    "brevity penalty per sentence": ("09_translation", "q3", "brevity_penalty", """
import math

def brevity_penalty(hypotheses, references):
    penalties = []
    for h, refs in zip(hypotheses, references):
        r = min((len(x) for x in refs), key=lambda x: (abs(x - len(h)), x))
        penalties.append(1.0 if len(h) >= r else math.exp(1 - r / len(h)))
    return sum(penalties) / len(penalties)
""", ["brevity_penalty", "per sentence", "summed over all sentences"]),
}

ALTERNATIVES_09 = {
    "a heap of candidates, Counter intersections, numpy for the mean of the logarithms": """
import heapq
import math
from collections import Counter


def beam_search(scorer, max_len, beam_size, alpha, *, bos_id=1, eos_id=2):
    live = [(0.0, (bos_id,))]
    done = []
    for _ in range(max_len):
        heap = []
        for score, prefix in live:
            for token, value in enumerate(np.asarray(scorer(list(prefix)), dtype=float)):
                heap.append((score + value, prefix + (token,)))
        ranked = heapq.nlargest(2 * beam_size, heap, key=lambda item: item[0])
        live = []
        for position, (score, prefix) in enumerate(ranked):
            if prefix[-1] == eos_id:
                if position < beam_size:
                    n = len(prefix) - 1
                    done.append((score / ((5 + n) / 6) ** alpha, list(prefix[1:])))
            elif len(live) < beam_size:
                live.append((score, prefix))
        if not live:
            break
    else:
        done += [(score / ((5 + len(p) - 1) / 6) ** alpha, list(p[1:])) for score, p in live]
    return max(done, key=lambda d: d[0])[1]


def clipped_counts(hypothesis, references, n):
    def grams(tokens):
        return Counter(zip(*(tokens[i:] for i in range(n))))
    hyp = grams(hypothesis)
    best = Counter()
    for ref in references:
        best |= grams(ref)  # union: the largest count in any one reference
    return sum((hyp & best).values()), sum(hyp.values())  # intersection: the clipped counts


def brevity_penalty(hypotheses, references):
    c = sum(map(len, hypotheses))
    r = sum(sorted((abs(len(ref) - len(h)), len(ref)) for ref in refs)[0][1]
            for h, refs in zip(hypotheses, references))
    if c == 0:
        return 0.0
    return float(np.exp(min(0.0, 1 - r / c)))


def corpus_bleu(hypotheses, references):
    hyps = [h.split() for h in hypotheses]
    refs = [[r.split() for r in rs] for rs in references]
    stats = np.array([[clipped_counts(h, rs, n) for n in range(1, 5)] for h, rs in zip(hyps, refs)]).sum(axis=0)
    matches, totals = stats[:, 0].astype(float), stats[:, 1].astype(float)
    if not matches.any():
        return 0.0
    zero = matches == 0
    smoothed = np.where(zero, 1.0 / (2.0 ** np.cumsum(zero) * totals), matches / np.maximum(totals, 1))
    return float(100 * brevity_penalty(hyps, refs) * np.exp(np.log(smoothed).mean()))
""",
    "vectorised beam steps, dictionaries, a product of precisions": """
import math


def beam_search(scorer, max_len, beam_size, alpha, *, bos_id=1, eos_id=2):
    prefixes, scores = [[bos_id]], np.zeros(1)
    best, best_tokens = -np.inf, None
    for step in range(1, max_len + 1):
        table = scores[:, None] + np.stack([scorer(p) for p in prefixes])  # (live, vocab)
        order = np.argsort(-table, axis=None, kind="stable")
        rows, cols = np.unravel_index(order, table.shape)
        new_prefixes, new_scores = [], []
        for rank, (i, j) in enumerate(zip(rows, cols)):
            if j == eos_id:
                if rank < beam_size:
                    normalised = table[i, j] / ((5 + step) / 6) ** alpha
                    if normalised > best:
                        best, best_tokens = normalised, prefixes[i][1:] + [eos_id]
                continue
            new_prefixes.append(prefixes[i] + [int(j)])
            new_scores.append(table[i, j])
            if len(new_prefixes) == beam_size:
                break
        if not new_prefixes:
            break
        prefixes, scores = new_prefixes, np.array(new_scores)
        if step == max_len:
            for p, s in zip(prefixes, scores):
                normalised = s / ((5 + step) / 6) ** alpha
                if normalised > best:
                    best, best_tokens = normalised, p[1:]
    return [int(t) for t in best_tokens]


def clipped_counts(hypothesis, references, n):
    def grams(tokens):
        counts = {}
        for i in range(len(tokens) - n + 1):
            key = " ".join(tokens[i:i + n])
            counts[key] = counts.get(key, 0) + 1
        return counts
    hyp = grams(hypothesis)
    ref_counts = [grams(r) for r in references]
    matches = 0
    for gram, count in hyp.items():
        matches += min(count, max(rc.get(gram, 0) for rc in ref_counts))
    return matches, max(0, len(hypothesis) - n + 1)


def brevity_penalty(hypotheses, references):
    c = r = 0
    for h, refs in zip(hypotheses, references):
        c += len(h)
        closest = None
        for ref in refs:
            if closest is None or abs(len(ref) - len(h)) < abs(closest - len(h)) or (
                    abs(len(ref) - len(h)) == abs(closest - len(h)) and len(ref) < closest):
                closest = len(ref)
        r += closest
    if c >= r:
        return 1.0
    return 0.0 if c == 0 else math.exp(1 - r / c)


def corpus_bleu(hypotheses, references):
    hyps = [h.split() for h in hypotheses]
    refs = [[r.split() for r in rs] for rs in references]
    product, halvings, any_match = 1.0, 1, False
    for n in range(1, 5):
        m = t = 0
        for h, rs in zip(hyps, refs):
            a, b = clipped_counts(h, rs, n)
            m, t = m + a, t + b
        any_match = any_match or m > 0
        if m == 0:
            halvings *= 2
            product *= 1 / (halvings * t)
        else:
            product *= m / t
    return 100 * brevity_penalty(hyps, refs) * product ** 0.25 if any_match else 0.0
""",
}


ANSWERS = {
    "08_generation": {"q1": "temperature_probs", "q2": "top_k_filter", "q3": "top_p_filter",
                      "q4": "sample_tokens", "q5": "attention_step"},
    "09_translation": {"q1": "beam_search", "q2": "clipped_counts", "q3": "brevity_penalty", "q4": "corpus_bleu"},
}

SLIPS = {**SLIPS_08, **SLIPS_09}
ALTERNATIVES = {**{("08_generation", k): v for k, v in ALTERNATIVES_08.items()},
                **{("09_translation", k): v for k, v in ALTERNATIVES_09.items()}}


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


# naive answers that pass every public test of their question and fail a hidden one
NAIVE_08_09 = {
    "temperature without its greedy limit": ("08_generation", "q1", "temperature_probs", SOFTMAX + """
def temperature_probs(logits, T):
    return softmax(logits / T)
"""),
    "top-k that indexes the k-th score without capping k": ("08_generation", "q2", "top_k_filter", """
def top_k_filter(logits, k):
    kth = np.sort(logits, axis=-1)[:, -k][:, None]
    return np.where(logits >= kth, logits, -np.inf)
"""),
    "beam search that forgets the live hypotheses at max_len": (
        "09_translation", "q1", "beam_search", _beam().replace("if len(t) == max_len + 1", "if False")),
    "corpus BLEU without smoothing": ("09_translation", "q4", "corpus_bleu", _CLIPPED.format(
        clip="max(r[g] for r in refs)") + _BREVITY.format(
        pick="min((len(x) for x in refs), key=lambda x: (abs(x - len(h)), x))") + """
def corpus_bleu(hypotheses, references):
    hyps, refs = [h.split() for h in hypotheses], [[r.split() for r in rs] for rs in references]
    counts = [[clipped_counts(h, rs, n) for h, rs in zip(hyps, refs)] for n in range(1, 5)]
    precisions = [sum(m for m, _ in c) / sum(t for _, t in c) for c in counts]
    if min(precisions) == 0:
        return 0.0
    return 100 * brevity_penalty(hyps, refs) * math.exp(sum(map(math.log, precisions)) / 4)
"""),
}


@pytest.mark.parametrize("naive", sorted(NAIVE_08_09))
def test_hidden_tests_catch_what_the_public_ones_let_through(release, naive, monkeypatch):  # noqa: F811
    """Each naive answer passes every public test of its question and fails a hidden one."""
    public, hidden = _run_question(release, *NAIVE_08_09[naive], monkeypatch)
    assert public and all(r.passed for r in public), [r.message for r in public if not r.passed]
    assert any(not r.passed for r in hidden)
