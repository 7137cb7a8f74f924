"""Sets 06 (tokenisation) and 07 (a language model): slips named, alternative solutions, the library's contracts.

On the session's release (built once by ``test_exercises.py``):

- each classic slip of these sets fails a public test of its question whose message names it, and
  an answer with the slip also fails at least one test of the question (``SLIPS``);
- two solutions written differently from the reference (``ALTERNATIVES``) pass every public and
  hidden test;
- a naive answer (``NAIVE``) passes the public tests of its question and fails a hidden one;
- graded as whole notebooks by ``exercises/grade.py``, in the sandbox where there is one, each
  notebook with a slip gets fewer than full marks and each alternative full marks;
- the given code and the reference solutions follow the library: ``pre_split`` is
  ``tl.BPETokenizer``'s pre-tokenisation, ``train_bpe`` learns ``tl.BPETokenizer``'s merges on a
  longer text, and the decoder block is ``tl.DecoderLayer`` in GPT-2's configuration.
"""

from __future__ import annotations

import csv
import time
from pathlib import Path

import nbformat
import pytest
from test_exercises import EXERCISES, _run_question, grade_tool, shared_build, shared_release

TOKENS = "06_tokenisation"

# --------------------------------------------------------------------------------------------
# Set 06: the slips, and two alternative solutions
# --------------------------------------------------------------------------------------------

_SOLUTION_MERGE = """
def merge(ids, pair, new_id):
    out, i = [], 0
    while i < len(ids):
        if i + 1 < len(ids) and ids[i] == pair[0] and ids[i + 1] == pair[1]:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out
"""

_PRE_SPLIT = '''
import regex
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"""
def pre_split(text):
    return regex.findall(GPT2_PATTERN, text)
'''

_TRAIN = """
def train_bpe(text, num_merges):
    word_counts = {}
    for word in WORDS:
        key = tuple(word.encode("utf-8"))
        word_counts[key] = word_counts.get(key, 0) + 1
    words = [list(w) for w in word_counts]
    freqs = list(word_counts.values())
    merges = {}
    for k in range(num_merges):
        total = {}
        for w, n in zip(words, freqs):
            for pair in zip(w, w[1:]):
                total[pair] = total.get(pair, 0) + n
        if not total:
            break
        best = BEST
        merges[best] = 256 + k
        words = [merge(w, best, 256 + k) for w in words]
    return merges
"""


def _train(words: str = "pre_split(text)", best: str = "min(total, key=lambda p: (-total[p], p))") -> str:
    return _PRE_SPLIT + _SOLUTION_MERGE + _TRAIN.replace("WORDS", words).replace("BEST", best)


_OVERLAPPING_MERGE = """
def merge(ids, pair, new_id):
    out = []
    for i in range(len(ids)):
        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == tuple(pair):
            out.append(new_id)  # a pair starts here
        elif i > 0 and (ids[i - 1], ids[i]) == tuple(pair):
            continue  # the second half of the pair just merged
        else:
            out.append(ids[i])
    return out
"""

_TOKEN_BY_TOKEN = """
def decode(ids, merges):
    vocab = {i: bytes([i]) for i in range(256)}
    for (a, b), new_id in sorted(merges.items(), key=lambda item: item[1]):
        vocab[new_id] = vocab[a] + vocab[b]
    return "".join(vocab[i].decode("utf-8", errors=ERRORS) for i in ids)
"""

