"""Checkers of set 6: pair counts, one merge, a byte-level BPE trainer, encoding and decoding.

The conventions are ``tl.BPETokenizer``'s (chapter 15): ids 0-255 are the byte values; merge
``k`` (from 0) creates id ``256 + k``; ``merges`` is a dict ``{(a, b): new_id}`` in the order
learned, as the tokeniser's ``merges`` attribute; text is split into words with GPT-2's pattern
before training and encoding, so pairs are counted, and merged, inside words only; a pair occurs
at every adjacent position (``a a a`` holds ``a a`` twice) but a merge consumes its occurrences
left to right (``a a a`` becomes ``[new_id, a]``); ties go to the smallest pair
``(a, b)``; decoding joins the tokens' bytes and decodes UTF-8 once, with ``errors="replace"``.
The expected values come from ``tl.BPETokenizer`` (trained, or loaded with the given merges)
and, for one merge, from ``tl.tokenizer.merge_pair``.

The answers are dicts and strings, which a record of plain arrays cannot hold as they are, so
each answer is read through :func:`_readable`: a dict becomes an integer array (its rows
``a, b, value``), a str its UTF-8 bytes, each tagged with what it was (:func:`_tagged`); in the
grader the tagged record is replayed as it was recorded.
"""

from __future__ import annotations

import json
import os
import tempfile
import warnings
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from .compare import expect_ids
from .recording import Replay, Unconvertible, call
from .reference import tl

GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""

# --------------------------------------------------------------------------------------------
# Answers that are dicts or strings, as tagged arrays
# --------------------------------------------------------------------------------------------

_TAG = -7_060_000  # tags are (TAG + kind): a student's own array is very unlikely to start so
_KINDS = {"dict": 1, "str": 2, "bytes": 3, "bad": 4}


