"""Choosing the next token: greedy, temperature, top-k and top-p (nucleus) sampling.

Pure functions on one step's next-token scores, ``(batch, vocab)``, so any generation
loop (recomputing the whole prefix each step, or with a cache of keys and values) calls
them once per step on the last position: ``sample_next(model(ids)[:, -1], ...)``.

The library's models return log-probabilities, not logits. Every operation here is
unchanged by adding a constant to a row (``softmax(s + c) = softmax(s)``; dividing by the
temperature divides the constant too; top-k and top-p only compare and sort), and a
log-softmax is the logits minus one constant per row, so log-probabilities and logits
give the same distribution: pass either.

Read top to bottom:

* :func:`apply_temperature`: ``scores / T``; ``T < 1`` sharpens, ``T > 1`` flattens, and as
  ``T -> 0`` the distribution tends to one-hot on the most probable token (greedy
  decoding is the limit; ``T = 0`` is taken to mean exactly that).
* :func:`top_k_filter`: keep the ``k`` highest scores (and any tied with the k-th).
* :func:`top_p_filter`: keep the smallest set of most probable tokens whose probability
  mass reaches ``p`` (Holtzman et al., 2020), always at least one token.
* :func:`check_sampling_options`: the options checked once, so that a generation loop
  refuses a wrong one before its first step.
* :func:`sampling_distribution`: temperature, then top-k, then top-p, then softmax: the
  probabilities a sample is drawn from, ``(batch, vocab)``.
* :func:`sample_next`: one token id per row, ``(batch,)``, drawn with an optional
  ``torch.Generator`` (reproducible), or the argmax when greedy.

The course keeps its own version for teaching; it is checked against Hugging Face
``transformers``' ``TemperatureLogitsWarper``, ``TopKLogitsWarper`` and ``TopPLogitsWarper``
applied in that order (the order ``generate`` applies them), and computes the same
distribution, ties included (the same comparisons and the same sort). It differs in
what it accepts: log-probabilities or logits in, probabilities out; ``temperature=0``
means greedy (``transformers`` refuses it and asks for ``do_sample=False``);
``top_k=None`` rather than 0 switches top-k off; ``top_p=1`` skips the filter, as
``generate`` does (the warper would only drop tokens whose probability is already 0).
Taught in chapter 16.
"""

from __future__ import annotations

import math

import torch

from . import _checks


def _check_scores(scores: object, name: str = "log_probs") -> torch.Tensor:
    """``(batch, vocab)`` floating scores with no NaN or +inf and a finite entry in every row."""
    _checks.float_tensor(scores, name)
    _checks.ndim_exactly(scores, 2, name, "(batch, vocab)")
    if scores.shape[1] == 0:
        raise ValueError(f"{name} must have shape (batch, vocab) with vocab >= 1, got {tuple(scores.shape)}")
    if bool(torch.isnan(scores).any()) or bool((scores == math.inf).any()):
        raise ValueError(f"{name} must hold log-probabilities or logits (finite, or -inf for banned tokens), "
                         "got NaN or +inf")
    no_token = ~torch.isfinite(scores).any(dim=1)  # (batch,): a row whose every token is banned
    if bool(no_token.any()):
        rows = no_token.nonzero().flatten().tolist()
        raise ValueError(f"{name} must leave at least one token possible in every row, got rows {rows[:5]} "
                         "entirely -inf")
    return scores


def _check_temperature(temperature: object) -> float:
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)):
        raise TypeError(f"temperature must be a non-negative number, got {type(temperature).__name__} "
                        f"{temperature!r}")
    if not 0 <= temperature < math.inf:
        raise ValueError(f"temperature must be a non-negative number (0 means greedy), got {temperature}")
    return float(temperature)