# slip: (set, question, answers (the first is the one replaced in a notebook), source,
#        words a failing public test's message must hold)
SLIPS = {
    "merging overlapping pairs twice, as in 'aaa'": (
        TOKENS, "q2", "merge", _OVERLAPPING_MERGE, ["merge([97, 97, 97], (97, 97), 256)", "overlapping",
                                                    "[new_id, 97]"]),
    "a trainer counting pairs across word boundaries": (
        TOKENS, "q3", "train_bpe", _train(words="[text]"), ["across word boundaries", "pre_split"]),
    "decoding token by token (broken UTF-8)": (
        TOKENS, "q5", "decode", _TOKEN_BY_TOKEN.replace("ERRORS", '"replace"'),
        ["decoded on its own", "part of a character", "Join the bytes"]),
    "decoding token by token, strictly": (
        TOKENS, "q5", "decode", _TOKEN_BY_TOKEN.replace("ERRORS", '"strict"'),
        ["UnicodeDecodeError", "part of a character", "Join the bytes"]),
    "pair counts that skip past a counted pair": (TOKENS, "q1", "pair_counts", """
def pair_counts(ids):
    counts, i = {}, 0
    while i + 1 < len(ids):
        pair = (ids[i], ids[i + 1])
        counts[pair] = counts.get(pair, 0) + 1
        i += 2 if ids[i] == ids[i + 1] else 1
    return counts
""", ["(97, 97) twice", "every adjacent position"]),
    "a trainer breaking ties by the first pair seen": (
        TOKENS, "q3", "train_bpe", _train(best="max(total, key=total.get)"), ["first pair seen", "smallest"]),
    "a trainer splitting on white space": (
        TOKENS, "q3", "train_bpe", _train(words="text.split()"), ["str.split", "pre_split"]),
    "encoding the text as one sequence": (TOKENS, "q4", "encode", _SOLUTION_MERGE + """
def encode(text, merges):
    tokens = list(text.encode("utf-8"))
    for pair, new_id in sorted(merges.items(), key=lambda item: item[1]):
        tokens = merge(tokens, pair, new_id)
    return tokens
""", ["across word boundaries", "pre_split"]),
    "encoding the leftmost pair first": (TOKENS, "q4", "encode", _PRE_SPLIT + """
def encode(text, merges):
    ids = []
    for word in pre_split(text):
        tokens = list(word.encode("utf-8"))
        while True:
            at = [i for i in range(len(tokens) - 1) if (tokens[i], tokens[i + 1]) in merges]
            if not at:
                break
            i = at[0]
            tokens[i:i + 2] = [merges[(tokens[i], tokens[i + 1])]]
        ids += tokens
    return ids
""", ["leftmost pair first", "order learned"]),
    "decoding bytes as Latin-1": (TOKENS, "q5", "decode", """
def decode(ids, merges):
    vocab = {i: bytes([i]) for i in range(256)}
    for (a, b), new_id in sorted(merges.items(), key=lambda item: item[1]):
        vocab[new_id] = vocab[a] + vocab[b]
    return "".join(chr(b) for i in ids for b in vocab[i])
""", ["Latin-1", "utf-8"]),
}

# The slips the issue lists for each set: graded as whole notebooks, each gets fewer than full marks.
GRADED_SLIPS = [
    "merging overlapping pairs twice, as in 'aaa'",
    "a trainer counting pairs across word boundaries",
    "decoding token by token (broken UTF-8)",
]

