"""Tokenisers: text -> integer ids -> text, one character at a time or by byte-pair merges.

* :class:`CharTokenizer`: the vocabulary is the sorted distinct characters of a training
  text (65 for tiny Shakespeare); one id per character.
* :class:`BPETokenizer`: byte-level byte-pair encoding as in GPT-2 (Sennrich et al. 2016;
  Radford et al. 2019). The base vocabulary is the 256 bytes, so every string has an encoding;
  training repeatedly merges the most frequent adjacent pair of tokens into a new token.
  :func:`learn_merges` is the training loop on its own, on any sequences of integer symbols;
  :func:`merge_pair` is one merge.

Both share one interface: ``train(text, ...)`` (returns the tokeniser), ``encode(text) -> list[int]``,
``decode(ids) -> str``, ``vocab_size``, ``token_strings(ids)``, ``save(path)`` / ``load(path)`` (json),
and ``==``. :func:`tokens_per_character` measures how much a tokeniser shortens a text.
Taught in chapter 15.
"""

from __future__ import annotations

import heapq
import json
import warnings
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import regex

from . import _checks


def _check_text(text: Any, name: str) -> str:
    """Return ``text`` if it is a str, else raise a TypeError naming the argument."""
    if not isinstance(text, str):
        raise TypeError(f"{name} must be a str, got {type(text).__name__}")
    return text


