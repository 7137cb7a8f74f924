"""Tokenisers: character-level and byte-level BPE, checked by hand, by property and against `tokenizers`."""

from __future__ import annotations

import json
import time
from collections import Counter

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import transformer_lib as tl
from transformer_lib.resources import data_path
from transformer_lib.tokenizer import (
    GPT2_PATTERN,
    bytes_to_unicode,
    learn_merges,
    merge_pair,
    tokens_per_character,
)

SHAKESPEARE = data_path("tinyshakespeare", "input.txt")

# Sennrich et al. (2016)'s example dictionary: low 5, lower 2, newest 6, widest 3.
SENNRICH = " low" * 5 + " lower" * 2 + " newest" * 6 + " widest" * 3

# Text for the round-trip properties: English, accents, combining marks, emoji, CJK, NUL.
MIXED = (
    "First Citizen:\nBefore we proceed any further, hear me speak.\n\n"
    "Café, naïve, cafe\u0301; Ærøskøbing;日本語のテキスト; emoji 👋🏽 👨‍👩‍👧 and \x00 NUL, "
    "tabs\tand  double  spaces, digits 12345 67, contractions don't we'll they're.\n"
) * 3


def shakespeare_text() -> str:
    """The tiny Shakespeare corpus shipped with the library (transformer_lib/data)."""
    return SHAKESPEARE.read_text(encoding="utf-8")


def replace_pair(ids: tuple[int, ...], pair: tuple[int, int], new_id: int) -> tuple[int, ...]:
    """Every ``pair`` in ``ids``, left to right, replaced by ``new_id``."""
    out, i = [], 0
    while i < len(ids):
        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return tuple(out)


def naive_merges(word_counts: dict[tuple[int, ...], int], num_merges: int) -> list[tuple[tuple[int, int], int]]:
    """Textbook BPE: recount every pair after every merge (slow, obviously right)."""
    words = {tuple(w): c for w, c in word_counts.items()}
    history = []
    for k in range(num_merges):
        counts: Counter = Counter()
        for w, c in words.items():
            for pair in zip(w, w[1:]):
                counts[pair] += c
        if not counts:
            break
        pair, count = min(counts.items(), key=lambda item: (-item[1], item[0]))
        history.append((pair, count))
        merged: Counter = Counter()
        for w, c in words.items():
            merged[replace_pair(w, pair, 256 + k)] += c
        words = dict(merged)
    return history


@pytest.fixture(scope="module")
def mixed_bpe() -> tl.BPETokenizer:
    return tl.BPETokenizer().train(MIXED, 400)


# --- CharTokenizer ---------------------------------------------------------------------------


def test_char_vocabulary_is_sorted_distinct_characters():
    tok = tl.CharTokenizer().train("hello")
    assert tok.chars == ["e", "h", "l", "o"]
    assert tok.vocab_size == 4
    assert tok.encode("hello") == [1, 0, 2, 2, 3]
    assert tok.decode([1, 0, 2, 2, 3]) == "hello"
    assert tok.decode(np.array([3, 0])) == "oe"
    assert tok.decode(torch.tensor([2, 3])) == "lo"
    assert tok.token_strings([0, 3]) == ["e", "o"]


@settings(max_examples=60, deadline=None)
@given(st.text(min_size=1))
def test_char_round_trip(text):
    tok = tl.CharTokenizer().train(text)
    ids = tok.encode(text)
    assert len(ids) == len(text)
    assert tok.decode(ids) == text


def test_char_errors_name_the_argument():
    tok = tl.CharTokenizer().train("abc")
    with pytest.raises(ValueError, match=r"text.*'x'.*position 2.*not in the vocabulary"):
        tok.encode("abx")
    with pytest.raises(ValueError, match=r"ids must be in \[0, 3\), got 3"):
        tok.decode([0, 3])
    with pytest.raises(TypeError, match="ids must hold integers"):
        tok.decode([0.0])
    with pytest.raises(ValueError, match="ids must be one-dimensional"):
        tok.decode(np.zeros((2, 2), dtype=int))
    with pytest.raises(TypeError, match="text must be a str, got bytes"):
        tok.encode(b"abc")
    with pytest.raises(ValueError, match="text must not be empty"):
        tl.CharTokenizer().train("")
    with pytest.raises(RuntimeError, match=r"call train\(text\) first"):
        tl.CharTokenizer().encode("a")
    with pytest.raises(ValueError, match="chars must not repeat"):
        tl.CharTokenizer(["a", "a"])