# alternative: (set, {answer: source}); each source defines its answer (and what it needs)
ALTERNATIVES = {
    "tokenisation with Counter, a heap and GPT-2's encoding loop": (TOKENS, {
        "pair_counts": """
from collections import Counter


def pair_counts(ids):
    return Counter(zip(ids, ids[1:]))
""",
        "merge": """
def merge(ids, pair, new_id):
    out = list(ids)
    i = 0
    while i < len(out) - 1:
        if (out[i], out[i + 1]) == tuple(pair):
            out[i:i + 2] = [new_id]
        i += 1
    return out
""",
        "train_bpe": """
import heapq
from collections import Counter


def train_bpe(text, num_merges):
    # the pair counts once, then only the changes: a heap with stale entries skipped
    freq = Counter(tuple(w.encode("utf-8")) for w in pre_split(text))
    words, n = [list(w) for w in freq], list(freq.values())
    counts = Counter()
    for w, c in zip(words, n):
        for p, k in pair_counts(w).items():
            counts[p] += c * k
    heap = [(-c, p) for p, c in counts.items()]
    heapq.heapify(heap)
    merges = {}
    while len(merges) < num_merges and heap:
        c, p = heapq.heappop(heap)
        if counts.get(p, 0) != -c:
            continue  # stale
        new_id = 256 + len(merges)
        merges[p] = new_id
        for i, w in enumerate(words):
            new = merge(w, p, new_id)
            if len(new) == len(w):
                continue
            before, after = pair_counts(w), pair_counts(new)
            counts.subtract({q: k * n[i] for q, k in before.items()})
            counts.update({q: k * n[i] for q, k in after.items()})
            for q in set(before) | set(after):
                if counts[q] > 0:
                    heapq.heappush(heap, (-counts[q], q))
            words[i] = new
        counts = +counts  # drop the pairs that are gone
    return merges
""",
        "encode": """
def encode(text, merges):
    out = []
    for word in pre_split(text):
        t = list(word.encode("utf-8"))
        while len(t) > 1:
            pair = min(zip(t, t[1:]), key=lambda p: merges.get(p, float("inf")))
            if pair not in merges:
                break
            t = merge(t, pair, merges[pair])
        out += t
    return out
""",
        "decode": """
def decode(ids, merges):
    parts = {v: k for k, v in merges.items()}

    def spell(i):
        if i < 256:
            return bytes([i])
        a, b = parts[i]
        return spell(a) + spell(b)

    data = bytearray()
    for i in ids:
        data += spell(i)
    return data.decode("utf-8", "replace")
""",
    }),
    "tokenisation with numpy, recursion and max": (TOKENS, {
        "pair_counts": """
import numpy as np


def pair_counts(ids):
    a = np.asarray(ids, dtype=np.int64)
    if a.size < 2:
        return {}
    pairs, counts = np.unique(np.stack([a[:-1], a[1:]], axis=1), axis=0, return_counts=True)
    return {(int(x), int(y)): int(c) for (x, y), c in zip(pairs, counts)}
""",
        "merge": """
def merge(ids, pair, new_id):
    if len(ids) < 2:
        return list(ids)
    if ids[0] == pair[0] and ids[1] == pair[1]:
        return [new_id] + merge(ids[2:], pair, new_id)
    return [ids[0]] + merge(ids[1:], pair, new_id)
""",
        "train_bpe": """
from collections import Counter


def train_bpe(text, num_merges):
    words = Counter(pre_split(text))
    seqs = {w: list(w.encode("utf-8")) for w in words}
    merges = {}
    for k in range(num_merges):
        counts = Counter()
        for w, n in words.items():
            s = seqs[w]
            for i in range(len(s) - 1):
                counts[s[i], s[i + 1]] += n
        if not counts:
            break
        best = max(counts, key=lambda p: (counts[p], -p[0], -p[1]))
        merges[best] = 256 + k
        seqs = {w: merge(s, best, 256 + k) for w, s in seqs.items()}
    return merges
""",
        "encode": """
def encode(text, merges):
    by_id = {v: k for k, v in merges.items()}
    ids = []
    for word in pre_split(text):
        t = list(word.encode())
        for new_id in sorted(by_id):
            if len(t) < 2:
                break
            t = merge(t, by_id[new_id], new_id)
        ids += t
    return ids
""",
        "decode": """
def decode(ids, merges):
    vocab = [bytes([i]) for i in range(256)] + [b""] * len(merges)
    for (a, b), new_id in sorted(merges.items(), key=lambda kv: kv[1]):
        vocab[new_id] = vocab[a] + vocab[b]
    return b"".join(vocab[i] for i in ids).decode("utf-8", errors="replace")
""",
    }),
}


# --------------------------------------------------------------------------------------------
# Set 07: the slips, and two alternative solutions
# --------------------------------------------------------------------------------------------

LM = "07_language_model"

_CAUSAL = """
def causal_self_attention(x, params, num_heads):
    b, n, d_model = x.shape
    d_k = d_model // num_heads

    def heads(name):
        h = x @ params[f"W_{name}"].T + params[f"b_{name}"]
        return h.reshape(b, n, num_heads, d_k).transpose(0, 2, 1, 3)

    q, k, v = heads("q"), heads("k"), heads("v")
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(d_k)
    mask = MASK
    scores = np.where(mask, scores, -np.inf)
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights = e / e.sum(axis=-1, keepdims=True)
    out = (weights @ v).transpose(0, 2, 1, 3).reshape(b, n, d_model)
    return out @ params["W_o"].T + params["b_o"], weights
"""


def _causal(mask: str = "np.tril(np.ones((n, n), dtype=bool))") -> str:
    return _CAUSAL.replace("MASK", mask)


_GIVEN_LAYERS = """
import math


def layer_norm(x, gamma, beta, eps=1e-5):
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def feed_forward(x, W_1, b_1, W_2, b_2):
    u = x @ W_1.T + b_1
    return 0.5 * u * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (u + 0.044715 * u**3))) @ W_2.T + b_2
"""