def _check_top_k(top_k: object) -> int | None:
    if top_k is None:
        return None
    if isinstance(top_k, bool) or not isinstance(top_k, int):
        raise TypeError(f"top_k must be None or an integer >= 1, got {type(top_k).__name__} {top_k!r}")
    if top_k < 1:
        raise ValueError(f"top_k must be None or an integer >= 1, got {top_k}")
    return top_k


def _check_top_p(top_p: object) -> float | None:
    if top_p is None:
        return None
    if isinstance(top_p, bool) or not isinstance(top_p, (int, float)):
        raise TypeError(f"top_p must be None or a number in (0, 1], got {type(top_p).__name__} {top_p!r}")
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p must be None or a number in (0, 1], got {top_p}")
    return float(top_p)


def _working_precision(scores: torch.Tensor) -> torch.Tensor:
    """float16 and bfloat16 scores are worked on in float32 (as ``generate`` does); others as they are."""
    return scores.float() if scores.dtype in (torch.float16, torch.bfloat16) else scores


def apply_temperature(scores: torch.Tensor, temperature: float) -> torch.Tensor:
    """``scores / temperature``, ``(batch, vocab)``; needs ``temperature > 0``.

    Dividing log-probabilities by ``T`` raises each probability to the power ``1 / T``
    before renormalising: ``T < 1`` makes the likely tokens likelier, ``T > 1`` evens
    them out. ``-inf`` (a banned token) stays ``-inf``.
    """
    _check_scores(scores, "scores")
    if _check_temperature(temperature) == 0:
        raise ValueError("temperature must be positive to divide by it, got 0 (use greedy decoding)")
    return scores / temperature


def _top_k(scores: torch.Tensor, top_k: int) -> torch.Tensor:
    """:func:`top_k_filter` without the input checks."""
    if top_k >= scores.shape[-1]:
        return scores
    kth = scores.topk(top_k, dim=-1).values[:, -1:]  # (batch, 1): the k-th highest score of each row
    return scores.masked_fill(scores < kth, -math.inf)


def top_k_filter(scores: torch.Tensor, top_k: int) -> torch.Tensor:
    """Set every score below the ``top_k``-th highest of its row to ``-inf``, ``(batch, vocab)``.

    Tokens tied with the ``top_k``-th are kept, so a row may keep more than ``top_k``
    (as ``TopKLogitsWarper`` does); ``top_k >= vocab`` keeps every token.
    """
    _check_scores(scores, "scores")
    if _check_top_k(top_k) is None:
        raise TypeError("top_k must be an integer >= 1, got None")
    return _top_k(scores, top_k)


def _top_p(scores: torch.Tensor, top_p: float) -> torch.Tensor:
    """:func:`top_p_filter` without the input checks."""
    if top_p == 1.0:
        return scores
    # 1) sort each row from the least probable token up; mass counted from the bottom
    sorted_scores, order = torch.sort(scores, dim=-1)  # (batch, vocab) each
    mass_below = torch.softmax(sorted_scores, dim=-1).cumsum(dim=-1)  # (batch, vocab)
    # 2) drop a token while the mass up to it stays within 1 - p; never the most probable one
    drop_sorted = mass_below <= 1 - top_p
    drop_sorted[:, -1] = False
    # 3) back to the vocabulary's order
    drop = drop_sorted.scatter(1, order, drop_sorted)
    return scores.masked_fill(drop, -math.inf)


def top_p_filter(scores: torch.Tensor, top_p: float) -> torch.Tensor:
    """Keep the smallest set of most probable tokens whose mass reaches ``top_p``; the rest ``-inf``.

    Nucleus sampling (Holtzman et al., 2020). Sorted from the least probable token up, a
    token is dropped while the mass counted so far (its own included) stays at most
    ``1 - top_p``: the tokens left hold at least ``top_p``, and no smaller set of the most
    probable ones would. The most probable token is always kept. Among tokens of equal
    probability at the edge of the set, the order of ``torch.sort`` decides, exactly as in
    ``TopPLogitsWarper``.

    Args:
        scores: ``(batch, vocab)`` log-probabilities or logits (after temperature, top-k).
        top_p: the mass to reach, in ``(0, 1]``; 1 keeps every token.

    Returns:
        ``(batch, vocab)`` scores with the dropped tokens at ``-inf``.
    """
    _check_scores(scores, "scores")
    if _check_top_p(top_p) is None:
        raise TypeError("top_p must be a number in (0, 1], got None")
    return _top_p(scores, float(top_p))


