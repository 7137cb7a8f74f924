"""Turning a trained model's next-token probabilities into output sequences.

* :func:`greedy_decode`: at each step take the most probable token (a whole batch at once).
* :func:`beam_search`: keep the ``beam_size`` best partial outputs, score finished ones
  with length normalisation (Wu et al., 2016: ``lp(Y) = ((5 + |Y|) / 6) ** alpha``, used
  by Vaswani et al. with ``alpha = 0.6``). ``beam_size=1`` is greedy decoding.
* :func:`generate`: sampling (or greedy) continuation for a decoder-only language model,
  with temperature, top-k and top-p from :mod:`transformer_lib.sampling`.

A key-value cache. Each step needs the next-token distribution after everything produced
so far. Without a cache the model runs the whole prefix again at every step, so step t
costs t tokens' work and a sequence of n tokens about n^2 / 2. A model with
``new_cache()`` (:class:`~transformer_lib.transformer.Transformer`,
:class:`~transformer_lib.lm.DecoderOnlyModel`) keeps the keys and values of the tokens it
has seen (:class:`~transformer_lib.stacks.DecoderCache`) and runs only the newest token
at each step, at the position after them: n tokens cost about n tokens' work. The three
functions use it by default; ``use_cache=False`` (or a model without ``new_cache``, such
as the recurrent one) recomputes the whole prefix. Both give the same tokens: the
log-probabilities differ only by float rounding.

Encoder-decoder decoding needs only two methods of the model: ``encode(src, src_mask)``
-> ``memory`` and ``decode(tgt, memory, src_mask, tgt_mask)`` -> log-probabilities
``(batch, tgt_len, vocab)``, as :class:`~transformer_lib.transformer.Transformer` and
the recurrent :class:`~transformer_lib.rnn.BahdanauSeq2Seq` have.

The decoding contract, the one every decoder of the library follows
(:func:`greedy_decode`, :func:`beam_search`, and so any model with ``encode``/``decode``):

* arguments: ``(model, src, max_len, *, bos_id, eos_id, pad_id, src_mask, use_cache)``;
  ``src`` is ``(batch, src_len)`` ids, ``src_mask`` defaults to ``padding_mask(src, pad_id)``;
* the output is a ``(batch, out_len)`` tensor of produced ids: ``<bos>`` is fed to the
  model but not returned, each row ends with its ``<eos>`` (included) and is padded with
  ``pad_id`` after it, so a row lines up with a batch's ``tgt_out``;
* ``max_len`` counts produced tokens, ``<eos>`` included: decoding stops when every row
  has produced ``<eos>`` or after ``max_len`` tokens, and a row cut at ``max_len`` has
  no ``<eos>``. So ``out_len <= max_len``.

Taught in chapter 11 (and 16 for :func:`generate`).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils.rnn import pad_sequence

from . import _checks
from .sampling import check_sampling_options, sample_next
from .stacks import DecoderCache, evaluating
from .torch_attention import causal_mask, padding_mask


def _new_cache(model: object, use_cache: bool) -> DecoderCache | None:
    """An empty cache from ``model.new_cache()``, or ``None``: without ``use_cache`` or such a method."""
    _checks.flag(use_cache, "use_cache")
    make = getattr(model, "new_cache", None)
    return make() if use_cache and callable(make) else None


def _prepare(model, src, src_mask, max_len, bos_id, eos_id, pad_id) -> torch.Tensor:
    """Check the arguments of the decoding contract; the source mask to use."""
    for method in ("encode", "decode"):
        if not callable(getattr(model, method, None)):
            raise TypeError(
                f"model must have encode(src, src_mask) and decode(tgt, memory, src_mask, tgt_mask) methods, "
                f"got {type(model).__name__} without {method}"
            )
    _checks.token_ids(src, "src")
    _checks.positive_int(max_len, "max_len")
    for name, value in (("bos_id", bos_id), ("eos_id", eos_id), ("pad_id", pad_id)):
        _checks.token_id(value, name)
    if src_mask is None:
        src_mask = padding_mask(src, pad_id)  # (batch, 1, 1, src_len)
    return src_mask


def greedy_decode(
    model,
    src: torch.Tensor,
    max_len: int,
    *,
    bos_id: int = 1,
    eos_id: int = 2,
    pad_id: int = 0,
    src_mask: torch.Tensor | None = None,
    use_cache: bool = True,
) -> torch.Tensor:
    """Decode a batch by taking the most probable next token at every step.

    Args:
        model: has ``encode`` and ``decode`` (see the module docstring).
        src: ``(batch, src_len)`` source ids.
        max_len: the most tokens to produce per sequence (``<eos>`` included).
        bos_id, eos_id, pad_id: the special ids.
        src_mask: boolean ``(batch, 1, 1, src_len)``; by default the padding mask of ``src``.
        use_cache: keep the decoder's keys and values between steps when the model has
            ``new_cache()`` (see the module docstring); ``False`` runs the whole prefix each step.

    Returns:
        ``(batch, out_len)`` ids, ``out_len <= max_len``, as the module docstring's
        contract says: each row's produced tokens up to and including its ``<eos>``, then
        ``pad_id``; no ``<bos>``. The model runs in evaluation mode without gradients and
        is left in the mode it was in.
    """
    src_mask = _prepare(model, src, src_mask, max_len, bos_id, eos_id, pad_id)
    cache = _new_cache(model, use_cache)
    with evaluating(model):
        # 1) encode the source once
        memory = model.encode(src, src_mask)  # (batch, src_len, d_model)
        ys = torch.full((src.shape[0], 1), bos_id, dtype=torch.long, device=src.device)  # (batch, 1)
        done = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
        for _ in range(max_len):
            # 2) log-probabilities of the next token given everything produced so far
            if cache is None:  # the whole prefix again, under the causal mask
                tgt_mask = causal_mask(ys.shape[1], device=src.device)  # (t, t)
                log_probs = model.decode(ys, memory, src_mask, tgt_mask)[:, -1]  # (batch, V)
            else:  # only the newest token: the cache holds the others' keys and values
                log_probs = model.decode(ys[:, -1:], memory, src_mask, cache=cache)[:, -1]  # (batch, V)
            # 3) take the best token; rows that already ended get padding
            next_token = log_probs.argmax(dim=-1).masked_fill(done, pad_id)  # (batch,)
            ys = torch.cat([ys, next_token[:, None]], dim=1)  # (batch, t + 1)
            done |= next_token == eos_id
            if bool(done.all()):
                break
    return ys[:, 1:]


def length_penalty(length: int, alpha: float) -> float:
    """Wu et al. (2016)'s length normalisation ``((5 + length) / 6) ** alpha``; 1 when ``alpha = 0``."""
    return ((5 + length) / 6) ** alpha