_LOSS = """
def next_token_loss(logits, ids, pad_id):
    z, targets = LOGITS, TARGETS
    m = z.max(axis=-1, keepdims=True)
    log_probs = z - m - np.log(np.exp(z - m).sum(axis=-1, keepdims=True))
    nll = -np.take_along_axis(log_probs, targets[..., None], axis=-1)[..., 0]
    real = targets != pad_id
    return float(RESULT)
"""


def _loss(result: str, logits: str = "logits[:, :-1]", targets: str = "ids[:, 1:]") -> str:
    return _LOSS.replace("LOGITS", logits).replace("TARGETS", targets).replace("RESULT", result)


SLIPS.update({
    "a causal mask that hides each token from itself": (
        LM, "q1", "causal_self_attention", _causal("np.tril(np.ones((n, n), dtype=bool), k=-1)"),
        ["off by one", "does not see itself", "itself included"]),
    "a causal mask that shows each token the next one": (
        LM, "q1", "causal_self_attention", _causal("np.tril(np.ones((n, n), dtype=bool), k=1)"),
        ["off by one", "also sees the next token"]),
    "a causal mask upside down": (
        LM, "q1", "causal_self_attention", _causal("np.triu(np.ones((n, n), dtype=bool))"), ["upside down"]),
    "a causal mask applied after the softmax": (LM, "q1", "causal_self_attention", _causal().replace(
        "    scores = np.where(mask, scores, -np.inf)\n", "").replace(
        "weights = e / e.sum(axis=-1, keepdims=True)", "weights = e / e.sum(axis=-1, keepdims=True) * mask"),
        ["after the softmax", "sum to 1"]),
    "a loss averaged over the padding": (
        LM, "q3", "next_token_loss", _loss("np.where(real, nll, 0.0).mean()"),
        ["averaged over the padding", "denominator"]),
    "a loss that scores the padding": (
        LM, "q3", "next_token_loss", _loss("nll.mean()"), ["padding was not ignored"]),
    "a loss without the shift": (
        LM, "q3", "next_token_loss", _loss("nll[real].sum() / real.sum()", logits="logits", targets="ids"),
        ["not shifted", "logits[:, :-1]", "ids[:, 1:]"]),
    "a loss averaging each sequence first": (
        LM, "q3", "next_token_loss", _loss("np.mean([row[keep].mean() for row, keep in zip(nll, real)])"),
        ["each sequence's mean", "all the real targets"]),
    "a post-norm block": (LM, "q2", "decoder_block", _GIVEN_LAYERS + _causal() + """
def decoder_block(x, params, num_heads):
    h = layer_norm(x + causal_self_attention(x, params, num_heads)[0], params["gamma_1"], params["beta_1"])
    f = feed_forward(h, params["W_1"], params["b_1"], params["W_2"], params["b_2"])
    return layer_norm(h + f, params["gamma_2"], params["beta_2"])
""", ["post-norm", "pre-norm"]),
    "a block whose feed-forward network reads the input": (LM, "q2", "decoder_block", _GIVEN_LAYERS + _causal() + """
def decoder_block(x, params, num_heads):
    h = x + causal_self_attention(layer_norm(x, params["gamma_1"], params["beta_1"]), params, num_heads)[0]
    normed = layer_norm(x, params["gamma_2"], params["beta_2"])
    return h + feed_forward(normed, params["W_1"], params["b_1"], params["W_2"], params["b_2"])
""", ["LN_2(x)", "LN_2(h)"]),
    "the uniform loss in bits": (LM, "q4", "uniform_loss", """
def uniform_loss(vocab_size):
    return float(np.log2(vocab_size))
""", ["bits", "natural logarithm"]),
})

GRADED_SLIPS += [
    "a causal mask that hides each token from itself",
    "a causal mask that shows each token the next one",
    "a loss averaged over the padding",
]

