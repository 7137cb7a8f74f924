"""Checkers of set 9: beam search with length normalisation, clipped n-gram counts, the brevity penalty, BLEU.

The expected values come from the library: ``tl.beam_search`` (on a next-token scorer seen as a
model with ``encode`` and ``decode``, one source sentence, without a cache) and ``tl.corpus_bleu``,
which is sacreBLEU's corpus BLEU against every reference (``13a`` tokenisation, 4-grams, ``exp``
smoothing). The sentences of the tests are tokenised already: tokens separated by single spaces, so
that ``13a`` leaves them as they are (checked), and a sentence's tokens are ``sentence.split()``.
"""

from __future__ import annotations

import copy
import math
from collections import Counter
from typing import Any

import numpy as np

from .compare import expect_array, expect_ids
from .inputs import ToyLanguageModel
from .recording import call
from .reference import library_decode, tl

# --------------------------------------------------------------------------------------------
# Next-token scorers
# --------------------------------------------------------------------------------------------


class TableScorer:
    """Next-token log-probabilities from a table ``{previous token: {next token: probability}}``.

    ``scorer(tokens)`` reads only the last token of the prefix and returns ``(vocab_size,)``
    log-probabilities (``-inf`` for probability 0). A token without a row of its own, the end
    token for one, is followed by the end token with probability 1.
    """

    def __init__(self, table: dict, vocab_size: int, eos_id: int):
        self.table = {int(a): {int(b): float(p) for b, p in row.items()} for a, row in table.items()}
        self.vocab_size, self.eos_id = vocab_size, eos_id
        self.fingerprint = ("TableScorer", vocab_size, eos_id,
                            tuple((a, tuple(sorted(row.items()))) for a, row in sorted(self.table.items())))

    def __call__(self, tokens: Any) -> np.ndarray:
        tokens = [int(t) for t in np.asarray(tokens).reshape(-1)]
        if not tokens:
            raise ValueError("the scorer needs at least the start token")
        row = np.full(self.vocab_size, -np.inf)
        for token, p in self.table.get(tokens[-1], {self.eos_id: 1.0}).items():
            row[token] = math.log(p)
        return row


class ToyScorer:
    """Next-token log-probabilities of a :class:`ToyLanguageModel` (the log-softmax of its logits).

    They depend on the last token, the length and the sum of the prefix; ``eos_bias`` is added to the
    end token's logit, so that hypotheses end at different lengths.
    """

    def __init__(self, vocab_size: int, seed: int, eos_id: int, eos_bias: float = 0.0):
        self.model = ToyLanguageModel(vocab_size, seed, eos_id)
        self.vocab_size, self.eos_id, self.eos_bias = vocab_size, eos_id, eos_bias
        self.fingerprint = ("ToyScorer", vocab_size, seed, eos_id, float(eos_bias))

    def __call__(self, tokens: Any) -> np.ndarray:
        logits = self.model(tokens)
        logits[self.eos_id] += self.eos_bias
        m = logits.max()
        return logits - m - math.log(np.exp(logits - m).sum())


def _library_beam(scorer: Any, max_len: int, beam_size: int, alpha: float, bos_id: int, eos_id: int) -> list:
    pad_id = next(i for i in range(scorer.vocab_size + 1) if i not in (bos_id, eos_id))
    return library_decode(tl.beam_search, scorer, max_len, beam_size, alpha=alpha, bos_id=bos_id, eos_id=eos_id,
                          pad_id=pad_id, use_cache=False)