def test_char_save_load(tmp_path):
    tok = tl.CharTokenizer().train("To be, or not to be: that is the question.\n")
    tok.save(tmp_path / "char.json")
    again = tl.CharTokenizer.load(tmp_path / "char.json")
    assert again == tok and again.encode("be not") == tok.encode("be not")
    assert again != tl.CharTokenizer().train("other")
    with pytest.raises(ValueError, match="path must be a BPETokenizer file"):
        tl.BPETokenizer.load(tmp_path / "char.json")


# --- merge_pair: one merge -------------------------------------------------------------------


def test_merge_pair_replaces_each_occurrence_left_to_right():
    assert merge_pair([97, 98, 99, 97, 98], (97, 98), 256) == [256, 99, 256]
    # a symbol joins one merge at most: "a a a" is [new, a], not [new, new] nor [a, new]
    assert merge_pair([97, 97, 97], (97, 97), 256) == [256, 97]
    assert merge_pair([97, 97, 97, 97], (97, 97), 256) == [256, 256]
    assert merge_pair([], (1, 2), 3) == [] and merge_pair([5, 6], (6, 5), 7) == [5, 6]
    ids = [1, 2, 1, 2]
    assert merge_pair(np.array(ids), (1, 2), 300) == merge_pair(torch.tensor(ids), (1, 2), 300) == [300, 300]
    assert ids == [1, 2, 1, 2]  # the input is not changed


def test_merge_pair_errors_name_the_argument():
    with pytest.raises(TypeError, match=r"ids must hold integers.*float 1.5"):
        merge_pair([1, 1.5], (1, 2), 3)
    with pytest.raises(ValueError, match=r"ids must be non-negative.*-1"):
        merge_pair([1, -1], (1, 2), 3)
    with pytest.raises(TypeError, match=r"pair must be a tuple of two token ids.*\(1, 2, 3\)"):
        merge_pair([1, 2], (1, 2, 3), 4)
    with pytest.raises(TypeError, match=r"pair\[1\] must be a non-negative int token id.*str"):
        merge_pair([1, 2], (1, "b"), 4)
    with pytest.raises(TypeError, match=r"new_id must be a non-negative int token id.*-4"):
        merge_pair([1, 2], (1, 2), -4)


# --- learn_merges: the training loop ----------------------------------------------------------


def test_learn_merges_counts_every_adjacent_position():
    # "a a a a" holds the pair (a, a) three times; after merging, (aa, aa) once.
    assert learn_merges({(7, 7, 7, 7): 1}, 2) == [((7, 7), 3), ((256, 256), 1)]
    # word counts weigh the pairs
    assert learn_merges({(1, 2): 5, (2, 1): 4}, 1) == [((1, 2), 5)]


def test_learn_merges_breaks_ties_by_smallest_pair_whatever_the_order():
    words = {(5, 6): 2, (1, 2): 2, (3, 4): 2, (1, 9): 2}
    expected = [((1, 2), 2), ((1, 9), 2), ((3, 4), 2), ((5, 6), 2)]
    assert learn_merges(words, 4) == expected
    assert learn_merges(dict(reversed(list(words.items()))), 4) == expected


def test_learn_merges_stops_when_no_pair_is_left():
    assert learn_merges({(1, 2): 3}, 5) == [((1, 2), 3)]
    assert learn_merges({(1, 2): 3}, 0) == []
    with pytest.raises(ValueError, match="num_merges must be a non-negative integer, got -1"):
        learn_merges({(1, 2): 3}, -1)
    with pytest.raises(TypeError, match="word_counts must be a mapping"):
        learn_merges([(1, 2)], 1)
    with pytest.raises(ValueError, match=r"word_counts must map each word to a positive integer count, got 0"):
        learn_merges({(1, 2): 0}, 1)


@settings(max_examples=80, deadline=None)
@given(
    st.dictionaries(
        st.lists(st.integers(0, 5), min_size=1, max_size=12).map(tuple), st.integers(1, 9), max_size=12
    ),
    st.integers(0, 30),
)
def test_learn_merges_equals_recounting_from_scratch(word_counts, num_merges):
    # The incremental updates (pair index, deltas, lazy heap) give what recounting every pair
    # after every merge gives, merge for merge and count for count.
    assert learn_merges(word_counts, num_merges) == naive_merges(word_counts, num_merges)