ALTERNATIVES.update({
    "a language model with einsum and one flat loss": (LM, {
        "causal_self_attention": """
def causal_self_attention(x, params, num_heads):
    b, n, d = x.shape
    h, dk = num_heads, d // num_heads

    def project(name):  # W (d, d): output features i*dk .. (i+1)*dk - 1 belong to head i
        W = params[f"W_{name}"].reshape(h, dk, d)
        return np.einsum("bnd,hkd->bhnk", x, W) + params[f"b_{name}"].reshape(1, h, 1, dk)

    q, k, v = project("q"), project("k"), project("v")
    s = np.einsum("bhik,bhjk->bhij", q, k) / np.sqrt(dk)
    s = np.where(np.triu(np.ones((n, n), dtype=bool), k=1), -np.inf, s)  # the future is hidden
    w = np.exp(s - s.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    o = np.einsum("bhij,bhjk->bihk", w, v).reshape(b, n, d)
    return o @ params["W_o"].T + params["b_o"], w
""",
        "decoder_block": """
def decoder_block(x, params, num_heads):
    def norm(h, i):
        mu, var = h.mean(-1, keepdims=True), h.var(-1, keepdims=True)
        return (h - mu) / np.sqrt(var + 1e-5) * params[f"gamma_{i}"] + params[f"beta_{i}"]

    h = x + causal_self_attention(norm(x, 1), params, num_heads)[0]
    u = norm(h, 2) @ params["W_1"].T + params["b_1"]
    act = 0.5 * u * (1 + np.tanh(np.sqrt(2 / np.pi) * (u + 0.044715 * u**3)))
    return h + act @ params["W_2"].T + params["b_2"]
""",
        "next_token_loss": """
def next_token_loss(logits, ids, pad_id):
    V = logits.shape[-1]
    z, t = logits[:, :-1].reshape(-1, V), ids[:, 1:].reshape(-1)
    keep = t != pad_id
    z, t = z[keep], t[keep]
    return float(np.mean(np.logaddexp.reduce(z, axis=-1) - z[np.arange(len(t)), t]))
""",
        "uniform_loss": """
def uniform_loss(vocab_size):
    return math.log(vocab_size)
""",
    }),
    "a language model with a loop over heads and over tokens": (LM, {
        "causal_self_attention": """
def causal_self_attention(x, params, num_heads):
    b, n, d = x.shape
    dk = d // num_heads
    Q, K, V = (x @ params[f"W_{c}"].T + params[f"b_{c}"] for c in "qkv")
    allowed = np.tril(np.ones((n, n))) > 0
    outs, weights = [], []
    for i in range(num_heads):
        cols = slice(i * dk, (i + 1) * dk)
        s = np.matmul(Q[..., cols], np.transpose(K[..., cols], (0, 2, 1))) / dk**0.5
        s = np.where(allowed, s, -1e30)  # exp gives exactly 0 there
        s = s - s.max(axis=-1, keepdims=True)
        w = np.exp(s) / np.exp(s).sum(axis=-1, keepdims=True)
        weights.append(w)
        outs.append(w @ V[..., cols])
    return np.concatenate(outs, axis=-1) @ params["W_o"].T + params["b_o"], np.stack(weights, axis=1)
""",
        "decoder_block": """
def decoder_block(x, params, num_heads):
    for part in ("attention", "feed-forward"):
        if part == "attention":
            normed = layer_norm(x, params["gamma_1"], params["beta_1"])
            x = x + causal_self_attention(normed, params, num_heads)[0]
        else:
            normed = layer_norm(x, params["gamma_2"], params["beta_2"])
            x = x + feed_forward(normed, params["W_1"], params["b_1"], params["W_2"], params["b_2"])
    return x
""",
        "next_token_loss": """
def next_token_loss(logits, ids, pad_id):
    total, count = 0.0, 0
    for row_logits, row in zip(logits, ids):
        for t in range(len(row) - 1):
            target = row[t + 1]
            if target == pad_id:
                continue
            z = row_logits[t]
            m = z.max()
            total += m + np.log(np.exp(z - m).sum()) - z[target]
            count += 1
    return total / count
""",
        "uniform_loss": """
def uniform_loss(vocab_size):
    p = softmax(np.zeros(vocab_size))
    return float(-np.log(p[0]))
""",
    }),
})


# --------------------------------------------------------------------------------------------
# Question by question, in this process
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def release(tmp_path_factory, worker_id) -> Path:
    """The session's release, the one test_exercises.py reads (built once, shared)."""
    return shared_release(tmp_path_factory, worker_id)