def _check_ids(ids: Any, vocab_size: int | None, name: str = "ids") -> list[int]:
    """Return ``ids`` as a list of ints in [0, vocab_size), else raise naming the argument.

    Accepts a list or tuple of ints, a 1-D numpy array or a 1-D torch tensor of integers.
    ``vocab_size=None``: any non-negative ints.
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
        if vocab_size is None and i < 0:
            raise ValueError(f"{name} must be non-negative, got {int(i)} at position {pos}")
        if vocab_size is not None and not 0 <= i < vocab_size:
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
    Taught in chapter 15.
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


# --- Byte-level byte-pair encoding -------------------------------------------------------------

#: GPT-2's pre-tokenisation pattern (Radford et al. 2019): English contractions, a run of
#: letters, of digits or of other symbols, each with at most one leading space, and runs of
#: white space (``\s+(?!\S)`` leaves the last space of a run to the word that follows).
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""

#: GPT-4's pre-tokenisation pattern (tiktoken's ``cl100k_base``, as minbpe writes it): contractions
#: in any case, a letter run with at most one non-letter before it, digits in groups of at most
#: three, punctuation runs with the line breaks after them, and line breaks kept apart from spaces.
GPT4_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+"""
)


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's printable stand-in character for each byte, ``{byte: character}`` (256 entries).

    GPT-2 and Hugging Face's ``ByteLevel`` store byte tokens as text, so each byte gets a
    visible character: the 188 printable bytes (``!``-``~``, ``¡``-``¬``, ``®``-``ÿ``) stand for
    themselves, the other 68 (controls, space, ``0x7F``-``0xA0``, ``0xAD``) get U+0100 onwards
    in byte order: space is ``Ġ`` (U+0120), newline ``Ċ`` (U+010A). :class:`BPETokenizer` works on
    bytes directly and does not need it; it is here to read GPT-2 and ``tokenizers`` vocabularies.
    """
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1)]
    printable += range(ord("®"), ord("ÿ") + 1)
    mapping = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in mapping:
            mapping[b] = chr(256 + extra)
            extra += 1
    return dict(sorted(mapping.items()))


def _merge_pair(ids: list[int], pair: tuple[int, int], new_id: int) -> list[int]:
    """:func:`merge_pair` without its checks, for the loops of training and encoding."""
    out: list[int] = []
    i = 0
    while i < len(ids):
        if i + 1 < len(ids) and ids[i] == pair[0] and ids[i + 1] == pair[1]:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def merge_pair(ids: Sequence[int], pair: tuple[int, int], new_id: int) -> list[int]:
    """One byte-pair merge: every occurrence of ``pair`` in ``ids``, left to right, becomes ``new_id``.

    Args:
        ids: the token ids, a list or tuple of ints or a 1-D numpy array or torch tensor
            (not changed).
        pair: the two ids ``(a, b)`` to merge.
        new_id: the id that replaces each adjacent ``a b``.

    Returns:
        A new list. Occurrences are taken left to right, each symbol in one merge at most, so
        ``[a, a, a]`` with ``pair=(a, a)`` becomes ``[new_id, a]``. Training
        (:func:`learn_merges`) and encoding apply it. Taught in chapter 15.
    """
    ids = _check_ids(ids, None)
    if isinstance(pair, (str, bytes)) or not isinstance(pair, Sequence) or len(pair) != 2:
        raise TypeError(f"pair must be a tuple of two token ids (a, b), got {pair!r}")
    pair = (_checks.token_id(pair[0], "pair[0]"), _checks.token_id(pair[1], "pair[1]"))
    return _merge_pair(ids, pair, _checks.token_id(new_id, "new_id"))


def learn_merges(
    word_counts: Mapping[tuple[int, ...], int], num_merges: int, first_id: int = 256
) -> list[tuple[tuple[int, int], int]]:
    """Learn byte-pair merges: repeatedly merge the most frequent adjacent pair of symbols.

    Args:
        word_counts: each distinct word as a tuple of integer symbols (e.g. its UTF-8 bytes),
            with how often it occurs. Pairs are counted inside words only, so merges never
            cross a word boundary.
        num_merges: how many merges to learn (fewer if every word becomes a single symbol).
        first_id: the id of the first new symbol; merge ``k`` (from 0) creates ``first_id + k``.

    Returns:
        The merge history, a list of ``((a, b), count)`` in the order learned: merge ``k``
        replaced each adjacent ``a b`` by ``first_id + k``; ``count`` is how often the pair
        occurred at that moment (every adjacent position counts, so ``a a a`` holds ``a a``
        twice, as in Hugging Face's trainer).

    Ties: among pairs with the same count, the smallest ``(a, b)`` wins (first symbol, then
    second: Python's tuple order), so the result does not depend on the order of
    ``word_counts``. Hugging Face's ``BpeTrainer`` uses the same rule on its own ids.

    Efficient in the way of Sennrich et al.'s reference code: the words are counted once;
    each merge revisits only the words that hold the pair (an index from pair to words)
    and updates only the pair counts that change; a heap with lazy deletion gives the best
    pair (entries whose count is out of date are skipped when they come to the top).
    """
    if isinstance(num_merges, bool) or not isinstance(num_merges, (int, np.integer)) or num_merges < 0:
        raise ValueError(f"num_merges must be a non-negative integer, got {num_merges!r}")
    if not isinstance(word_counts, Mapping):
        kind = type(word_counts).__name__
        raise TypeError(f"word_counts must be a mapping {{word tuple: count}}, got {kind}")
    words: list[list[int]] = [list(w) for w in word_counts]
    counts: list[int] = list(word_counts.values())
    for w, c in zip(word_counts, counts):
        if isinstance(c, bool) or not isinstance(c, (int, np.integer)) or c <= 0:
            msg = f"word_counts must map each word to a positive integer count, got {c!r} for {w!r}"
            raise ValueError(msg)
    # 1) count every adjacent pair once, remembering which words hold it
    pair_counts: dict[tuple[int, int], int] = defaultdict(int)
    where: dict[tuple[int, int], set[int]] = defaultdict(set)
    for i, (w, c) in enumerate(zip(words, counts)):
        for pair in zip(w, w[1:]):
            pair_counts[pair] += c
            where[pair].add(i)
    heap = [(-c, pair) for pair, c in pair_counts.items()]
    heapq.heapify(heap)
    history: list[tuple[tuple[int, int], int]] = []
    while len(history) < num_merges and heap:
        # 2) the most frequent pair, smallest ids first among equals; skip stale entries
        neg_count, pair = heapq.heappop(heap)
        if pair_counts.get(pair) != -neg_count:
            continue
        new_id = first_id + len(history)
        history.append((pair, -neg_count))
        # 3) merge it in the words that hold it; collect how each pair count changes
        delta: dict[tuple[int, int], int] = defaultdict(int)
        for i in where.pop(pair):
            old = words[i]
            new = _merge_pair(old, pair, new_id)
            if len(new) == len(old):  # the index may list words whose pair was merged away
                continue
            c = counts[i]
            for p in zip(old, old[1:]):
                delta[p] -= c
            for p in zip(new, new[1:]):
                delta[p] += c
                where[p].add(i)
            words[i] = new
        # 4) apply the changes; every changed count goes back on the heap
        for p, d in delta.items():
            if d == 0:
                continue
            pair_counts[p] += d
            if pair_counts[p] > 0:
                heapq.heappush(heap, (-pair_counts[p], p))
            else:
                del pair_counts[p]
    return history


class BPETokenizer:
    """Byte-level byte-pair encoding (BPE), GPT-2 style: every string encodes, nothing is unknown.

    Args:
        pattern: the pre-tokenisation regular expression (``regex`` syntax) that splits text
            into words before merging, so merges never cross a word boundary; default
            :data:`GPT2_PATTERN`. ``None`` treats the whole text as one word (merges may then
            span spaces; training is slow beyond a few thousand characters).
        special_tokens: strings such as ``"<|endoftext|>"`` that get reserved ids of their
            own, after the bytes and the merges (GPT-2's ``<|endoftext|>`` is its last id,
            50256). Training cuts the text at them and learns merges only from the pieces
            between, and :meth:`encode` never splits one; whether a special token written in
            the text is read as that token is the caller's choice (``allowed_special``).

    Training (:meth:`train`) starts from the 256 bytes (ids 0-255 are the byte values) and
    learns ``vocab_size - 256`` merges with :func:`learn_merges`: merge ``k`` creates id
    ``256 + k``. Attributes after training:

    * ``merges``: ``{(a, b): new_id}`` in the order learned (a dict keeps insertion order);
    * ``history``: ``[((a, b), count), ...]``, the pair and how often it occurred when merged;
    * ``vocab``: ``{id: bytes}``;
    * :meth:`token_strings` for display.

    Encoding splits the text with ``pattern``, turns each word into its UTF-8 bytes and applies
    the merges in the order learned (lowest new id first, left to right), as GPT-2 does;
    each distinct word is encoded once and cached. Decoding joins the tokens' bytes and
    decodes UTF-8, so ``decode(encode(s)) == s`` for every str ``s`` that is valid Unicode
    (any script, emoji, combining marks, NUL). A str holding a lone surrogate (U+D800-U+DFFF
    on its own, which only broken decoding produces) is not text UTF-8 can encode: ``encode``
    raises a ValueError naming its position rather than store bytes no other tool would read.

    Compared with Hugging Face ``tokenizers`` (``models.BPE`` + ``trainers.BpeTrainer`` +
    ``pre_tokenizers.ByteLevel(add_prefix_space=False)``, initial alphabet the 256 bytes):
    the same pattern splits the text into the same words, and both trainers take the most
    frequent pair and break ties by the smallest pair of ids. The ids differ: ``ByteLevel``
    first maps each byte to a printable stand-in (:func:`bytes_to_unicode`; space is ``Ġ``,
    U+0120) and the trainer numbers the 256 base tokens in the order of those characters, so
    the 68 bytes without a printable form (space, newline, ...) sort after every letter there,
    while here space (32) sorts before them. The learned merges are the same until the first
    tie between a pair with such a byte and one without; there the two choose differently.
    Trained to 512 tokens on the whole of tiny Shakespeare, the first 182 merges agree; merges
    183 and 184 are a tie at 628 between space + ``'`` (first here: (32, 39) < (69, 84)) and
    ``E`` + ``T`` (first in ``tokenizers``, where ``Ġ`` comes after ``E``). On its first 90%,
    the training text of chapter 15, the first such tie is merges 171 and 172 at 617, space +
    ``v`` and ``u`` + ``st``. Tied merges come in another order, but on both texts the two
    learn the same set of merges and encode the text identically (measured at 512 on the whole
    text, at every size from 512 to 4096 on the 90%). The same set need not give the same
    encoding in general: encoding applies merges in the order learned, so reordering two that
    compete for a symbol (``a`` + ``b`` and ``b`` + ``c`` in ``abc``) changes the tokens.
    Renumbering the bytes in ``ByteLevel``'s order before :func:`learn_merges` reproduces
    its merge list exactly (tested).
    One more difference: if two merges spell the same bytes (``a`` + ``bc`` and ``ab`` + ``c``),
    each gets its own id here, where ``tokenizers`` reuses one id and learns one merge more.
    Taught in chapter 15.
    """

    def __init__(self, pattern: str | None = GPT2_PATTERN, special_tokens: Iterable[str] = ()):
        self.pattern = pattern
        if isinstance(special_tokens, str) or not isinstance(special_tokens, Iterable):
            kind = type(special_tokens).__name__
            raise TypeError(f"special_tokens must be a list of strings, got {kind}")
        self.special_tokens: list[str] = list(special_tokens)
        for t in self.special_tokens:
            if not isinstance(t, str) or not t:
                raise ValueError(f"special_tokens must be non-empty strings, got {t!r}")
            self._utf8(t, "special_tokens")
        if len(set(self.special_tokens)) != len(self.special_tokens):
            raise ValueError(f"special_tokens must be distinct, got {self.special_tokens!r}")
        # the longest first, so that a special token containing another one wins
        by_length = sorted(self.special_tokens, key=len, reverse=True)
        self._special_re = regex.compile("|".join(map(regex.escape, by_length))) if by_length else None
        self._compiled = None
        if pattern is not None:
            _check_text(pattern, "pattern")
            try:
                self._compiled = regex.compile(pattern)
            except regex.error as exc:
                msg = f"pattern must be a valid regular expression, got {pattern!r} ({exc})"
                raise ValueError(msg) from None
        self._set_history([])

    def _set_history(self, history: Sequence[tuple[tuple[int, int], int]]) -> None:
        """Set ``history``, ``merges`` and ``vocab`` from a merge history; check its ids."""
        self.history: list[tuple[tuple[int, int], int]] = []
        self.merges: dict[tuple[int, int], int] = {}
        self.vocab: dict[int, bytes] = {i: bytes([i]) for i in range(256)}
        for k, ((a, b), count) in enumerate(history):
            new_id = 256 + k
            if not (0 <= a < new_id and 0 <= b < new_id):
                raise ValueError(f"merges must only use ids made before them, got ({a}, {b}) for merge {k}")
            if (a, b) in self.merges:
                raise ValueError(f"merges must not repeat a pair, got ({a}, {b}) twice")
            self.history.append(((int(a), int(b)), int(count)))
            self.merges[(int(a), int(b))] = new_id
            self.vocab[new_id] = self.vocab[a] + self.vocab[b]
        # the special tokens: reserved ids after the merges, which no merge produces
        self.special_ids: dict[str, int] = {}
        for t in self.special_tokens:
            self.special_ids[t] = len(self.vocab)
            self.vocab[len(self.vocab)] = t.encode("utf-8")
        self._cache: dict[str, list[int]] = {}

    @property
    def vocab_size(self) -> int:
        """Number of tokens: the 256 bytes, one per merge, and the special tokens."""
        return 256 + len(self.merges) + len(self.special_tokens)

    def pre_tokenize(self, text: str) -> list[str]:
        """Split ``text`` into the words that merges stay inside (``[text]`` without a pattern)."""
        _check_text(text, "text")
        if self._compiled is None:
            return [text] if text else []
        words = self._compiled.findall(text)
        if sum(len(w) for w in words) != len(text):
            raise ValueError(
                f"pattern must match every character of the text (else encoding would drop some), "
                f"got words covering {sum(len(w) for w in words)} of {len(text)} characters"
            )
        return words

    @staticmethod
    def _utf8(text: str, name: str) -> bytes:
        try:
            return text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValueError(
                f"{name} contains a lone surrogate {text[exc.start]!r} at position {exc.start}, "
                f"which is not valid Unicode and has no UTF-8 bytes"
            ) from None

    def train(self, text: str, vocab_size: int, verbose: bool = False) -> BPETokenizer:
        """Learn ``vocab_size - 256`` merges from ``text``; return ``self``.

        Args:
            text: the training text.
            vocab_size: the vocabulary wanted, special tokens included, at least 256 plus
                their number (which learns nothing). If the text runs out of pairs first,
                training stops early with a warning. Merges are learned from the text between
                the special tokens written in it, never across or inside them.
            verbose: print each merge as it is learned: ids, strings and count.
        """
        _check_text(text, "text")
        vocab_size = _checks.positive_int(vocab_size, "vocab_size")
        n_special = len(self.special_tokens)
        if vocab_size < 256 + n_special:
            raise ValueError(
                f"vocab_size must be at least {256 + n_special} (the bytes and {n_special} special tokens), "
                f"got {vocab_size}"
            )
        self._utf8(text, "text")
        parts = self._special_re.split(text) if self._special_re else [text]
        word_counts = Counter(w.encode("utf-8") for part in parts for w in self.pre_tokenize(part))
        history = learn_merges({tuple(w): c for w, c in word_counts.items()}, vocab_size - 256 - n_special)
        self._set_history(history)
        if verbose:
            for k, ((a, b), count) in enumerate(history):
                a_s, b_s, new_s = self.token_strings([a, b, 256 + k])
                print(f"merge {k + 1}/{len(history)}: {a_s!r} + {b_s!r} -> {new_s!r} "
                      f"(id {256 + k}, {count} times)")
        if self.vocab_size < vocab_size:
            warnings.warn(
                f"vocab_size {vocab_size} not reached: the text has no pair left after "
                f"{len(history)} merges, vocab_size is {self.vocab_size}",
                stacklevel=2,
            )
        return self

    def _encode_word(self, word: bytes) -> list[int]:
        """Apply the merges to one word's bytes in the order learned (lowest new id first)."""
        ids = list(word)
        while len(ids) >= 2:
            pair = min(zip(ids, ids[1:]), key=lambda p: self.merges.get(p, 1 << 62))
            if pair not in self.merges:
                break
            ids = _merge_pair(ids, pair, self.merges[pair])
        return ids

    def _special_set(self, value: Any, name: str) -> set[str]:
        """``"all"`` or a collection of this tokeniser's special tokens, as a set."""
        if isinstance(value, str):
            if value != "all":
                raise ValueError(f'{name} must be "all" or a collection of special tokens, got {value!r}')
            return set(self.special_tokens)
        if not isinstance(value, Iterable):
            raise TypeError(f'{name} must be "all" or a collection of special tokens, got {type(value).__name__}')
        chosen = set(value)
        unknown = chosen - set(self.special_tokens)
        if unknown:
            raise ValueError(
                f"{name} must hold only this tokeniser's special tokens {self.special_tokens!r}, "
                f"got {sorted(unknown)!r}"
            )
        return chosen

    def encode(
        self, text: str, allowed_special: Iterable[str] | str = (), disallowed_special: Iterable[str] | str = "all"
    ) -> list[int]:
        """The token ids of ``text``.

        Special tokens written in the text are handled as ``tiktoken`` does: one listed in
        ``allowed_special`` (or all, with ``"all"``) becomes its reserved id; one listed in
        ``disallowed_special`` (by default all the others) raises a ValueError, because text
        from a user that spells ``"<|endoftext|>"`` must not end a document by accident;
        pass ``disallowed_special=()`` to encode such text as ordinary bytes instead.
        """
        _check_text(text, "text")
        self._utf8(text, "text")
        allowed = self._special_set(allowed_special, "allowed_special")
        disallowed = self._special_set(disallowed_special, "disallowed_special") - allowed
        if disallowed:
            found = regex.search("|".join(map(regex.escape, sorted(disallowed, key=len, reverse=True))), text)
            if found:
                raise ValueError(
                    f"text contains the special token {found.group()!r} at position {found.start()}; "
                    f"pass allowed_special={{{found.group()!r}}} to encode it as its id "
                    f"{self.special_ids[found.group()]}, or disallowed_special=() to encode it as ordinary text"
                )
        if not allowed:
            return self._encode_ordinary(text)
        out: list[int] = []
        start = 0
        pattern = regex.compile("|".join(map(regex.escape, sorted(allowed, key=len, reverse=True))))
        for match in pattern.finditer(text):
            out += self._encode_ordinary(text[start : match.start()])
            out.append(self.special_ids[match.group()])
            start = match.end()
        return out + self._encode_ordinary(text[start:])

    def _encode_ordinary(self, text: str) -> list[int]:
        """Encode ``text`` with the merges only, special tokens written in it included as bytes."""
        out: list[int] = []
        cache = self._cache
        for word in self.pre_tokenize(text):
            ids = cache.get(word)
            if ids is None:
                ids = cache[word] = self._encode_word(word.encode("utf-8"))
            out.extend(ids)
        return out

    def decode(self, ids: Sequence[int], errors: str = "replace") -> str:
        """The text of a sequence of ids (list, 1-D array or 1-D tensor), shape (seq,).

        ``errors`` is passed to ``bytes.decode``: ids that do not form whole UTF-8 characters
        (say a model's sample that stops inside one) give U+FFFD with ``"replace"``; use
        ``"strict"`` to raise ``UnicodeDecodeError`` instead. Ids from :meth:`encode` always
        decode exactly. Shown in chapter 15.
        """
        data = b"".join(self.vocab[i] for i in _check_ids(ids, self.vocab_size))
        return data.decode("utf-8", errors=errors)

    def token_strings(self, ids: Sequence[int] | None = None) -> list[str]:
        """Each token as text for display (every token if ``ids`` is None): one str per id.

        A token that is part of a UTF-8 character shows its bytes escaped, e.g. ``'\\\\xe2'``.
        """
        ids = range(self.vocab_size) if ids is None else _check_ids(ids, self.vocab_size)
        return [self.vocab[i].decode("utf-8", errors="backslashreplace") for i in ids]

    def save(self, path: str | Path) -> None:
        """Write the pattern and the merge history (pairs and counts) to a json file."""
        state = {
            "type": "BPETokenizer",
            "pattern": self.pattern,
            "special_tokens": self.special_tokens,
            "merges": [[a, b, count] for (a, b), count in self.history],
        }
        with open(path, "w", encoding="utf-8") as f:
            json.dump(state, f)

    @classmethod
    def load(cls, path: str | Path) -> BPETokenizer:
        """Read a tokeniser written by :meth:`save`."""
        state = _read_json(path, "BPETokenizer")
        tok = cls(state["pattern"], state.get("special_tokens", []))
        tok._set_history([((a, b), count) for a, b, count in state["merges"]])
        return tok

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, BPETokenizer):
            return False
        return (self.pattern, self.history, self.special_tokens) == (
            other.pattern,
            other.history,
            other.special_tokens,
        )

    def __hash__(self) -> int:
        return hash((self.pattern, tuple(self.history), tuple(self.special_tokens)))

    def __repr__(self) -> str:
        shown = "GPT2_PATTERN" if self.pattern == GPT2_PATTERN else repr(self.pattern)
        special = f", special_tokens={self.special_tokens!r}" if self.special_tokens else ""
        return f"BPETokenizer(vocab_size={self.vocab_size}, pattern={shown}{special})"


def tokens_per_character(tokenizer: CharTokenizer | BPETokenizer, text: str) -> float:
    """How many tokens ``tokenizer`` makes of ``text``, per character (1.0 for characters)."""
    _check_text(text, "text")
    if not text:
        raise ValueError("text must not be empty")
    return len(tokenizer.encode(text)) / len(text)