def check_sampling_options(
    temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None, greedy: bool = False
) -> tuple[float, int | None, float | None, bool]:
    """``(temperature, top_k, top_p, greedy)`` checked as :func:`sampling_distribution` takes them.

    Raises ``TypeError`` or ``ValueError`` naming the option. A generation loop calls it
    before its first step, so a wrong option fails before the model runs.
    """
    if not isinstance(greedy, bool):
        raise TypeError(f"greedy must be True or False, got {type(greedy).__name__} {greedy!r}")
    return _check_temperature(temperature), _check_top_k(top_k), _check_top_p(top_p), greedy


def sampling_distribution(
    log_probs: torch.Tensor,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    greedy: bool = False,
) -> torch.Tensor:
    """The probabilities the next token is drawn from, ``(batch, vocab)``.

    Temperature first, then top-k, then top-p, then a softmax (the order of Hugging Face's
    ``generate``). ``temperature=0`` or ``greedy=True`` gives the limit of ``T -> 0``:
    probability 1 on each row's most probable token (the first, if several tie), whatever
    ``top_k`` and ``top_p`` say (both always keep that token).

    Args:
        log_probs: ``(batch, vocab)`` next-token log-probabilities (or logits: the same
            result), ``-inf`` for banned tokens; float16/bfloat16 are worked on in float32.
        temperature: ``>= 0``; 1 leaves the model's distribution as it is.
        top_k: ``None`` (no filter) or an integer ``>= 1``.
        top_p: ``None`` (no filter) or a number in ``(0, 1]``.
        greedy: the argmax, as ``temperature=0``.

    Returns:
        ``(batch, vocab)`` probabilities; each row sums to 1, zero outside the kept tokens.
    """
    scores = _working_precision(_check_scores(log_probs))
    temperature, top_k, top_p, greedy = check_sampling_options(temperature, top_k, top_p, greedy)
    if greedy or temperature == 0:
        best = scores.argmax(dim=-1, keepdim=True)  # (batch, 1)
        return torch.zeros_like(scores).scatter(1, best, 1.0)
    # 1) temperature, 2) top-k, 3) top-p, 4) renormalise what is left
    scores = scores / temperature
    if top_k is not None:
        scores = _top_k(scores, top_k)
    if top_p is not None:
        scores = _top_p(scores, top_p)
    return torch.softmax(scores, dim=-1)


def sample_next(
    log_probs: torch.Tensor,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    greedy: bool = False,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """One next-token id per row, ``(batch,)`` (``torch.long``), for one step of generation.

    Draws from :func:`sampling_distribution` with ``torch.multinomial``; with
    ``temperature=0`` or ``greedy=True`` takes the argmax and draws nothing (the
    generator is left untouched).

    Args:
        log_probs: ``(batch, vocab)``, e.g. ``model(ids)[:, -1]`` for a decoder-only model.
        temperature, top_k, top_p, greedy: as in :func:`sampling_distribution`.
        generator: a ``torch.Generator`` (on the device of ``log_probs``): the same seed
            gives the same tokens.
    """
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be None or a torch.Generator, got {type(generator).__name__}")
    probs = sampling_distribution(log_probs, temperature, top_k, top_p, greedy)  # (batch, vocab)
    if greedy or temperature == 0:
        return probs.argmax(dim=-1)
    return torch.multinomial(probs, 1, generator=generator)[:, 0]  # (batch,)