def _question_tests(release: Path, set_name: str) -> dict[str, list[str]]:
    """Each question of a set and the answers its tests take."""
    import inspect

    from otter.test_files import ExceptionTestFile

    info = grade_tool.load_release(release)[set_name]
    out = {}
    for q, source in info.tests.items():
        cases = ExceptionTestFile.from_string(source, path=f"tests/{q}.py").test_cases
        out[q] = sorted({n for c in cases for n in inspect.signature(c.body.test_func).parameters})
    return out


def _namespace_of(release: Path, set_name: str, replaced: dict[str, str]) -> dict:
    """The reference solutions' namespace (the givens run too) with some answers replaced."""
    import numpy as np

    nb = nbformat.read(release / set_name / "autograder" / f"{set_name}.ipynb", as_version=4)
    namespace: dict = {"np": np, "__name__": "__main__"}
    for cell in nb.cells:
        if cell.cell_type != "code" or "grader" in cell.source or "otter" in cell.source:
            continue
        if any(cell.source.startswith(f"def {name}(") for name in replaced):
            continue
        if cell.source.startswith(("def ", "import", "from")):
            exec(cell.source, namespace)
    for source in replaced.values():
        exec(source, namespace)
    return namespace


@pytest.mark.parametrize("slip", sorted(SLIPS))
def test_a_public_self_check_names_the_slip(release, slip, monkeypatch):
    """The answer with the slip fails a public test of its question, whose message names the slip."""
    set_name, question, answer, source, words = SLIPS[slip]
    public, hidden = _run_question(release, set_name, question, answer, source, monkeypatch)
    messages = [r.message for r in public if not r.passed]
    assert any(all(w in m for w in words) for m in messages), messages


@pytest.mark.parametrize("alternative", sorted(ALTERNATIVES))
def test_an_alternative_solution_passes_every_test(release, alternative, monkeypatch):
    """Written differently from the reference, but right: every public and hidden test of every question passes."""
    import sys

    import numpy as np
    from otter.test_files import ExceptionTestFile

    set_name, sources = ALTERNATIVES[alternative]
    info = grade_tool.load_release(release)[set_name]
    monkeypatch.setitem(sys.modules, "exercise_checks", info.checks)
    namespace = _namespace_of(release, set_name, sources)
    assert set(sources) == info.answer_names
    for question, source in info.tests.items():
        tests = ExceptionTestFile.from_string(source, path=f"tests/{question}.py")
        with np.errstate(all="ignore"):
            tests.run(namespace)
        failed = [(r.test_case.name, r.message) for r in tests.test_case_results if not r.passed]
        assert not failed, (question, failed)


# naive answer: (set, question, {answer: source}); each passes the public tests of its question and fails a
# hidden one, run beside the reference solutions of the other answers
NAIVE = {
    "a trainer that never stops early": (TOKENS, "q3", {"train_bpe": _train()
                                                       .replace("        if not total:\n            break\n", "")}),
    "a decoder that decodes strictly": (TOKENS, "q5", {"decode": _TOKEN_BY_TOKEN.replace(
        'return "".join(vocab[i].decode("utf-8", errors=ERRORS) for i in ids)',
        'return b"".join(vocab[i] for i in ids).decode("utf-8")')}),
    "a loss that takes the log of the softmax": (LM, "q3", {"next_token_loss": _loss(
        "nll[real].sum() / real.sum()").replace(
        "log_probs = z - m - np.log(np.exp(z - m).sum(axis=-1, keepdims=True))",
        "log_probs = np.log(np.exp(z) / np.exp(z).sum(axis=-1, keepdims=True))")}),
    "a causal mask for the example's length": (LM, "q1", {"causal_self_attention": _causal(
        "np.tril(np.ones((4, 4), dtype=bool))[:n, :n] if n <= 4 else np.ones((n, n), dtype=bool)")}),
}


def _run_with(release: Path, set_name: str, question: str, sources: dict[str, str], monkeypatch) -> tuple:
    """A question's tests (public, hidden) on the reference solutions with some answers replaced."""
    import sys

    import numpy as np
    from otter.test_files import ExceptionTestFile

    info = grade_tool.load_release(release)[set_name]
    monkeypatch.setitem(sys.modules, "exercise_checks", info.checks)
    namespace = _namespace_of(release, set_name, sources)
    tests = ExceptionTestFile.from_string(info.tests[question], path=f"tests/{question}.py")
    with np.errstate(all="ignore"):
        tests.run(namespace)
    results = tests.test_case_results
    return [r for r in results if not r.test_case.hidden], [r for r in results if r.test_case.hidden]