def beam_variant(scorer: Any, max_len: int, beam_size: int, alpha: float, bos_id: int, eos_id: int, *,
                 power: float = 1.0, keep_expanding: bool = False, bound_now: bool = False) -> list:
    """Beam search in plain Python, as ``tl.beam_search`` does it, or with one of the classic slips.

    ``power``: finished scores divided by ``lp ** power`` (0: not normalised, 2: normalised twice);
    ``keep_expanding``: a hypothesis that produced the end token stays in the beam and is extended;
    ``bound_now``: the search stops once the best live score, normalised at its current length,
    is no better than the best finished one.
    """
    def lp(n: int) -> float:
        return ((5 + n) / 6) ** (alpha * power)

    beams, finished = [([bos_id], 0.0)], []
    for _ in range(max_len):
        candidates = []
        for tokens, score in beams:
            log_probs = scorer(tokens)
            candidates += [(score + float(log_probs[v]), tokens + [v]) for v in range(len(log_probs))]
        candidates.sort(key=lambda c: -c[0])
        live = []
        for rank, (score, tokens) in enumerate(candidates):
            if tokens[-1] == eos_id and not keep_expanding:
                if rank < beam_size:
                    finished.append((score / lp(len(tokens) - 1), tokens[1:]))
            else:
                live.append((tokens, score))
            if len(live) == beam_size:
                break
        if not live:
            break
        beams = live
        best = max(s for _, s in live)
        length = len(live[0][0]) - 1
        if finished and best / lp(length if bound_now else max_len) <= max(f[0] for f in finished):
            break
    else:
        finished += [(s / lp(len(t) - 1), t[1:]) for t, s in beams]
    return max(finished, key=lambda f: f[0])[1]


def check_beam_search(beam_search: Any, scorer: Any, max_len: int, beam_size: int, alpha: float, bos_id: int,
                      eos_id: int) -> None:
    """Check ``beam_search(scorer, max_len, beam_size, alpha, bos_id=..., eos_id=...)``: ``tl.beam_search``'s ids."""
    fresh = copy.deepcopy(scorer)  # before the answer can touch the scorer
    got = call("beam_search", beam_search, scorer, max_len, beam_size, alpha, bos_id=bos_id, eos_id=eos_id)
    want = _library_beam(fresh, max_len, beam_size, alpha, bos_id, eos_id)
    what = f"beam_search(scorer, max_len={max_len}, beam_size={beam_size}, alpha={alpha})"
    got = expect_ids(got, what)
    if got == want:
        return
    message = f"{what} returned {got}, expected {want} (what tl.beam_search returns)"
    if got[:1] == [bos_id] and got[1:] == want:
        raise AssertionError(message + f"\nHint: return the tokens produced after the start token bos_id={bos_id}, "
                                       "without it")
    if eos_id in got[:-1]:
        raise AssertionError(message + "\nHint: finished beams kept expanding: a hypothesis that produced the end "
                             f"token eos_id={eos_id} is finished; set it aside with its normalised score and keep "
                             "extending only the others")

    def variant(**slip: Any) -> list:
        return beam_variant(fresh, max_len, beam_size, alpha, bos_id, eos_id, **slip)

    slips = {
        "the beam scores were not normalised: rank the finished hypotheses by log P(Y) / lp(|Y|), with "
        "lp(n) = ((5 + n) / 6) ** alpha, not by log P(Y), which favours short outputs": dict(power=0.0),
        "the beam scores were normalised twice (divided by lp(|Y|) ** 2): divide each finished hypothesis' "
        "log-probability by lp(|Y|) once": dict(power=2.0),
        "finished beams kept expanding: a hypothesis that produced the end token leaves the beam, with its "
        "normalised score, and is not extended": dict(keep_expanding=True),
        "the search stopped too early: a live hypothesis can still win while its score normalised at max_len "
        "beats the best finished one (its log-probability can only fall, but lp grows with its length)":
            dict(bound_now=True),
    }
    for text, slip in slips.items():
        try:
            if variant(**slip) == got and variant(**slip) != want:
                raise AssertionError(message + f"\nHint: {text}")
        except AssertionError:
            raise
        except Exception:
            pass
    raise AssertionError(message + "\nHint: at each step extend every live hypothesis by every token, rank all "
                         "the extensions by total log-probability, and walk down the ranking (see the question)")


# --------------------------------------------------------------------------------------------
# BLEU
# --------------------------------------------------------------------------------------------


def _tokens(sentence: Any) -> list[str]:
    return [str(t) for t in sentence]


def _joined(hypotheses: list, references: list) -> tuple[list[str], list[list[str]]]:
    """Token lists as the strings sacreBLEU reads; refused when ``13a`` would cut them differently."""
    from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

    tokenize = Tokenizer13a()
    hyps = [" ".join(h) for h in hypotheses]
    refs = [[" ".join(r) for r in rs] for rs in references]
    for s in hyps + [r for rs in refs for r in rs]:
        if tokenize(s).split() != s.split():
            raise ValueError(f"a test sentence that 13a tokenises differently: {s!r}")
    return hyps, refs