# --- BPETokenizer ------------------------------------------------------------------------------


def test_bpe_first_merges_on_sennrich_example_by_hand():
    # Pairs: (e,s) 6+3 = 9 and (s,t) 9 tie, 'e' = 101 < 's' = 115 wins; then (es,t) 9; then three
    # pairs at 7: (' ',l) (l,o) (o,w), smallest first: (32,108); then (258,o) 7 vs (o,w) 7:
    # (111,119) < (258,111); then (' l', 'ow') 7; then four at 6, (' ', 'n') the smallest.
    tok = tl.BPETokenizer().train(SENNRICH, 262)
    assert tok.history == [
        ((101, 115), 9),
        ((256, 116), 9),
        ((32, 108), 7),
        ((111, 119), 7),
        ((258, 259), 7),
        ((32, 110), 6),
    ]
    assert tok.token_strings(range(256, 262)) == ["es", "est", " l", "ow", " low", " n"]
    assert tok.merges == {pair: 256 + k for k, (pair, _) in enumerate(tok.history)}
    assert tok.vocab[260] == b" low" and tok.vocab_size == 262
    # " lowest" never occurred, but its pieces did: ' low' + 'est'
    assert tok.encode(" lowest") == [260, 257]
    assert tok.encode(" newer") == [261, 101, 119, 101, 114]


def test_bpe_encode_applies_merges_in_the_order_learned():
    tok = tl.BPETokenizer().train("ab,ab,ab,bc,bc", 258)
    assert tok.history == [((97, 98), 3), ((98, 99), 2)]
    assert tok.encode("abc") == [256, 99]  # 'ab' was learned first, so 'b' is taken before 'bc' can be
    assert tok.encode("bcab") == [257, 256]


@settings(max_examples=100, deadline=None)
@given(st.text(alphabet=st.sampled_from(sorted(set(MIXED))), max_size=60))
def test_bpe_encode_equals_replaying_every_merge(mixed_bpe, text):
    # GPT-2's loop (merge the lowest-ranked pair present, repeat) equals applying every merge in
    # turn to each word, the definition.
    expected: list[int] = []
    for word in mixed_bpe.pre_tokenize(text):
        ids = tuple(word.encode("utf-8"))
        for pair, new_id in mixed_bpe.merges.items():
            ids = replace_pair(ids, pair, new_id)
        expected += ids
    assert mixed_bpe.encode(text) == expected


def test_bpe_verbose_prints_each_merge(capsys):
    tl.BPETokenizer().train(SENNRICH, 259, verbose=True)
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        "merge 1/3: 'e' + 's' -> 'es' (id 256, 9 times)",
        "merge 2/3: 'es' + 't' -> 'est' (id 257, 9 times)",
        "merge 3/3: ' ' + 'l' -> ' l' (id 258, 7 times)",
    ]


def test_bpe_merges_stay_inside_words():
    # GPT-2's pattern: a word takes one leading space; of a run of spaces the last goes to the word
    tok = tl.BPETokenizer()
    assert tok.pre_tokenize("ab ab  ab\n\nx") == ["ab", " ab", " ", " ab", "\n", "\n", "x"]
    tok.train("ab ab ab ab", 258)
    assert tok.token_strings(range(256, 258)) == ["ab", " ab"]
    # without a pattern the text is one word and merges span the spaces
    whole = tl.BPETokenizer(pattern=None).train("ab ab ab ab", 261)
    assert whole.token_strings(range(256, 261)) == ["ab", " ab", " ab ab", "ab ab ab", "ab ab ab ab"]


@settings(max_examples=150, deadline=None)
@given(st.text())
def test_bpe_round_trips_every_string(mixed_bpe, text):
    ids = mixed_bpe.encode(text)
    assert mixed_bpe.decode(ids, errors="strict") == text
    assert len(ids) <= len(text.encode("utf-8"))


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=40))
def test_bpe_without_pattern_round_trips(text):
    tok = tl.BPETokenizer(pattern=None).train(text + MIXED[:200], 300)
    assert tok.decode(tok.encode(text), errors="strict") == text


