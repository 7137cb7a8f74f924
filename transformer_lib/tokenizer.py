"""Tokenisers: text -> integer ids -> text, one character at a time or by byte-pair merges.

* :class:`CharTokenizer`: the vocabulary is the sorted distinct characters of a training
  text (65 for tiny Shakespeare); one id per character.

Both share one interface: ``train(text)`` (returns the tokeniser), ``encode(text) -> list[int]``,
``decode(ids) -> str``, ``vocab_size``, ``save(path)`` / ``load(path)`` (json), and ``==``.
Taught in the language-modelling chapter.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np


def _check_text(text: Any, name: str) -> str:
    """Return ``text`` if it is a str, else raise a TypeError naming the argument."""
    if not isinstance(text, str):
        raise TypeError(f"{name} must be a str, got {type(text).__name__}")
    return text


def _check_ids(ids: Any, vocab_size: int, name: str = "ids") -> list[int]:
    """Return ``ids`` as a list of ints in [0, vocab_size), else raise naming the argument.

    Accepts a list or tuple of ints, a 1-D numpy array or a 1-D torch tensor of integers.
    """
    if isinstance(ids, str):
        raise TypeError(f"{name} must be a sequence of integer token ids, got a str")
    if hasattr(ids, "tolist") and hasattr(ids, "ndim"):  # numpy array or torch tensor
        if ids.ndim != 1:
            raise ValueError(f"{name} must be one-dimensional (seq,), got shape {tuple(ids.shape)}")
        ids = ids.tolist()
    try:
        out = list(ids)
    except TypeError as exc:
        raise TypeError(f"{name} must be a sequence of integer token ids, got {type(ids).__name__}") from exc
    for pos, i in enumerate(out):
        if isinstance(i, bool) or not isinstance(i, (int, np.integer)):
            raise TypeError(f"{name} must hold integers, got {type(i).__name__} {i!r} at position {pos}")
        if not 0 <= i < vocab_size:
            raise ValueError(f"{name} must be in [0, {vocab_size}), got {int(i)} at position {pos}")
    return [int(i) for i in out]


def _read_json(path: str | Path, kind: str) -> dict:
    """Read a tokeniser file written by ``save`` and check it holds a ``kind`` tokeniser."""
    with open(path, encoding="utf-8") as f:
        state = json.load(f)
    if not isinstance(state, dict) or state.get("type") != kind:
        found = state.get("type") if isinstance(state, dict) else type(state).__name__
        raise ValueError(f"path must be a {kind} file written by {kind}.save, got type {found!r}")
    return state


class CharTokenizer:
    """One token per character; the vocabulary is the sorted distinct characters of the text.

    Args:
        chars: the vocabulary, if known already (e.g. from a saved file); else call
            :meth:`train`. Duplicates are not allowed; the order given is the id order.

    ``CharTokenizer().train("hello")`` has vocabulary ``e h l o`` (ids 0-3) and encodes
    ``"hello"`` as ``[1, 0, 2, 2, 3]``. A character outside the vocabulary is an error
    (no unknown token): a character model can only read what it was trained on.
    Taught in the language-modelling chapter.
    """

    def __init__(self, chars: Iterable[str] | None = None):
        self.chars: list[str] = []
        self.char_to_id: dict[str, int] = {}
        if chars is not None:
            self._set_chars(list(chars))

    def _set_chars(self, chars: list[str]) -> None:
        for c in chars:
            if not isinstance(c, str) or len(c) != 1:
                raise ValueError(f"chars must hold single characters, got {c!r}")
        if len(set(chars)) != len(chars):
            raise ValueError("chars must not repeat a character")
        self.chars = chars
        self.char_to_id = {c: i for i, c in enumerate(chars)}

    def train(self, text: str) -> CharTokenizer:
        """Set the vocabulary to the sorted distinct characters of ``text``; return ``self``."""
        _check_text(text, "text")
        if not text:
            raise ValueError("text must not be empty: there are no characters to learn")
        self._set_chars(sorted(set(text)))
        return self

    @property
    def vocab_size(self) -> int:
        """Number of distinct tokens (characters)."""
        return len(self.chars)

    def _check_trained(self) -> None:
        if not self.chars:
            raise RuntimeError("this CharTokenizer has no vocabulary yet; call train(text) first")

    def encode(self, text: str) -> list[int]:
        """The ids of the characters of ``text``, a list of length ``len(text)``."""
        _check_text(text, "text")
        self._check_trained()
        try:
            return [self.char_to_id[c] for c in text]
        except KeyError:
            pos = next(i for i, c in enumerate(text) if c not in self.char_to_id)
            c = text[pos]
            raise ValueError(
                f"text contains the character {c!r} (U+{ord(c):04X}) at position {pos}, "
                f"which is not in the vocabulary of {self.vocab_size} characters"
            ) from None

    def decode(self, ids: Sequence[int]) -> str:
        """The text of a sequence of ids (list, 1-D array or 1-D tensor), shape (seq,)."""
        self._check_trained()
        return "".join(self.chars[i] for i in _check_ids(ids, self.vocab_size))

    def token_strings(self, ids: Sequence[int]) -> list[str]:
        """The text of each id, for display."""
        return [self.chars[i] for i in _check_ids(ids, self.vocab_size)]

    def save(self, path: str | Path) -> None:
        """Write the vocabulary to a json file."""
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"type": "CharTokenizer", "chars": self.chars}, f, ensure_ascii=True)

    @classmethod
    def load(cls, path: str | Path) -> CharTokenizer:
        """Read a tokeniser written by :meth:`save`."""
        return cls(_read_json(path, "CharTokenizer")["chars"])

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CharTokenizer) and self.chars == other.chars

    def __hash__(self) -> int:
        return hash(tuple(self.chars))

    def __repr__(self) -> str:
        more = " ..." if self.vocab_size > 20 else ""
        return f"CharTokenizer(vocab_size={self.vocab_size}, chars={''.join(self.chars[:20])!r}{more})"