def _ngrams(tokens: list[str], n: int) -> Counter:
    return Counter(tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1))


def check_clipped_counts(clipped_counts: Any, hypothesis: list, references: list, n: int) -> None:
    """Check ``clipped_counts(hypothesis, references, n)``: ``(matches, total)`` of sacreBLEU's n-gram statistics."""
    hypothesis = _tokens(hypothesis)
    references = [_tokens(r) for r in references]
    got = call("clipped_counts", clipped_counts, hypothesis, references, n)
    hyps, refs = _joined([hypothesis], [references])
    score = tl.corpus_bleu(hyps, refs)
    want = np.array([score.counts[n - 1], score.totals[n - 1]], dtype=np.int64)
    what = f"clipped_counts(hypothesis, references, n={n})"
    if not isinstance(got, tuple) or len(got) != 2:
        kind = f"a tuple of {len(got)}" if isinstance(got, tuple) else "a single value"
        raise AssertionError(f"{what} should return a tuple (matches, total) of two integers, but it returned {kind}")
    got = np.array([np.asarray(g).reshape(-1)[0] if np.asarray(g).size == 1 else np.nan for g in got], dtype=float)
    hyp = _ngrams(hypothesis, n)
    ref_grams = [_ngrams(r, n) for r in references]
    total = sum(hyp.values())

    def counts(clip: Any) -> np.ndarray:
        return np.array([sum(min(c, clip(g)) for g, c in hyp.items()), total], dtype=float)

    expect_array(
        got, want.astype(float), what + " as (matches, total)", plural=True,
        mistakes={
            "BLEU without clipping: each n-gram of the hypothesis was counted as often as it occurs in the "
            "hypothesis; clip its count by the most times it occurs in any one reference": lambda: counts(
                lambda g: math.inf if any(r[g] for r in ref_grams) else 0),
            "the counts were clipped by the sum over the references; clip by the largest count in any one "
            "reference": lambda: counts(lambda g: sum(r[g] for r in ref_grams)),
            "only the first reference was used; clip by the largest count in any of them": lambda: counts(
                lambda g: ref_grams[0][g]),
            "the total counts the distinct n-grams; it is the number of n-grams of the hypothesis, "
            "len(hypothesis) - n + 1": lambda: np.array([want[0], len(hyp)], dtype=float),
        },
    )


def _closest(hyp_len: int, ref_lens: list[int], shorter_on_ties: bool = True) -> int:
    return min(ref_lens, key=lambda r: (abs(r - hyp_len), r if shorter_on_ties else -r))


def _bp(c: float, r: float) -> float:
    return 1.0 if c >= r else (math.exp(1 - r / c) if c > 0 else 0.0)


def check_brevity_penalty(brevity_penalty: Any, hypotheses: list, references: list) -> None:
    """Check ``brevity_penalty(hypotheses, references)``: sacreBLEU's corpus brevity penalty."""
    hypotheses = [_tokens(h) for h in hypotheses]
    references = [[_tokens(r) for r in rs] for rs in references]
    got = call("brevity_penalty", brevity_penalty, hypotheses, references)
    hyps, refs = _joined(hypotheses, references)
    score = tl.corpus_bleu(hyps, refs)
    want = np.asarray(score.bp, dtype=float)
    c = sum(len(h) for h in hypotheses)
    lens = [len(h) for h in hypotheses]
    ref_lens = [[len(r) for r in rs] for rs in references]

    def with_r(pick: Any) -> float:
        return _bp(c, sum(pick(h, rl) for h, rl in zip(lens, ref_lens, strict=True)))

    expect_array(
        got, want, "brevity_penalty(hypotheses, references)",
        mistakes={
            "the brevity penalty used the shortest reference of each sentence; use the reference length "
            "closest to the hypothesis' length (the shorter one on a tie)": lambda: with_r(lambda h, rl: min(rl)),
            "the brevity penalty used the longest reference of each sentence; use the reference length "
            "closest to the hypothesis' length (the shorter one on a tie)": lambda: with_r(lambda h, rl: max(rl)),
            "the brevity penalty used the average reference length; use, for each sentence, the reference "
            "length closest to the hypothesis' length": lambda: with_r(lambda h, rl: sum(rl) / len(rl)),
            "the brevity penalty used the first reference of each sentence; use the reference length closest "
            "to the hypothesis' length": lambda: with_r(lambda h, rl: rl[0]),
            "on a tie between two reference lengths equally close to the hypothesis' length, take the shorter "
            "one (as sacreBLEU does)": lambda: with_r(lambda h, rl: _closest(h, rl, shorter_on_ties=False)),
            "the brevity penalty was computed per sentence and averaged; BLEU's is the corpus': "
            "exp(1 - r / c) with c and r summed over all sentences": lambda: np.mean(
                [_bp(h, _closest(h, rl)) for h, rl in zip(lens, ref_lens, strict=True)]),
            "the lengths are the wrong way round: exp(1 - r / c), with r the (closest) references' total length "
            "and c the hypotheses', and 1 when c >= r": lambda: (
                math.exp(1 - c / score.ref_len) if c < score.ref_len else 1.0),
        },
    )


