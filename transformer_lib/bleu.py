"""BLEU of translations against every reference: corpus and sentence level with sacreBLEU, and d2l's variant.

* :func:`corpus_bleu` (with :func:`bleu_signature`) and :func:`sentence_bleu`: BLEU
  (Papineni et al., 2002) with sacreBLEU (Post, 2018), its default ``13a`` tokenisation,
  against every reference translation of each source sentence (any number each).
* :func:`d2l_bleu` (with :func:`d2l_preprocess`): the hand-written variant of *Dive into
  Deep Learning*, kept only to compare with its published numbers.

Taught in chapter 12.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

import sacrebleu

from . import _checks


def _sentence(text: object, name: str) -> str:
    if not isinstance(text, str):
        raise TypeError(f"{name} must be a str, got {type(text).__name__} {text!r}")
    return text


def _check_references(hypotheses: Sequence[str], references: Sequence[Sequence[str]]) -> None:
    if isinstance(hypotheses, str) or not all(isinstance(h, str) for h in hypotheses):
        raise TypeError("hypotheses must be a list of str, one translation per source sentence")
    if len(references) != len(hypotheses):
        raise ValueError(f"references must hold one list per hypothesis ({len(hypotheses)}), "
                         f"got {len(references)}")  # fmt: skip
    for i, refs in enumerate(references):
        if isinstance(refs, str) or len(refs) == 0 or not all(isinstance(r, str) for r in refs):
            raise ValueError(f"references[{i}] must be a non-empty list of str, got {refs!r}")


def corpus_bleu(hypotheses: Sequence[str], references: Sequence[Sequence[str]]) -> sacrebleu.BLEUScore:
    """Corpus BLEU with sacreBLEU's defaults (``13a`` tokenisation, 4-grams, exponential smoothing
    of zero counts, sacreBLEU's default: ``smooth:exp``).

    Args:
        hypotheses: one translation per source sentence.
        references: for each source sentence, the list of ALL its reference translations
            (any number, at least one).

    sacreBLEU takes references as streams (stream k holds every sentence's k-th
    reference); a sentence with fewer references than the most has ``None`` in the
    remaining streams, which sacreBLEU drops, so each sentence is scored against exactly
    its own references: n-gram counts clipped by the largest count in any one reference,
    brevity penalty from the reference length closest to the hypothesis's. (An empty
    string would not do: sacreBLEU keeps ``""`` as a reference of length 0.)

    Returns:
        sacreBLEU's ``BLEUScore`` (``.score`` in 0-100, ``.precisions``, ``.bp``, ...).
    """
    return _corpus_bleu(hypotheses, references)[0]


def bleu_signature(hypotheses: Sequence[str], references: Sequence[Sequence[str]]) -> str:
    """sacreBLEU's signature of :func:`corpus_bleu` on these sentences (number of references,
    case, tokenisation, smoothing, version), the string to report beside the score."""
    return _corpus_bleu(hypotheses, references)[1]


def _corpus_bleu(hypotheses, references) -> tuple[sacrebleu.BLEUScore, str]:
    _check_references(hypotheses, references)
    width = max((len(r) for r in references), default=1)
    streams = [[refs[k] if k < len(refs) else None for refs in references] for k in range(width)]
    metric = sacrebleu.BLEU()
    score = metric.corpus_score(list(hypotheses), streams)
    return score, str(metric.get_signature())


def sentence_bleu(hypothesis: str, references: Sequence[str]) -> float:
    """Sentence-level BLEU in [0, 1] with sacreBLEU (``13a``, 4-grams, exponential
    smoothing of zero counts, effective order for short sentences) against all references."""
    _check_references([_sentence(hypothesis, "hypothesis")], [references])
    return sacrebleu.sentence_bleu(hypothesis, list(references)).score / 100


def d2l_preprocess(text: str) -> str:
    """*Dive into Deep Learning*'s preprocessing of a sentence, for :func:`d2l_bleu`: no-break
    spaces as spaces, lower case, and a space inserted before ``, . ! ?`` where none is
    (``"J'ai perdu."`` -> ``"j'ai perdu ."``; elisions and contractions stay whole)."""
    text = _sentence(text, "text").replace("\u202f", " ").replace("\xa0", " ").lower()
    return "".join(" " + c if i > 0 and c in ",.!?" and text[i - 1] != " " else c for i, c in enumerate(text))


def d2l_bleu(prediction: str, reference: str, k: int = 2) -> float:
    """*Dive into Deep Learning*'s hand-written BLEU, only to compare with its published numbers.

    ``exp(min(0, 1 - len_ref / len_pred)) * prod_{n=1..k} p_n ** (1 / 2**n)`` on tokens
    split at spaces, with ``p_n`` the clipped n-gram precision. It differs from
    sacreBLEU's :func:`sentence_bleu`: one reference only, n-grams up to ``k = 2`` (not 4),
    weights ``1/2, 1/4`` (not a geometric mean with equal weights), no smoothing (one
    missing bigram gives 0), and no tokenisation of its own (the text must already be
    split, ``"j'ai perdu ."``, as :func:`d2l_preprocess` does).
    """
    k = _checks.positive_int(k, "k")
    pred, ref = _sentence(prediction, "prediction").split(" "), _sentence(reference, "reference").split(" ")
    score = math.exp(min(0.0, 1 - len(ref) / len(pred)))
    for n in range(1, min(k, len(pred)) + 1):
        ref_grams = Counter(tuple(ref[i : i + n]) for i in range(len(ref) - n + 1))
        pred_grams = Counter(tuple(pred[i : i + n]) for i in range(len(pred) - n + 1))
        matches = sum(min(c, ref_grams[g]) for g, c in pred_grams.items())
        score *= (matches / (len(pred) - n + 1)) ** (0.5**n)
    return score
