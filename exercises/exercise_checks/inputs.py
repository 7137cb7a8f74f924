"""Inputs that tests and notebooks build: weights for attention and encoder layers, a toy model.

Built with numpy alone: a test builds its inputs before the answer is called, also in the
grading kernel, where the course library is not installed.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def random_params(d_model: int, seed: int, d_ff: int | None = None) -> dict[str, np.ndarray]:
    """Weights for multi-head attention (and, with ``d_ff``, a whole encoder layer), as numpy arrays.

    Each weight matrix has the orientation and the name of the library's ``nn.Linear`` layers
    (``tl.MultiHeadAttention``'s ``W_q``, ``W_k``, ``W_v``, ``W_o``, ``tl.FeedForward``'s ``W_1``,
    ``W_2``): ``(out_features, in_features)``, applied as ``x @ W.T + b``. So ``W_q, W_k, W_v, W_o``
    are ``(d_model, d_model)`` with biases ``b_q, b_k, b_v, b_o`` ``(d_model,)``; with ``d_ff`` also
    ``W_1 (d_ff, d_model)``, ``b_1 (d_ff,)``, ``W_2 (d_model, d_ff)``, ``b_2 (d_model,)`` and the two
    layer norms' ``gamma_1, beta_1, gamma_2, beta_2`` ``(d_model,)``.
    """
    rng = np.random.default_rng(seed)
    params = {f"W_{n}": rng.normal(size=(d_model, d_model)) / math.sqrt(d_model) for n in "qkvo"}
    params.update({f"b_{n}": 0.1 * rng.normal(size=d_model) for n in "qkvo"})
    if d_ff is not None:
        params.update(
            W_1=rng.normal(size=(d_ff, d_model)) / math.sqrt(d_model), b_1=0.1 * rng.normal(size=d_ff),
            W_2=rng.normal(size=(d_model, d_ff)) / math.sqrt(d_ff), b_2=0.1 * rng.normal(size=d_model),
        )
        for i in (1, 2):
            params[f"gamma_{i}"] = 1.0 + 0.1 * rng.normal(size=d_model)
            params[f"beta_{i}"] = 0.1 * rng.normal(size=d_model)
    return params


class ToyLanguageModel:
    """A tiny deterministic next-token model for the greedy-decoding exercise.

    ``model(tokens)`` takes the prefix (a list of token ids, the start token first) and returns
    ``(vocab_size,)`` logits that depend on the last token, the position and the sum of the
    prefix. After ``eos_after`` tokens the end token becomes by far the most likely.
    """

    def __init__(self, vocab_size: int, seed: int, eos_id: int, eos_after: int | None = None):
        rng = np.random.default_rng(seed)
        self.vocab_size, self.eos_id, self.eos_after = vocab_size, eos_id, eos_after
        self.table = rng.normal(size=(vocab_size, vocab_size))
        self.table[:, eos_id] -= 4.0  # the end token is unlikely until eos_after
        self.position = rng.normal(size=(16, vocab_size))
        self.mix = rng.normal(size=(7, vocab_size))
        self.fingerprint = ("ToyLanguageModel", vocab_size, seed, eos_id, eos_after)

    def __call__(self, tokens: Any) -> np.ndarray:
        tokens = [int(t) for t in np.asarray(tokens).reshape(-1)]
        if not tokens:
            raise ValueError("the model needs at least the start token")
        logits = self.table[tokens[-1]] + self.position[len(tokens) % 16] + self.mix[sum(tokens) % 7]
        logits[tokens[-1]] -= 2.0  # discourage repeating the last token
        if self.eos_after is not None and len(tokens) >= self.eos_after:
            logits[self.eos_id] += 100.0
        return logits.copy()