def _bleu(hypotheses: list, references: list, clip: bool = True, bp: bool = True, smooth: bool = True,
          pick: Any = None) -> float:
    """Corpus BLEU (0-100) as sacreBLEU computes it, or with a classic slip (for the hints)."""
    matches, totals = [0] * 4, [0] * 4
    c = r = 0
    for h, rs in zip(hypotheses, references, strict=True):
        c += len(h)
        r += (pick or _closest)(len(h), [len(x) for x in rs])
        for n in range(1, 5):
            hyp = _ngrams(h, n)
            best = Counter()
            for ref in rs:
                best |= _ngrams(ref, n)
            totals[n - 1] += sum(hyp.values())
            matches[n - 1] += sum(min(k, best[g]) if clip else (k if best[g] else 0) for g, k in hyp.items())
    if not any(matches):
        return 0.0
    logs, halve = [], 1.0
    for m, t in zip(matches, totals, strict=True):
        if t == 0:  # no n-grams of this order at all: sacreBLEU's precision stays 0, and so the score
            return 0.0
        if m == 0:
            if not smooth:
                return 0.0
            halve *= 2
            logs.append(math.log(1 / (halve * t)))
        else:
            logs.append(math.log(m / t))
    return 100 * (_bp(c, r) if bp else 1.0) * math.exp(sum(logs) / 4)


def check_corpus_bleu(corpus_bleu: Any, hypotheses: list, references: list) -> None:
    """Check ``corpus_bleu(hypotheses, references)`` on sentences of tokens: sacreBLEU's score, 0 to 100."""
    hypotheses = [str(h) for h in hypotheses]
    references = [[str(r) for r in rs] for rs in references]
    got = call("corpus_bleu", corpus_bleu, hypotheses, references)
    hyps, refs = _joined([h.split() for h in hypotheses], [[r.split() for r in rs] for rs in references])
    want = np.asarray(tl.corpus_bleu(hyps, refs).score, dtype=float)
    H = [h.split() for h in hypotheses]
    R = [[r.split() for r in rs] for rs in references]
    expect_array(
        got, want, "corpus_bleu(hypotheses, references)", rtol=1e-6,
        mistakes={
            "a score between 0 and 1: sacreBLEU reports BLEU in percent, 0 to 100": lambda: want / 100,
            "BLEU without clipping: an n-gram of the hypothesis counts at most as many times as it occurs in "
            "one reference": lambda: _bleu(H, R, clip=False),
            "the brevity penalty used the shortest reference of each sentence; use the closest": lambda: _bleu(
                H, R, pick=lambda h, rl: min(rl)),
            "the brevity penalty used the longest reference of each sentence; use the closest": lambda: _bleu(
                H, R, pick=lambda h, rl: max(rl)),
            "the brevity penalty is missing": lambda: _bleu(H, R, bp=False),
            "an order without a single match gave 0; sacreBLEU's smoothing 'exp' replaces its precision by "
            "1 / (2 ** k * total), k counting the orders without a match so far": lambda: _bleu(H, R, smooth=False),
            "this is the average of the sentences' BLEU; corpus BLEU adds up the counts (matches, totals, "
            "lengths) over all sentences first": lambda: np.mean([_bleu([h], [rs]) for h, rs in zip(H, R,
                                                                                                  strict=True)]),
        },
    )
