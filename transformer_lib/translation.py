"""English -> French translation of real sentences: translating, training with validation BLEU, the checkpoint.

The model side of chapter 12, on the Tatoeba pairs of :mod:`transformer_lib.tatoeba`
(tokens from :mod:`transformer_lib.words`, BLEU from :mod:`transformer_lib.bleu`). Read top
to bottom:

* :class:`NextToken` and :func:`translate`: English sentences to French with greedy decoding
  or beam search; :func:`evaluate_bleu`: their corpus BLEU on a held-out split.
* :func:`train_with_bleu`: :func:`~transformer_lib.training.train` in rounds, with the
  validation BLEU measured between rounds.
* :func:`save_translation_model` and :func:`load_translation_model`: a half-precision
  checkpoint with its two vocabularies.

Every public name of those three modules is importable from here too
(``from transformer_lib import translation as tr``; ``tr.tokenise``, ``tr.corpus_bleu``,
``tr.make_translation_data`` ...), so one import serves the chapter.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from . import _checks
from .bleu import bleu_signature, corpus_bleu, d2l_bleu, d2l_preprocess, sentence_bleu
from .checkpoints import load_checkpoint, save_checkpoint
from .data import Vocab, make_batch
from .decoding import beam_search, greedy_decode
from .optim import make_optimizer
from .resources import records_path
from .tatoeba import (
    DATA_FILE,
    DATA_MD5,
    UNK,
    UNK_ID,
    TranslationData,
    build_vocab,
    known_tokens,
    load_pairs,
    make_translation_data,
    split_by_source,
)
from .training import History, train
from .words import CLITICS, CONTRACTIONS, ELISIONS, LANGUAGES, LEADING, TRAILING, detokenise, normalise, tokenise

__all__ = [
    # the corpus (transformer_lib.tatoeba) and its tokens (transformer_lib.words)
    "CLITICS", "CONTRACTIONS", "DATA_FILE", "DATA_MD5", "ELISIONS", "LANGUAGES", "LEADING", "TRAILING", "UNK",
    "UNK_ID", "TranslationData", "build_vocab", "detokenise", "known_tokens", "load_pairs",
    "make_translation_data", "normalise", "split_by_source", "tokenise",
    # BLEU (transformer_lib.bleu)
    "bleu_signature", "corpus_bleu", "d2l_bleu", "d2l_preprocess", "sentence_bleu",
    # this module
    "RESULTS_DIR", "NextToken", "evaluate_bleu", "load_translation_model", "save_translation_model",
    "train_with_bleu", "translate",
]  # fmt: skip

#: the shipped model and its record, written by ``make translation`` (scripts/train_translation.py)
RESULTS_DIR = records_path("translation")  # package data (transformer_lib.resources)


# ---------------------------------------------------------------------------------------
# Translating
# ---------------------------------------------------------------------------------------


def _device_of(model: nn.Module) -> torch.device:
    param = next(model.parameters(), None)
    return torch.device("cpu") if param is None else param.device


class NextToken(nn.Module):
    """A translation model as decoding sees it: the next token's log-probabilities only, never ``<unk>``.

    :func:`~transformer_lib.decoding.greedy_decode` and :func:`~transformer_lib.decoding.beam_search`
    call ``decode`` on the whole prefix at every step and keep only the last position's
    log-probabilities. This wrapper runs the output layer (linear and log-softmax over the
    French vocabulary, the largest single cost of a small model's step) on that position
    alone, which gives the same answer, and sets ``<unk>``'s log-probability to ``-inf``:
    an ``<unk>`` can never match a reference word, so the best real word is always the
    better guess (the same as fairseq's ``--unkpen`` set to infinity).

    Args:
        model: a :class:`~transformer_lib.model.Transformer` (``encoder``, ``decoder``, ``generator``).
        banned: token ids never produced.
    """

    def __init__(self, model: nn.Module, banned: Sequence[int] = (UNK_ID,)):
        super().__init__()
        for part in ("encode", "decoder", "generator"):
            if getattr(model, part, None) is None:
                raise TypeError(f"model must be an encoder-decoder Transformer with a generator, "
                                f"got {type(model).__name__} without {part}")  # fmt: skip
        self.model = model
        self.banned = list(banned)

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor | None = None) -> torch.Tensor:
        """``(batch, src_len)`` ids to ``memory`` ``(batch, src_len, d_model)``."""
        return self.model.encode(src, src_mask)

    def decode(
        self,
        tgt: torch.Tensor,
        memory: torch.Tensor,
        src_mask: torch.Tensor | None = None,
        tgt_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Log-probabilities ``(batch, 1, tgt_vocab)`` of the token after the whole prefix ``tgt``."""
        x = self.model.decoder(tgt, memory, src_mask, tgt_mask)[:, -1:]  # (batch, 1, d_model)
        log_probs = self.model.generator(x)  # (batch, 1, tgt_vocab)
        log_probs[..., self.banned] = -math.inf
        return log_probs


def translate(
    model: nn.Module,
    sentences: Sequence[str],
    src_vocab: Vocab,
    tgt_vocab: Vocab,
    *,
    beam_size: int | None = None,
    alpha: float = 0.6,
    batch_size: int = 250,
    max_len: int | None = None,
) -> list[str]:
    """English sentences to French, in :func:`normalise`'s form (the model decoded through
    :class:`NextToken`, so it never writes ``<unk>``).

    Args:
        model: an encoder-decoder :class:`~transformer_lib.model.Transformer`.
        sentences: English sentences as written (they are tokenised here).
        src_vocab, tgt_vocab: the vocabularies the model was trained with.
        beam_size: ``None`` for greedy decoding (:func:`~transformer_lib.decoding.greedy_decode`,
            a batch at a time), else the width of :func:`~transformer_lib.decoding.beam_search`
            with length normalisation ``alpha``.
        batch_size: sentences encoded at once (sorted by length, so batches pad little).
        max_len: the most French tokens per sentence; by default twice the English
            length plus 10.

    Returns:
        one French sentence per English one, in the input order.
    """
    if isinstance(sentences, str):
        raise TypeError("sentences must be a list of str, got one str; wrap it in a list")
    batch_size = _checks.positive_int(batch_size, "batch_size")
    if beam_size is not None:
        beam_size = _checks.positive_int(beam_size, "beam_size")
    sources = [src_vocab.encode(known_tokens(tokenise(s, "en"), src_vocab)) for s in sentences]
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    device = _device_of(model)
    decoder = NextToken(model)
    out: list[str] = [""] * len(sources)
    for start in range(0, len(order), batch_size):
        chosen = order[start : start + batch_size]
        batch = make_batch([(sources[i], []) for i in chosen])
        src, src_mask = batch.src.to(device), batch.src_mask.to(device)
        limit = 2 * src.shape[1] + 10 if max_len is None else _checks.positive_int(max_len, "max_len")
        if beam_size is None:
            ids = greedy_decode(decoder, src, limit, src_mask=src_mask)
        else:
            ids = beam_search(decoder, src, limit, beam_size, alpha=alpha, src_mask=src_mask)
        for row, i in zip(ids.cpu(), chosen):
            out[i] = detokenise(tgt_vocab.decode(row), "fr")
    return out


def evaluate_bleu(
    model: nn.Module,
    data: TranslationData,
    split: str = "test",
    *,
    limit: int | None = None,
    beam_size: int | None = None,
    alpha: float = 0.6,
) -> float:
    """Corpus BLEU (0-100) of the model's translations of a held-out split's distinct English
    sentences against all their references.

    ``limit`` keeps ``limit`` sentences evenly spaced through the split (the corpus is
    sorted by length, so the first ones would all be short), a fixed subset."""
    sources, references = data.references(split)
    if limit is not None and _checks.positive_int(limit, "limit") < len(sources):
        keep = np.linspace(0, len(sources) - 1, limit).round().astype(int)
        sources, references = [sources[i] for i in keep], [references[i] for i in keep]
    hypotheses = translate(model, sources, data.src_vocab, data.tgt_vocab, beam_size=beam_size, alpha=alpha)
    return corpus_bleu(hypotheses, references).score


# ---------------------------------------------------------------------------------------
# Training with validation BLEU, and the shipped checkpoint
# ---------------------------------------------------------------------------------------


def train_with_bleu(
    model: nn.Module,
    data: TranslationData,
    *,
    steps: int,
    eval_every: int,
    valid_sentences: int = 500,
    batch_size: int = 128,
    warmup_steps: int = 400,
    lr_factor: float = 1.0,
    smoothing: float = 0.1,
    seed: int = 0,
    progress: bool = True,
    time_limit: float | None = None,
) -> tuple[History, list[dict]]:
    """Train with :func:`~transformer_lib.training.train` in rounds of ``eval_every`` steps, and
    measure the greedy validation BLEU on ``valid_sentences`` validation sentences (a fixed
    subset spread over all lengths, see :func:`evaluate_bleu`) after each round.

    One optimizer and schedule (:func:`~transformer_lib.optim.make_optimizer`) and one
    :class:`~transformer_lib.training.History` run through all the rounds, so this is one
    training run; batches are bucketed by length (``bucket=True``) and shuffled anew each
    round. ``time_limit`` (seconds of training steps) stops early. ``progress`` shows one
    tqdm bar for the whole run, with the last loss and validation BLEU.

    Returns:
        ``(history, curve)``; ``curve`` has one dict per round: ``step``, ``minutes`` and
        ``cpu_minutes`` (wall and processor time of the training steps so far),
        ``train_loss`` (mean over the round), ``valid_bleu``.
    """
    steps = _checks.positive_int(steps, "steps")
    eval_every = _checks.positive_int(eval_every, "eval_every")
    valid_sentences = _checks.positive_int(valid_sentences, "valid_sentences")
    d_model = model.config.d_model
    optimizer, scheduler = make_optimizer(model, d_model, warmup_steps, lr_factor)
    history = History()
    train_set = data.dataset("train")
    curve: list[dict] = []
    bar = tqdm(total=steps, disable=not progress, desc="training", unit="step")
    try:
        while history.steps < steps and (time_limit is None or history.train_seconds < time_limit):
            start = history.steps
            train(model, train_set, steps=min(eval_every, steps - start), batch_size=batch_size,
                  smoothing=smoothing, seed=seed + start, bucket=True, progress=False, optimizer=optimizer,
                  scheduler=scheduler, history=history, time_limit=time_limit)  # fmt: skip
            curve.append({
                "step": history.steps,
                "minutes": round(history.train_seconds / 60, 3),
                "cpu_minutes": round(history.train_cpu_seconds / 60, 3),
                "train_loss": round(float(np.mean(history.losses[start:])), 4),
                "valid_bleu": round(evaluate_bleu(model, data, "valid", limit=valid_sentences), 2),
            })  # fmt: skip
            bar.update(history.steps - start)
            last = curve[-1]
            bar.set_postfix(loss=f"{last['train_loss']:.2f}", valid_bleu=f"{last['valid_bleu']:.1f}")
    finally:
        bar.close()
    return history, curve


def save_translation_model(
    path: str | Path,
    model: nn.Module,
    src_vocab: Vocab,
    tgt_vocab: Vocab,
    history: History | None = None,
    dtype: torch.dtype = torch.float16,
) -> None:
    """Save a :func:`~transformer_lib.checkpoints.save_checkpoint` file of the model's weights in
    ``dtype`` (float16: half the size of float32) plus its two vocabularies (``src_tokens``,
    ``tgt_tokens``)."""
    save_checkpoint(path, model, history=history, dtype=dtype)
    state = torch.load(path, map_location="cpu", weights_only=True)
    state["src_tokens"], state["tgt_tokens"] = src_vocab.tokens, tgt_vocab.tokens
    torch.save(state, path)


def load_translation_model(path: str | Path) -> tuple[nn.Module, Vocab, Vocab, History | None]:
    """``(model, src_vocab, tgt_vocab, history)`` from :func:`save_translation_model`'s file;
    the model is float32 (built from the saved config) and in eval mode."""
    model, history = load_checkpoint(path)
    state = torch.load(path, map_location="cpu", weights_only=True)
    if "src_tokens" not in state or "tgt_tokens" not in state:
        raise ValueError(f"path must be a file written by save_translation_model, got one without "
                         f"vocabularies: {path}")  # fmt: skip
    return model.float(), Vocab(state["src_tokens"]), Vocab(state["tgt_tokens"]), history