def test_bpe_round_trips_hard_cases(mixed_bpe):
    for text in ["", "\x00", "\x00\x00a", "e\u0301\u0301", "👨‍👩‍👧", "\U0010ffff", "\ufeff", " \n \t ", MIXED]:
        assert mixed_bpe.decode(mixed_bpe.encode(text), errors="strict") == text
    assert len(mixed_bpe.encode(MIXED)) < len(MIXED.encode("utf-8")) / 2  # the merges were learned


def test_bpe_lone_surrogate_is_refused():
    tok = tl.BPETokenizer().train("abc", 257)
    with pytest.raises(ValueError, match=r"text contains a lone surrogate '\\ud800' at position 2"):
        tok.encode("ab\ud800")
    with pytest.raises(ValueError, match="text contains a lone surrogate"):
        tl.BPETokenizer().train("x\udfff", 260)


def test_bpe_decode_of_a_partial_character():
    tok = tl.BPETokenizer().train("abc", 256)
    ids = tok.encode("€")  # three bytes, no merges
    assert ids == [0xE2, 0x82, 0xAC]
    assert tok.decode(ids[:2]) == "\ufffd"
    assert tok.token_strings(ids[:1]) == ["\\xe2"]
    with pytest.raises(UnicodeDecodeError):
        tok.decode(ids[:2], errors="strict")


def test_bpe_errors_name_the_argument():
    with pytest.raises(ValueError, match="vocab_size must be at least 256.*got 100"):
        tl.BPETokenizer().train("abc", 100)
    with pytest.raises(TypeError, match="vocab_size must be a positive integer"):
        tl.BPETokenizer().train("abc", 300.0)
    with pytest.raises(TypeError, match="text must be a str, got list"):
        tl.BPETokenizer().train(["abc"], 300)
    with pytest.raises(ValueError, match="pattern must be a valid regular expression"):
        tl.BPETokenizer(pattern="(")
    with pytest.raises(ValueError, match="pattern must match every character.*covering 4 of 5"):
        tl.BPETokenizer(pattern=r"\w+").encode("ab cd")
    tok = tl.BPETokenizer().train("abcabc", 258)
    with pytest.raises(ValueError, match=r"ids must be in \[0, 258\), got 258 at position 1"):
        tok.decode([1, 258])
    with pytest.warns(UserWarning, match="vocab_size 300 not reached.*after 1 merges"):
        short = tl.BPETokenizer().train("ab", 300)
    assert short.vocab_size == 257


def test_bpe_is_deterministic_and_saves(tmp_path, mixed_bpe):
    again = tl.BPETokenizer().train(MIXED, 400)
    assert again == mixed_bpe and again.history == mixed_bpe.history
    mixed_bpe.save(tmp_path / "bpe.json")
    loaded = tl.BPETokenizer.load(tmp_path / "bpe.json")
    assert loaded == mixed_bpe and loaded.vocab == mixed_bpe.vocab
    assert loaded.encode(MIXED) == mixed_bpe.encode(MIXED)
    assert loaded != tl.BPETokenizer(pattern=None).train(MIXED, 400)
    state = json.loads((tmp_path / "bpe.json").read_text())
    state["merges"][0][0] = 400  # an id made after the merge that uses it
    (tmp_path / "bad.json").write_text(json.dumps(state))
    with pytest.raises(ValueError, match="merges must only use ids made before them"):
        tl.BPETokenizer.load(tmp_path / "bad.json")


def test_tokens_per_character():
    text = "to be or not to be"
    assert tokens_per_character(tl.CharTokenizer().train(text), text) == 1.0
    tok = tl.BPETokenizer().train(text, 265)
    assert tokens_per_character(tok, text) == len(tok.encode(text)) / len(text) < 0.5
    with pytest.raises(ValueError, match="text must not be empty"):
        tokens_per_character(tok, "")


# --- against Hugging Face tokenizers ---------------------------------------------------------