def _tagged(kind: str, payload: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return np.array(_TAG + _KINDS[kind], dtype=np.int64), payload


def _text_array(s: str) -> np.ndarray:
    return np.frombuffer(s.encode("utf-8", errors="surrogatepass"), dtype=np.uint8).copy()


def _untag(got: Any) -> tuple[str | None, Any]:
    """``(kind, payload)`` of a tagged answer, or ``(None, got)`` for any other answer."""
    if (isinstance(got, tuple) and len(got) == 2 and isinstance(got[0], np.ndarray) and got[0].shape == ()
            and got[0].dtype.kind == "i"):
        for kind, code in _KINDS.items():
            if int(got[0]) == _TAG + code:
                return kind, got[1]
    return None, got


def _as_text(payload: np.ndarray) -> str:
    return np.asarray(payload, dtype=np.uint8).tobytes().decode("utf-8", errors="surrogatepass")


def _dict_rows(raw: Mapping) -> tuple[np.ndarray, np.ndarray]:
    """A dict ``{(a, b): value}`` as rows ``a, b, value`` in its order; a tagged 'bad' when it is not one."""
    rows = []
    for key, value in raw.items():
        pair = tuple(key) if isinstance(key, (tuple, list)) else None
        if pair is None or len(pair) != 2 or not all(isinstance(i, (int, np.integer)) for i in pair):
            return _tagged("bad", _text_array(f"a dict whose key {key!r} is not a pair of integer ids (a, b)"))
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            return _tagged("bad", _text_array(f"a dict whose value for {key!r} is {value!r}, not an integer"))
        rows.append((int(pair[0]), int(pair[1]), int(value)))
    return _tagged("dict", np.array(rows, dtype=np.int64).reshape(-1, 3))


def _convert(raw: Any) -> Any:
    """A dict or a str answer as tagged arrays; anything else as it is."""
    try:
        if isinstance(raw, Mapping):
            return _dict_rows(raw)
        if isinstance(raw, str):
            return _tagged("str", _text_array(raw))
        if isinstance(raw, (bytes, bytearray)):
            return _tagged("bytes", np.frombuffer(bytes(raw), dtype=np.uint8).copy())
    except Exception as e:  # never blame the student's function for the conversion
        return _tagged("bad", _text_array(f"a {type(raw).__name__} that could not be read ({e})"))
    return raw


def _readable(fn: Any) -> Any:
    """The answer ``fn`` with its dict or str result made recordable (a replayed answer as it is)."""
    if isinstance(fn, Replay) or not callable(fn):
        return fn

    def answer(*args: Any, **kwargs: Any) -> Any:
        return _convert(fn(*args, **kwargs))

    return answer


def _expect_dict(got: Any, what: str, shape: str) -> np.ndarray:
    """The rows of a dict answer; AssertionError naming what came instead."""
    kind, payload = _untag(got)
    if kind == "dict":
        return payload
    if kind == "bad":
        raise AssertionError(f"{what} should return a dict {shape}, but it returned {_as_text(payload)}")
    if kind in ("str", "bytes"):
        raise AssertionError(f"{what} should return a dict {shape}, but it returned a {kind}")
    if isinstance(got, Unconvertible):
        raise AssertionError(f"{what} should return a dict {shape}, but it returned {got!r}")
    kind = f"an array or list of shape {np.shape(got)}" if isinstance(got, np.ndarray) else f"a {type(got).__name__}"
    raise AssertionError(f"{what} should return a dict {shape}, but it returned {kind}")


def _expect_ids(got: Any, what: str) -> list[int]:
    """A flat list of integer ids; AssertionError naming what came instead."""
    kind, payload = _untag(got)
    if kind is not None:
        found = {"str": "a str", "bytes": "bytes", "dict": "a dict"}.get(kind) or _as_text(payload)
        raise AssertionError(f"{what} should return a list of integer token ids, but it returned {found}")
    return expect_ids(got, what)


def _expect_text(got: Any, what: str) -> str:
    """The str of an answer; AssertionError naming what came instead."""
    kind, payload = _untag(got)
    if kind == "str":
        return _as_text(payload)
    if kind == "bytes":
        raise AssertionError(f"{what} returned bytes ({bytes(payload)!r}); return a str: decode the joined "
                             "bytes with .decode('utf-8', errors='replace')")
    found = {"dict": "a dict", "bad": "something unreadable"}.get(kind, repr(got))
    raise AssertionError(f"{what} should return a str, but it returned {found}")


# --------------------------------------------------------------------------------------------
# References and the mistakes they are compared with
# --------------------------------------------------------------------------------------------


def _merge_overlapping(ids: list[int], pair: tuple[int, int], new_id: int) -> list[int]:
    """The slip: each position decides alone whether it starts a pair, so ``a a a`` gives two new ids."""
    out = []
    for i in range(len(ids)):
        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == tuple(pair):
            out.append(new_id)
        elif i > 0 and (ids[i - 1], ids[i]) == tuple(pair):
            continue  # the second half of a pair already merged
        else:
            out.append(ids[i])
    return out


def _merge_from_the_right(ids: list[int], pair: tuple[int, int], new_id: int) -> list[int]:
    return tl.tokenizer.merge_pair(ids[::-1], (pair[1], pair[0]), new_id)[::-1]


def _merge_first_only(ids: list[int], pair: tuple[int, int], new_id: int) -> list[int]:
    for i in range(len(ids) - 1):
        if (ids[i], ids[i + 1]) == tuple(pair):
            return ids[:i] + [new_id] + ids[i + 2:]
    return list(ids)


def _train_variant(words: list[bytes], num_merges: int, *, merge: Callable | None = None, tie: str = "smallest",
                   weighted: bool = True, first_id: int = 256) -> dict[tuple[int, int], int]:
    """A plain BPE trainer whose parts can be swapped for the classic slips (the words in text order).

    ``merge(ids, pair, new_id)`` is one merge, by default the library's ``merge_pair``.
    """
    merge = merge or tl.tokenizer.merge_pair
    counts = Counter(words)
    seqs = [(list(w), counts[w] if weighted else 1) for w in counts]  # first occurrence order
    merges: dict[tuple[int, int], int] = {}
    for k in range(num_merges):
        pairs: dict[tuple[int, int], int] = {}
        for seq, n in seqs:
            for p in zip(seq, seq[1:]):
                pairs[p] = pairs.get(p, 0) + n
        if not pairs:
            break
        if tie == "smallest":
            best = min(pairs, key=lambda p: (-pairs[p], p))
        elif tie == "largest":
            best = max(pairs, key=lambda p: (pairs[p], p))
        else:  # the first pair seen with the largest count (max over the dict's order)
            best = max(pairs, key=pairs.get)
        merges[best] = first_id + k
        seqs = [(merge(seq, best, first_id + k), n) for seq, n in seqs]
    return merges


def _words(text: str, how: str = "gpt2") -> list[bytes]:
    import regex

    if how == "gpt2":
        pieces = regex.findall(GPT2_PATTERN, text)
    elif how == "whole":
        pieces = [text] if text else []
    else:  # str.split: on white space, which is dropped
        pieces = text.split()
    return [p.encode("utf-8") for p in pieces]


def _library_tokenizer(merges: Mapping, pattern: str | None = GPT2_PATTERN) -> Any:
    """``tl.BPETokenizer`` holding these merges (read with its public ``load``); ``pattern=None``: no pre-split."""
    history = sorted(((int(v), int(a), int(b)) for (a, b), v in merges.items()))
    state = {"type": "BPETokenizer", "pattern": pattern, "merges": [[a, b, 1] for _, a, b in history]}
    fd, path = tempfile.mkstemp(suffix=".json")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(state, f)
        return tl.BPETokenizer.load(path)
    finally:
        os.remove(path)


def _library_train(text: str, num_merges: int, pattern: Any = GPT2_PATTERN) -> dict[tuple[int, int], int]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # fewer merges than asked: the text ran out of pairs
        return dict(tl.BPETokenizer(pattern).train(text, 256 + num_merges).merges)


def _vocab(merges: Mapping) -> dict[int, bytes]:
    vocab = {i: bytes([i]) for i in range(256)}
    for (a, b), new_id in sorted(merges.items(), key=lambda kv: kv[1]):
        vocab[new_id] = vocab[a] + vocab[b]
    return vocab


def _show(token: bytes) -> str:
    return repr(token.decode("utf-8", errors="backslashreplace"))


def bpe_merges(pieces: list[tuple[bytes, bytes]]) -> dict[tuple[int, int], int]:
    """Merges written as pairs of byte strings, ``[(b"e", b"s"), (b"es", b"t")]``, as ``{(a, b): new_id}``.

    Each piece is a single byte or a token made by an earlier merge; merge ``k`` gets ``256 + k``.
    For tests, which build their inputs with no library at hand.
    """
    ids = {bytes([i]): i for i in range(256)}
    merges: dict[tuple[int, int], int] = {}
    for k, (a, b) in enumerate(pieces):
        if a not in ids or b not in ids:
            raise ValueError(f"merge {k}: {a!r} or {b!r} is neither a byte nor an earlier merge")
        merges[(ids[a], ids[b])] = 256 + k
        ids.setdefault(a + b, 256 + k)
    return merges


# --------------------------------------------------------------------------------------------
# Checkers
# --------------------------------------------------------------------------------------------


def check_pair_counts(pair_counts: Any, ids: list[int]) -> None:
    """Check ``pair_counts(ids)``: ``{(a, b): count}`` of every adjacent position, as the library counts."""
    ids = [int(i) for i in ids]
    got = call("pair_counts", _readable(pair_counts), ids)
    what = f"pair_counts({ids if len(ids) <= 12 else 'ids'})"
    rows = _expect_dict(got, what, "{(a, b): count}")
    want = dict(Counter(zip(ids, ids[1:])))
    found: dict[tuple[int, int], int] = {}
    for a, b, n in rows.tolist():
        found[(a, b)] = n
    if found == want:
        return

    def non_overlapping() -> dict:
        out: dict = {}
        i = 0
        while i + 1 < len(ids):
            p = (ids[i], ids[i + 1])
            out[p] = out.get(p, 0) + 1
            i += 2 if ids[i] == ids[i + 1] else 1
        return out

    mistakes = {
        "a run such as [97, 97, 97] ('aaa') holds the pair (97, 97) twice, at positions 0 and 1: count "
        "every adjacent position, zip(ids, ids[1:]), without skipping past a pair already counted":
            non_overlapping(),
        "the last pair is missing: the pairs are (ids[i], ids[i + 1]) for i in range(len(ids) - 1)":
            dict(Counter(zip(ids[:-1], ids[1:-1]))),
        "each pair was counted once; count how often it occurs": {p: 1 for p in want},
    }
    shown = f"returned {found}, expected {want}" if len(want) <= 8 and len(found) <= 8 else "is not right"
    for explanation, wrong in mistakes.items():
        if found == wrong:
            raise AssertionError(f"{what} {shown}\nHint: {explanation}")
    missing = sorted(set(want) - set(found))
    extra = sorted(set(found) - set(want))
    wrong = sorted(p for p in set(want) & set(found) if want[p] != found[p])
    parts = []
    if missing:
        parts.append(f"{len(missing)} pair(s) missing, e.g. {missing[0]} (occurs {want[missing[0]]} times)")
    if extra:
        parts.append(f"{len(extra)} pair(s) that are not adjacent in ids, e.g. {extra[0]}")
    if wrong:
        p = wrong[0]
        parts.append(f"{len(wrong)} count(s) wrong, e.g. {p}: got {found[p]}, expected {want[p]}")
    raise AssertionError(f"{what} is not right: " + "; ".join(parts))


def check_merge(merge: Any, ids: list[int], pair: tuple[int, int], new_id: int) -> None:
    """Check ``merge(ids, pair, new_id)``: each occurrence replaced, left to right, as the library merges."""
    ids, pair, new_id = [int(i) for i in ids], (int(pair[0]), int(pair[1])), int(new_id)
    got = call("merge", merge, ids, pair, new_id)
    what = f"merge({ids if len(ids) <= 12 else 'ids'}, {pair}, {new_id})"
    got = _expect_ids(got, what)
    want = tl.tokenizer.merge_pair(ids, pair, new_id)
    if got == want:
        return
    mistakes = {
        "a symbol was used by two overlapping pairs: in [97, 97, 97] the pair (97, 97) occurs at "
        "positions 0 and 1, but once the first two are merged the middle 97 is gone, so the result is "
        "[new_id, 97], not [new_id, new_id]. Scan left to right and, after a merge, continue two "
        "positions further": _merge_overlapping(ids, pair, new_id),
        "the merge went from right to left ([97, 97, 97] became [97, new_id]); scan left to right":
            _merge_from_the_right(ids, pair, new_id),
        "only the first occurrence was merged; replace every occurrence": _merge_first_only(ids, pair, new_id),
    }
    note = next((f"\nHint: {e}" for e, wrong in mistakes.items() if got == wrong and wrong != want), "")
    raise AssertionError(f"{what} returned {got}, expected {want}" + note)


def check_train_bpe(train_bpe: Any, text: str, num_merges: int) -> None:
    """Check ``train_bpe(text, num_merges)``: the merges of ``tl.BPETokenizer().train``, in order."""
    text, num_merges = str(text), int(num_merges)
    got = call("train_bpe", _readable(train_bpe), text, num_merges)
    shown = repr(text) if len(text) <= 40 else repr(text[:37] + "...")
    what = f"train_bpe({shown}, num_merges={num_merges})"
    rows = _expect_dict(got, what, "{(a, b): new_id}")
    found = {(a, b): n for a, b, n in rows.tolist()}
    order = [(a, b) for a, b, _ in rows.tolist()]
    want = _library_train(text, num_merges)
    if list(found.items()) == list(want.items()) and order == list(want):
        return
    words = _words(text)
    mistakes = {
        "pairs were counted across word boundaries: the text was treated as one sequence of bytes. "
        "Split it with pre_split first and count pairs inside each word only (a pair such as 'e' + ' ' "
        "is then never counted)": lambda: _library_train(text, num_merges, pattern=None),
        "the text was split on white space (str.split), which drops the spaces; split it with "
        "pre_split, which keeps each space with the word that follows": lambda: (
            _train_variant(_words(text, "split"), num_merges)),
        "each distinct word was counted once; weight each word's pairs by how often the word occurs":
            lambda: _train_variant(words, num_merges, weighted=False),
        "ties were broken by the first pair seen (max over the dict keeps the first maximum); among "
        "pairs with the same count take the smallest (a, b), by first id, then second": lambda: (
            _train_variant(words, num_merges, tie="first")),
        "ties were broken by the largest pair; among pairs with the same count take the smallest (a, b)":
            lambda: _train_variant(words, num_merges, tie="largest"),
        "the merge used a symbol twice in overlapping pairs (in 'aaa' the pair 'aa' can be merged once, "
        "giving [new_id, 97]); scan left to right and skip past each merged pair": lambda: (
            _train_variant(words, num_merges, merge=_merge_overlapping)),
        "the new ids start at 0; ids 0-255 are the bytes, so merge k (from 0) creates id 256 + k": lambda: (
            _train_variant(words, num_merges, first_id=0)),
    }
    for explanation, candidate in mistakes.items():
        try:
            wrong = candidate()
        except Exception:
            continue
        if list(found.items()) == list(wrong.items()) and wrong != want:
            where = _first_wrong_merge(found, order, want, words)
            raise AssertionError(f"{what} {where}\nHint: {explanation}")
    raise AssertionError(what + " " + _first_wrong_merge(found, order, want, words))


def _first_wrong_merge(found: dict, order: list, want: dict, words: list[bytes]) -> str:
    """Where the merges first differ, with the pair counts at that point (in words)."""
    expected = list(want.items())
    got_items = list(found.items())
    ids = [v for _, v in got_items]
    if ids and ids != list(range(256, 256 + len(ids))):
        return (f"gave the new ids {ids[:6]}{' ...' if len(ids) > 6 else ''}; merge k (from 0) creates id 256 + k, "
                "in the order learned")
    vocab = _vocab(want)
    for k, (pair, new_id) in enumerate(expected):
        if k >= len(got_items):
            return (f"learned {len(got_items)} merges, expected {len(expected)}: keep merging until num_merges "
                    "merges are learned or no pair is left")
        g_pair = got_items[k][0]
        if g_pair != pair:
            state = _train_variant(words, k)
            counts: Counter = Counter()
            for w, n in Counter(words).items():
                seq = list(w)
                for p, v in state.items():
                    seq = tl.tokenizer.merge_pair(seq, p, v)
                for p in zip(seq, seq[1:]):
                    counts[p] += n
            a, b = pair
            message = (f"merge {k} (new id {new_id}) is {g_pair}, expected {pair}, {_show(vocab[a])} + "
                       f"{_show(vocab[b])}, which occurs {counts[pair]} times at that point")
            if counts.get(tuple(g_pair), 0) == counts[pair]:
                message += (f"; {g_pair} occurs as often: a tie, which goes to the smallest pair (a, b), "
                            "by first id, then second")
            elif tuple(g_pair) in counts:
                message += f"; {g_pair} occurs {counts[tuple(g_pair)]} times"
            else:
                message += f"; {g_pair} is not a pair of adjacent symbols inside a word at that point"
            return message
    return (f"learned {len(got_items)} merges, expected {len(expected)}: stop when num_merges merges are "
            "learned or no pair is left in any word")


def check_encode(encode: Any, text: str, merges: dict) -> None:
    """Check ``encode(text, merges)``: what ``tl.BPETokenizer`` with these merges encodes."""
    text = str(text)
    merges = {(int(a), int(b)): int(v) for (a, b), v in merges.items()}
    got = call("encode", encode, text, merges)
    shown = repr(text) if len(text) <= 40 else repr(text[:37] + "...")
    what = f"encode({shown}, merges)"
    got = _expect_ids(got, what)
    tok = _library_tokenizer(merges)
    want = tok.encode(text)
    if got == want:
        return
    vocab = _vocab(merges)

    def leftmost_first() -> list[int]:
        out = []
        for word in _words(text):
            seq = list(word)
            while True:
                at = next((i for i in range(len(seq) - 1) if (seq[i], seq[i + 1]) in merges), None)
                if at is None:
                    break
                seq = seq[:at] + [merges[(seq[at], seq[at + 1])]] + seq[at + 2:]
            out += seq
        return out

    mistakes = {
        "merges were applied across word boundaries: the text was encoded as one sequence. Split it with "
        "pre_split and encode each word on its own, as the merges were learned": lambda: (
            _library_tokenizer(merges, pattern=None).encode(text)),
        "merges were applied to the leftmost pair first; apply them in the order learned, lowest new id "
        "first (with 'a'+'b' learned after 'b'+'c', 'abc' becomes 'a', 'bc')": leftmost_first,
    }
    for explanation, candidate in mistakes.items():
        try:
            wrong = candidate()
        except Exception:
            continue
        if got == wrong != want:
            raise AssertionError(f"{what} returned {got}, expected {want}\nHint: {explanation}")
    message = f"{what} returned {got}, expected {want}" if len(want) <= 30 else f"{what} is not right"
    if b"".join(vocab.get(i, b"?") for i in got) != text.encode("utf-8"):
        message += "; its tokens do not spell the text's UTF-8 bytes"
    else:
        message += ("; its tokens spell the text, but not as the merges cut it: apply the merges to each word "
                    "in the order learned until no pair of the word is in merges")
    raise AssertionError(message)


def _decode_mistakes(ids: list[int], vocab: dict[int, bytes]) -> dict[str, Callable[[], str]]:
    return {
        "each token was decoded on its own; a token can hold part of a character (the 2 or 3 bytes of 'é' "
        "or '日' may sit in different tokens), which alone is broken UTF-8. Join the bytes of all the tokens "
        "first, then decode once": lambda: "".join(vocab[i].decode("utf-8", errors="replace") for i in ids),
        "each byte was turned into the character with that number (chr(b), Latin-1); text is UTF-8: join "
        "the bytes and decode them with .decode('utf-8', errors='replace')": lambda: (
            "".join(chr(b) for i in ids for b in vocab[i])),
    }


def _decode_error_hint(message: str) -> str:
    if "UnicodeDecodeError" in message:
        return ("\nHint: a token (or a single byte) was decoded on its own; a token can hold part of a character, "
                "which alone is not valid UTF-8. Join the bytes of all the tokens first, then decode once with "
                ".decode('utf-8', errors='replace')")
    if "bytes must be in range(0, 256)" in message:
        return ("\nHint: ids from 256 up are merged tokens, not bytes: build each token's bytes from merges "
                "(vocab[new_id] = vocab[a] + vocab[b], in the order learned) and join those")
    return ""


def _decoded_text(name: str, answer: Any, what: str, *args: Any) -> str:
    """Call an answer that decodes (``decode``, or encode then decode) and return its str; an error it
    raises gets the hint for the classic decoding errors, what it returns must be a str."""
    try:
        got = call(name, _readable(answer), *args)
    except AssertionError as e:
        raise AssertionError(str(e) + _decode_error_hint(str(e))) from None
    return _expect_text(got, what)


def check_decode(decode: Any, ids: list[int], merges: dict) -> None:
    """Check ``decode(ids, merges)``: what ``tl.BPETokenizer`` with these merges decodes."""
    ids = [int(i) for i in ids]
    merges = {(int(a), int(b)): int(v) for (a, b), v in merges.items()}
    what = f"decode({ids if len(ids) <= 12 else 'ids'}, merges)"
    got = _decoded_text("decode", decode, what, ids, merges)
    want = _library_tokenizer(merges).decode(ids)
    if got == want:
        return
    for explanation, candidate in _decode_mistakes(ids, _vocab(merges)).items():
        if got == candidate() != want:
            raise AssertionError(f"{what} returned {got!r}, expected {want!r}\nHint: {explanation}")
    raise AssertionError(f"{what} returned {got!r}, expected {want!r}")


def check_round_trip(encode: Any, decode: Any, text: str, merges: dict) -> None:
    """Check ``decode(encode(text, merges), merges) == text`` for your own encode and decode."""
    text = str(text)
    merges = {(int(a), int(b)): int(v) for (a, b), v in merges.items()}
    if isinstance(encode, Replay) or isinstance(decode, Replay):
        both = Replay("round_trip", (encode if isinstance(encode, Replay) else decode).record_dir)
    else:
        for name, fn in (("encode", encode), ("decode", decode)):
            if not callable(fn):
                raise AssertionError(f"{name} is not defined: run the cell that defines it (keep the name {name})")

        def both(text: str, merges: dict) -> str:
            return decode(encode(text, merges), merges)

    shown = repr(text) if len(text) <= 40 else repr(text[:37] + "...")
    what = f"decode(encode({shown}, merges), merges)"
    got = _decoded_text("round_trip", both, what, text, merges)
    if got == text:
        return
    tok = _library_tokenizer(merges)
    ids = tok.encode(text)
    for explanation, candidate in _decode_mistakes(ids, _vocab(merges)).items():
        if got == candidate():
            raise AssertionError(f"{what} gave {got!r}, not the text {text!r}\nHint: {explanation}")
    raise AssertionError(f"{what} gave {got!r}, not the text {text!r}: decoding the encoding must give the "
                         "text back")