@pytest.mark.parametrize("naive", sorted(NAIVE))
def test_hidden_tests_catch_what_the_public_ones_let_through(release, naive, monkeypatch):
    public, hidden = _run_with(release, *NAIVE[naive], monkeypatch)
    assert public and all(r.passed for r in public), [r.message for r in public if not r.passed]
    assert any(not r.passed for r in hidden)


# --------------------------------------------------------------------------------------------
# Whole notebooks, graded
# --------------------------------------------------------------------------------------------


def _notebook_with(release: Path, set_name: str, sources: dict[str, str]):
    """The released solution notebook of a set, with the cells of some answers replaced."""
    nb = nbformat.read(release / set_name / "autograder" / f"{set_name}.ipynb", as_version=4)
    for name, source in sources.items():
        cell = next(c for c in nb.cells if c.cell_type == "code" and c.source.startswith(f"def {name}("))
        cell.source = source.strip("\n")
    return nb


@pytest.fixture(scope="session")
def graded_variants(tmp_path_factory, worker_id, release) -> dict:
    """The notebooks with a slip and the alternative solutions, graded by exercises/grade.py in one batch."""

    def build(root: Path) -> dict:
        folder = root / "submissions"
        folder.mkdir(parents=True)
        expected = {}
        for k, slip in enumerate(GRADED_SLIPS):
            set_name, _, answer, source, _ = SLIPS[slip]
            nbformat.write(_notebook_with(release, set_name, {answer: source}), folder / f"slip_{k}.ipynb")
            expected[f"slip_{k}.ipynb"] = {"set": set_name, "full": False, "what": slip}
        for k, alternative in enumerate(sorted(ALTERNATIVES)):
            set_name, sources = ALTERNATIVES[alternative]
            nbformat.write(_notebook_with(release, set_name, sources), folder / f"alternative_{k}.ipynb")
            expected[f"alternative_{k}.ipynb"] = {"set": set_name, "full": True, "what": alternative}
        trusted = not grade_tool.sandbox_kind()
        start = time.monotonic()
        rows = grade_tool.grade_folder(folder, root / "grades.csv", release=release, jobs=2,
                                       limits=grade_tool.Limits(cpu_seconds=60, wall_seconds=240, memory_mb=2048),
                                       progress=False, trusted=trusted)
        seconds = time.monotonic() - start
        with open(root / "grades.csv", newline="") as f:
            on_disk = list(csv.DictReader(f))
        return {"rows": rows, "on_disk": on_disk, "expected": expected, "seconds": seconds}

    return shared_build(tmp_path_factory, worker_id, "exercise_variant_grades", build)


def test_graded_slips_lose_points_and_alternatives_get_full_marks(graded_variants):
    problems = []
    rows = {r["submission"]: r for r in graded_variants["rows"]}
    assert sorted(rows) == sorted(graded_variants["expected"])
    for name, want in graded_variants["expected"].items():
        row = rows[name]
        total, possible = float(row["total"] or 0), float(row["possible"] or 0)
        if row["exercise"] != want["set"] or row["status"] != "ok" or not possible:
            problems.append(f"{name} ({want['what']}): {row['exercise']} {row['status']} {row['detail']}")
        elif want["full"] and total != possible:
            problems.append(f"{name} ({want['what']}): {total}/{possible}, expected full marks ({row['detail']})")
        elif not want["full"] and not 0 < total < possible:
            problems.append(f"{name} ({want['what']}): {total}/{possible}, expected fewer than full marks")
    assert not problems, "\n".join(problems)
    print(f"graded {len(rows)} notebooks in {graded_variants['seconds']:.1f} s")


# --------------------------------------------------------------------------------------------
# The library's contracts
# --------------------------------------------------------------------------------------------


def _solutions(name: str) -> dict:
    """The names an instructor notebook defines (solutions and givens), without running its tests."""
    import sys

    namespace: dict = {"__name__": "__main__"}
    sys.path.insert(0, str(EXERCISES / name))
    try:
        for cell in nbformat.read(EXERCISES / name / "instructor.ipynb", as_version=4).cells:
            if cell.cell_type == "code" and "def test_" not in cell.source and "otter" not in cell.source:
                exec(compile(cell.source, f"{name}/instructor.ipynb", "exec"), namespace)
    finally:
        sys.path.remove(str(EXERCISES / name))
        for module in [n for n in sys.modules if n == "exercise_checks" or n.startswith("exercise_checks.")]:
            del sys.modules[module]
    return namespace