def hf_byte_level_bpe(text: str, vocab_size: int):
    """A byte-level BPE trained by `tokenizers` the way GPT-2's is, with nothing downloaded."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[],
        show_progress=False,
    )
    tok.train_from_iterator([text], trainer=trainer)
    return tok


def hf_merges_as_bytes(tok) -> list[tuple[bytes, bytes]]:
    """The merge list of a `tokenizers` BPE, each side as the bytes it stands for."""
    to_byte = {c: b for b, c in bytes_to_unicode().items()}
    merges = json.loads(tok.to_str())["model"]["merges"]
    pairs = [m.split(" ") if isinstance(m, str) else m for m in merges]
    return [(bytes(to_byte[c] for c in a), bytes(to_byte[c] for c in b)) for a, b in pairs]


def merges_with_byte_level_ids(text: str, vocab_size: int) -> list[tuple[bytes, bytes]]:
    """Our merges when the bytes are numbered as ``tokenizers`` numbers them (by stand-in character)."""
    byte_of_id = sorted(range(256), key=lambda b: bytes_to_unicode()[b])
    id_of_byte = {b: i for i, b in enumerate(byte_of_id)}
    words = Counter(w.encode("utf-8") for w in tl.BPETokenizer().pre_tokenize(text))
    history = learn_merges({tuple(id_of_byte[b] for b in w): c for w, c in words.items()}, vocab_size - 256)
    spelled = {i: bytes([b]) for i, b in enumerate(byte_of_id)}
    merges = []
    for k, ((a, b), _) in enumerate(history):
        spelled[256 + k] = spelled[a] + spelled[b]
        merges.append((spelled[a], spelled[b]))
    return merges


def test_tie_breaking_is_the_difference_with_tokenizers():
    # Sennrich's example: after 'es' and 'est' (9 each), three pairs tie at 7. Here space (32)
    # is the smallest id, so ' ' + 'l' comes first; tokenizers numbers space after the letters
    # (its stand-in is U+0120) and takes 'l' + 'o'. Numbered its way, ours learns its merges.
    ours = tl.BPETokenizer().train(SENNRICH, 266)
    ours_merges = [(ours.vocab[a], ours.vocab[b]) for (a, b), _ in ours.history]
    theirs_merges = hf_merges_as_bytes(hf_byte_level_bpe(SENNRICH, 266))
    assert ours_merges[:2] == theirs_merges[:2] == [(b"e", b"s"), (b"es", b"t")]
    assert ours_merges[2] == (b" ", b"l") and theirs_merges[2] == (b"l", b"o")
    assert merges_with_byte_level_ids(SENNRICH, 266) == theirs_merges


def test_bytes_to_unicode_is_byte_levels_alphabet():
    from tokenizers import pre_tokenizers

    mapping = bytes_to_unicode()
    assert sorted(mapping.values()) == sorted(pre_tokenizers.ByteLevel.alphabet())
    assert mapping[ord(" ")] == "Ġ" and mapping[ord("\n")] == "Ċ" and mapping[ord("a")] == "a"
    # the stand-in of each ASCII byte is what ByteLevel writes for it
    pre = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    ascii_text = "".join(chr(b) for b in range(128))
    assert pre.pre_tokenize_str(ascii_text)[0][0] == "".join(mapping[b] for b in range(128))


def test_pre_tokenisation_splits_like_byte_level():
    from tokenizers import pre_tokenizers

    to_byte = {c: b for b, c in bytes_to_unicode().items()}
    pre = pre_tokenizers.ByteLevel(add_prefix_space=False)
    text = "Hello,  world!\n\n  It's 2024: naïve café's 3.14 \tdon't  "
    theirs = [bytes(to_byte[c] for c in w).decode("utf-8") for w, _ in pre.pre_tokenize_str(text)]
    assert tl.BPETokenizer(GPT2_PATTERN).pre_tokenize(text) == theirs


def test_bpe_on_tiny_shakespeare_matches_tokenizers():
    text = shakespeare_text()
    start = time.perf_counter()
    ours = tl.BPETokenizer().train(text, 512)
    train_seconds = time.perf_counter() - start
    assert train_seconds < 20, f"training to 512 tokens took {train_seconds:.1f} s"
    theirs = hf_byte_level_bpe(text, 512)
    assert theirs.get_vocab_size() == ours.vocab_size == 512

    # tokens per character within 2% (here identical)
    ours_ids = ours.encode(text)
    theirs_ids = theirs.encode(text).ids
    assert ours.decode(ours_ids) == text and theirs.decode(theirs_ids) == text
    assert abs(len(ours_ids) - len(theirs_ids)) <= 0.02 * len(theirs_ids)

    # the merge lists agree up to the first tie that the two id orders break differently
    ours_merges = [(ours.vocab[a], ours.vocab[b]) for (a, b), _ in ours.history]
    theirs_merges = hf_merges_as_bytes(theirs)
    first = next(k for k, (x, y) in enumerate(zip(ours_merges, theirs_merges)) if x != y)
    assert first == 182
    assert ours_merges[first] == (b" ", b"'") and theirs_merges[first] == (b"E", b"T")
    assert ours.history[first][1] == ours.history[first + 1][1] == 628  # a tie
    assert ours_merges[first + 1] == theirs_merges[first]
    assert set(ours_merges) == set(theirs_merges)

    # numbering the bytes in ByteLevel's order (by stand-in character) reproduces its merges exactly
    assert merges_with_byte_level_ids(text, 512) == theirs_merges


# ---------------------------------------------------------------- special tokens
EOT = "<|endoftext|>"


def _with_eot(vocab_size=266):
    text = ("the cat sat" + EOT + "the dog ran" + EOT) * 30
    return tl.BPETokenizer(special_tokens=[EOT]).train(text, vocab_size), text


def test_special_token_has_the_last_id_and_no_merge_makes_it():
    tok, text = _with_eot()
    assert tok.vocab_size == 266 and tok.special_ids == {EOT: 265} and len(tok.merges) == 9
    # merges are learned between the special tokens: none spells a piece of "<|endoftext|>"
    assert all(b"|" not in tok.vocab[i] and b"<" not in tok.vocab[i] for i in range(256, 265))
    ordinary = tl.BPETokenizer().train(text, 265)
    assert any(b"|" in ordinary.vocab[i] for i in range(256, 265))  # without it, they would


def test_allowed_special_gives_the_reserved_id_never_split():
    tok, _ = _with_eot()
    ids = tok.encode("the cat" + EOT + "the dog", allowed_special={EOT})
    assert ids.count(265) == 1 and tok.decode(ids) == "the cat" + EOT + "the dog"
    assert tok.encode(EOT + EOT, allowed_special="all") == [265, 265]
    # written in text that is not allowed to hold it: bytes, never the id
    plain = tok.encode(EOT, disallowed_special=())
    assert 265 not in plain and tok.decode(plain) == EOT and len(plain) > 1


def test_disallowed_special_is_refused_by_default_with_a_clear_error():
    tok, _ = _with_eot()
    with pytest.raises(ValueError, match=r"special token '<\|endoftext\|>' at position 3.*allowed_special"):
        tok.encode("hi " + EOT)
    with pytest.raises(ValueError, match="allowed_special must hold only"):
        tok.encode("hi", allowed_special={"<|pad|>"})
    with pytest.raises(ValueError, match='disallowed_special must be "all"'):
        tok.encode("hi", disallowed_special="none")
    with pytest.raises(ValueError, match="vocab_size must be at least 257"):
        tl.BPETokenizer(special_tokens=[EOT]).train("abc", 256)
    with pytest.raises(ValueError, match="special_tokens must be distinct"):
        tl.BPETokenizer(special_tokens=[EOT, EOT])
    with pytest.raises(TypeError, match="special_tokens must be a list of strings"):
        tl.BPETokenizer(special_tokens=EOT)


def test_special_tokens_survive_save_and_load(tmp_path):
    tok, _ = _with_eot()
    tok.save(tmp_path / "t.json")
    back = tl.BPETokenizer.load(tmp_path / "t.json")
    assert back == tok and back.special_ids == tok.special_ids
    same_merges = tl.BPETokenizer()
    same_merges._set_history(tok.history)
    assert same_merges != tok  # the special tokens are part of the tokeniser


def test_gpt4_pattern_splits_as_cl100k():
    from transformer_lib.tokenizer import GPT4_PATTERN

    gpt4 = tl.BPETokenizer(GPT4_PATTERN)
    assert gpt4.pre_tokenize("I'LL pay 1234567!!!\n\n  ok") == [
        "I", "'LL", " pay", " ", "123", "456", "7", "!!!\n\n", " ", " ok"]
    assert tl.BPETokenizer().pre_tokenize("I'LL pay 1234567") == ["I", "'", "LL", " pay", " 1234567"]