def beam_search(
    model,
    src: torch.Tensor,
    max_len: int,
    beam_size: int = 4,
    *,
    alpha: float = 0.6,
    bos_id: int = 1,
    eos_id: int = 2,
    pad_id: int = 0,
    src_mask: torch.Tensor | None = None,
    return_scores: bool = False,
    use_cache: bool = True,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Beam search with length normalisation, one source sequence at a time.

    Every step extends each of the ``beam_size`` live hypotheses by every token and keeps
    the best ``beam_size`` continuations by total log-probability. A continuation that
    ends in ``<eos>`` among the top ``beam_size`` is finished and leaves the beam. Search
    stops when no live hypothesis can still beat the best finished one (log-probabilities
    only fall, so a live one can at best keep its score, normalised at ``max_len``), or at
    ``max_len``. The answer is the finished hypothesis with the best ``log P(Y) / lp(|Y|)``
    (see :func:`length_penalty`, Wu et al. 2016's normalisation).
    With ``beam_size=1`` this is exactly :func:`greedy_decode` (unless two tokens tie
    exactly, where the two may break the tie differently).

    Args:
        model, src, max_len, bos_id, eos_id, pad_id, src_mask: as in :func:`greedy_decode`.
        beam_size: number of hypotheses kept (the beam width).
        alpha: strength of the length normalisation (0: none; the paper uses 0.6).
        return_scores: also return each answer's normalised score.
        use_cache: as in :func:`greedy_decode`; the cache follows the hypotheses as the
            beam reorders them (:meth:`~transformer_lib.stacks.DecoderCache.reorder`).

    Returns:
        ``(batch, out_len)`` ids as :func:`greedy_decode` (and ``(batch,)`` scores).
    """
    beam_size = _checks.positive_int(beam_size, "beam_size")
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or alpha < 0:
        raise ValueError(f"alpha must be a non-negative float, got {alpha!r}")
    src_mask = _prepare(model, src, src_mask, max_len, bos_id, eos_id, pad_id)
    _checks.flag(use_cache, "use_cache")
    if src_mask.shape[0] != src.shape[0]:
        src_mask = src_mask.expand(src.shape[0], *src_mask.shape[1:])
    answers, scores = [], []
    with evaluating(model):
        memory = model.encode(src, src_mask)  # (batch, src_len, d_model)
        for i in range(src.shape[0]):
            cache = _new_cache(model, use_cache)  # one per source sentence
            tokens, score = _beam_one(model, memory[i : i + 1], src_mask[i : i + 1], max_len, beam_size,
                                      alpha, bos_id, eos_id, cache)  # fmt: skip
            answers.append(tokens)
            scores.append(score)
    rows = [torch.tensor(a, dtype=torch.long, device=src.device) for a in answers]
    out = pad_sequence(rows, batch_first=True, padding_value=pad_id)  # (batch, longest answer)
    if return_scores:
        return out, torch.tensor(scores)
    return out


def _beam_one(
    model, memory, src_mask, max_len, beam_size, alpha, bos_id, eos_id, cache
) -> tuple[list[int], float]:
    """Beam search for one source: ``memory`` ``(1, src_len, d_model)``; ``cache`` may be ``None``."""
    device = memory.device
    beams = torch.full((1, 1), bos_id, dtype=torch.long, device=device)  # (live, t): each starts with <bos>
    beam_scores = torch.zeros(1, device=device)  # (live,) total log-probability
    finished: list[tuple[float, list[int]]] = []  # (normalised score, tokens)
    for _ in range(max_len):
        n, t = beams.shape
        # 1) next-token log-probabilities of every live hypothesis
        live_memory, live_mask = memory.expand(n, -1, -1), src_mask.expand(n, *src_mask.shape[1:])
        if cache is None:  # every hypothesis' whole prefix again
            tgt_mask = causal_mask(t, device=device)  # (t, t)
            log_probs = model.decode(beams, live_memory, live_mask, tgt_mask)[:, -1]  # (live, V)
        else:  # only each hypothesis' newest token; the cache's row i is hypothesis i
            log_probs = model.decode(beams[:, -1:], live_memory, live_mask, cache=cache)[:, -1]  # (live, V)
        vocab = log_probs.shape[-1]
        # 2) every extension's total score; the best 2 * beam_size are enough to refill the beam
        candidates = (beam_scores[:, None] + log_probs).flatten()  # (live * V,)
        top_scores, top_index = candidates.topk(min(2 * beam_size, candidates.numel()))
        # 3) split them into finished (ended with <eos>) and live ones
        live, live_scores, origins = [], [], []
        for rank, (score, index) in enumerate(zip(top_scores.tolist(), top_index.tolist())):
            beam, token = divmod(index, vocab)
            if token == eos_id:
                if rank < beam_size:  # only an <eos> among the top beam_size counts
                    tokens = beams[beam, 1:].tolist() + [eos_id]
                    finished.append((score / length_penalty(len(tokens), alpha), tokens))
            else:
                live.append(torch.cat([beams[beam], beams.new_tensor([token])]))
                live_scores.append(score)
                origins.append(beam)
            if len(live) == beam_size:
                break
        if not live:
            break
        # 4) stop once no live hypothesis can still win: log-probabilities only fall, so the
        # best a live one can reach is its score now, normalised at the longest length
        if finished and max(live_scores) / length_penalty(max_len, alpha) <= max(f[0] for f in finished):
            break
        beams = torch.stack(live)  # (live, t + 1)
        beam_scores = torch.tensor(live_scores, device=device)
        if cache is not None:  # each live hypothesis continues the keys and values of its origin
            cache.reorder(torch.tensor(origins, device=device))
    else:
        # 5) out of length: the live hypotheses compete as they are
        for tokens, score in zip(beams[:, 1:].tolist(), beam_scores.tolist()):
            finished.append((score / length_penalty(len(tokens), alpha), tokens))
    best_score, best_tokens = max(finished, key=lambda f: f[0])
    return best_tokens, best_score


def generate(
    model: nn.Module,
    prompt: torch.Tensor,
    max_new_tokens: int,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    greedy: bool = False,
    eos_id: int | None = None,
    generator: torch.Generator | None = None,
    use_cache: bool = True,
) -> torch.Tensor:
    """Continue ``prompt`` with a decoder-only language model, one token at a time.

    Each step draws the next token with :func:`~transformer_lib.sampling.sample_next`.

    Args:
        model: maps ``(batch, t)`` ids to log-probabilities ``(batch, t, vocab)`` with a
            causal mask (e.g. :class:`~transformer_lib.lm.DecoderOnlyModel`; logits work
            too, since a row's softmax is the same for both).
        prompt: ``(batch, t)`` ids to start from.
        max_new_tokens: how many tokens to add.
        temperature: divides the log-probabilities before the softmax (lower: safer);
            ``0`` is greedy, the limit of ``T -> 0``.
            ``log_softmax(z) / T`` and ``z / T`` differ by one constant per row, so this
            samples from ``softmax(z / T)`` as a division of the logits ``z`` would.
        top_k: sample only among the ``top_k`` most probable tokens.
        top_p: sample only among the most probable tokens whose mass reaches ``top_p``
            (nucleus sampling), after top-k.
        greedy: take the most probable token instead of sampling.
        eos_id: stop once every row has produced this id (rows that ended repeat it).
        generator: a ``torch.Generator`` for reproducible sampling.
        use_cache: keep the keys and values of the tokens seen when the model has
            ``new_cache()``: the prompt runs once, then each step runs one token (see the
            module docstring). ``False`` runs the whole sequence at every step. A sequence
            longer than the model's ``config.max_len`` is cropped to its last ``max_len``
            tokens either way; every token's position then changes, so from there on the
            cache starts again at every step.

    Returns:
        ``(batch, t + new)`` ids, the prompt included. Taught in chapter 16.
    """
    _checks.token_ids(prompt, "prompt")
    if eos_id is not None:
        _checks.token_id(eos_id, "eos_id")
    max_new_tokens = _checks.positive_int(max_new_tokens, "max_new_tokens")
    temperature, top_k, top_p, greedy = check_sampling_options(temperature, top_k, top_p, greedy)
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be None or a torch.Generator, got {type(generator).__name__}")
    max_positions = getattr(getattr(model, "config", None), "max_len", None)
    cache = _new_cache(model, use_cache)
    ids, new = prompt, prompt  # new: the tokens the cache has not seen yet
    done = torch.zeros(prompt.shape[0], dtype=torch.bool, device=prompt.device)
    with evaluating(model):
        for _ in range(max_new_tokens):
            # 1) the next token's log-probabilities, (batch, V)
            if cache is None:  # the whole sequence, cropped to the positions the model has
                context = ids if max_positions is None else ids[:, -max_positions:]
                log_probs = model(context)[:, -1]
            else:  # only the tokens the cache has not seen (the prompt, then one per step)
                if max_positions is not None and cache.length + new.shape[1] > max_positions:
                    cache, new = model.new_cache(), ids[:, -max_positions:]  # cropped: start again
                log_probs = model(new, cache=cache)[:, -1]
            # 2) temperature, top-k, top-p, then draw (or take the argmax)
            next_token = sample_next(log_probs, temperature, top_k, top_p, greedy, generator)  # (batch,)
            if eos_id is not None:
                next_token = next_token.masked_fill(done, eos_id)
                done |= next_token == eos_id
            ids = torch.cat([ids, next_token[:, None]], dim=1)  # (batch, t + 1)
            new = next_token[:, None]  # (batch, 1)
            if eos_id is not None and bool(done.all()):
                break
    return ids