def _shakespeare() -> str:
    """Tiny Shakespeare, the corpus shipped in the library's package."""
    from importlib.resources import files

    return (files("transformer_lib") / "data" / "tinyshakespeare" / "input.txt").read_text(encoding="utf-8")


def test_pre_split_is_the_librarys_pre_tokenisation():
    import transformer_lib as tl
    from transformer_lib.tokenizer import GPT2_PATTERN

    solutions = _solutions(TOKENS)
    assert solutions["GPT2_PATTERN"] == GPT2_PATTERN
    text = _shakespeare()[:20_000]
    for s in [text, "I'll say, \"Thou art 2 naïve!\"", "ab ab  ab\n\nx", "日本語の 🤖🤖  x", ""]:
        assert solutions["pre_split"](s) == tl.BPETokenizer().pre_tokenize(s)


def test_the_trainer_encoder_and_decoder_are_the_librarys_on_shakespeare():
    """The reference solutions on 5,000 characters of Shakespeare, 60 merges: tl.BPETokenizer's merges and tokens."""
    import transformer_lib as tl

    solutions = _solutions(TOKENS)
    text = _shakespeare()[:5_000]
    tok = tl.BPETokenizer().train(text, 256 + 60)
    merges = solutions["train_bpe"](text, 60)
    assert list(merges.items()) == list(tok.merges.items())
    sample = text[-300:] + " naïve 日本 🤖"
    ids = solutions["encode"](sample, merges)
    assert ids == tok.encode(sample)
    assert solutions["decode"](ids, merges) == tok.decode(ids) == sample


def test_the_block_and_the_loss_are_the_librarys_gpt():
    """On a block of the library's "gpt-tiny" model, its weights taken as they are: the same block output and loss."""
    import numpy as np
    import torch
    import torch.nn.functional as F

    import transformer_lib as tl

    solutions = _solutions("07_language_model")
    config = tl.TransformerConfig.preset("gpt-tiny", tgt_vocab_size=11)
    assert config.norm_first and config.activation == "gelu_tanh"
    torch.manual_seed(0)
    model = tl.build_model(config).double().eval()
    block = model.decoder.layers[0]
    params = {f"{kind}_{n}": getattr(getattr(block.self_attn, f"W_{n}"), part).detach().numpy()
              for n in "qkvo" for kind, part in (("W", "weight"), ("b", "bias"))}
    for i in (1, 2):
        params[f"W_{i}"] = getattr(block.feed_forward, f"W_{i}").weight.detach().numpy()
        params[f"b_{i}"] = getattr(block.feed_forward, f"W_{i}").bias.detach().numpy()
    for i, norm in ((1, block.add_norm1.norm), (2, block.add_norm3.norm)):
        params[f"gamma_{i}"], params[f"beta_{i}"] = norm.weight.detach().numpy(), norm.bias.detach().numpy()
    x = torch.randn(2, 5, config.d_model, dtype=torch.float64)
    with torch.no_grad():
        want = block(x, tgt_mask=tl.causal_mask(5)).numpy()
    np.testing.assert_allclose(solutions["decoder_block"](x.numpy(), params, config.num_heads), want,
                               rtol=1e-9, atol=1e-10)
    # the loss: chapter 14's next_token_loss on the model's log-probabilities, padding ignored
    ids = torch.tensor([[1, 5, 6, 7, 2, 0, 0], [1, 8, 9, 4, 3, 10, 2]])
    with torch.no_grad():
        log_probs = model(ids)  # (batch, seq, vocab), causal
        want = F.nll_loss(log_probs[:, :-1].reshape(-1, 11), ids[:, 1:].reshape(-1), ignore_index=0).item()
    got = solutions["next_token_loss"](log_probs.numpy(), ids.numpy(), 0)  # log-probabilities are logits too
    assert abs(got - want) < 1e-12
    assert abs(solutions["uniform_loss"](11) - F.cross_entropy(torch.zeros(1, 11), torch.tensor([3])).item()) < 1e-6
