"""Tests for transformer_lib.data: Vocab, the toy tasks, batches and their masks."""

import pytest
import torch

import transformer_lib as tl
from transformer_lib.data import (
    Batch,
    Seq2SeqDataset,
    Vocab,
    make_batch,
    make_splits,
    make_task,
    number_to_words,
    pad_sequences,
)

# --------------------------------------------------------------------------- Vocab


def test_vocab_puts_pad_bos_eos_first():
    v = Vocab(["a", "b", "a", "c"])
    assert (v.pad_id, v.bos_id, v.eos_id) == (0, 1, 2)
    assert v.id_to_token[:3] == ["<pad>", "<bos>", "<eos>"]
    assert len(v) == 6 and v.tokens == ["a", "b", "c"]  # duplicates kept once
    assert "b" in v and "z" not in v
    assert v == Vocab(["a", "b", "c"]) and v != Vocab(["c", "b", "a"])


def test_vocab_encode_decode_round_trip():
    v = Vocab("x y z".split())
    ids = v.encode(["y", "z", "x"], add_bos=True, add_eos=True)
    assert ids == [1, 4, 5, 3, 2]
    assert v.decode(ids) == ["y", "z", "x"]
    assert v.decode(torch.tensor([4, 2, 5, 0])) == ["y"]  # stops at <eos>
    assert v.decode([4, 0, 0]) == ["y"]  # drops pads
    assert v.decode(ids, strip=False) == ["<bos>", "y", "z", "x", "<eos>"]


def test_vocab_errors_name_the_argument():
    v = Vocab(["a"])
    with pytest.raises(ValueError, match=r"tokens must be in the vocabulary, got unknown \['q'\]"):
        v.encode(["a", "q"])
    with pytest.raises(TypeError, match="tokens must be a sequence of token strings, got one str"):
        v.encode("a")
    with pytest.raises(ValueError, match=r"ids must be in \[0, 4\), got 9"):
        v.decode([9])
    with pytest.raises(TypeError, match="tokens must be strings, got int"):
        Vocab([1, 2])


# --------------------------------------------------------------------------- tasks


@pytest.mark.parametrize("n, words", [
    (0, "zero"), (7, "seven"), (13, "thirteen"), (40, "forty"), (99, "ninety nine"), (100, "one hundred"),
    (105, "one hundred five"), (1000, "one thousand"), (2005, "two thousand five"),
    (12345, "twelve thousand three hundred forty five"),
    (999999, "nine hundred ninety nine thousand nine hundred ninety nine"),
])  # fmt: skip
def test_number_to_words(n, words):
    assert " ".join(number_to_words(n)) == words


def test_number_to_words_errors():
    with pytest.raises(ValueError, match=r"n must be in \[0, 999999\], got 1000000"):
        number_to_words(1_000_000)
    with pytest.raises(TypeError, match="n must be an int, got float"):
        number_to_words(3.0)


@pytest.mark.parametrize("name, rule", [
    ("copy", lambda s: s),
    ("reverse", lambda s: s[::-1]),
    ("sort", lambda s: tuple(sorted(s, key=int))),
])  # fmt: skip
def test_sequence_tasks(name, rule):
    ds = make_task(name, 300, seed=3, min_len=2, max_len=9, num_symbols=7)
    assert isinstance(ds, Seq2SeqDataset) and len(ds) == 300 and ds.name == name
    assert ds.src_vocab is ds.tgt_vocab and ds.src_vocab.tokens == [str(i) for i in range(7)]
    for src, tgt in ds.pairs:
        assert 2 <= len(src) <= 9 and tgt == rule(src)
    assert len({s for s, _ in ds.pairs}) == 300  # distinct sources
    assert {len(s) for s, _ in ds.pairs} == set(range(2, 10))


def test_tasks_are_deterministic_from_the_seed():
    assert make_task("reverse", 50, seed=1).pairs == make_task("reverse", 50, seed=1).pairs
    assert make_task("reverse", 50, seed=1).pairs != make_task("reverse", 50, seed=2).pairs
    assert make_task("numbers", 50, seed=1).pairs == make_task("numbers", 50, seed=1).pairs


def test_numbers_task_is_translation_like():
    ds = make_task("numbers", 500, seed=0, max_value=99_999)
    assert ds.src_vocab != ds.tgt_vocab and "thousand" in ds.src_vocab and "7" in ds.tgt_vocab
    for words, digits in ds.pairs:
        n = int("".join(digits))
        assert 0 <= n <= 99_999 and tuple(number_to_words(n)) == words
    assert any(len(s) != len(t) for s, t in ds.pairs)  # lengths differ between the sides


def test_make_splits_are_disjoint():
    for name, options in [("reverse", {}), ("numbers", {"max_value": 999})]:
        train, test = make_splits(name, 600, 200, seed=0, **options)
        assert not {s for s, _ in train.pairs} & {s for s, _ in test.pairs}
        assert len(train) == 600 and len(test) == 200


def test_task_errors_name_the_argument():
    with pytest.raises(ValueError, match=r"name must be one of \['copy', 'reverse', 'sort', 'numbers'\]"):
        make_task("translate", 10)
    with pytest.raises(ValueError, match="num_examples must be at most the 6 distinct sequences"):
        make_task("copy", 7, min_len=1, max_len=2, num_symbols=2)
    with pytest.raises(ValueError, match="num_examples must be at most 100 distinct numbers"):
        make_task("numbers", 101, max_value=99)
    with pytest.raises(ValueError, match="min_len must be at most max_len"):
        make_task("copy", 5, min_len=4, max_len=3)
    with pytest.raises(ValueError, match="num_examples must be a positive integer, got 0"):
        make_task("copy", 0)


# --------------------------------------------------------------------------- batches


def test_pad_sequences():
    out = pad_sequences([[5, 6, 7], [8]], pad_id=0)
    assert out.tolist() == [[5, 6, 7], [8, 0, 0]] and out.dtype == torch.long


def test_make_batch_shifts_the_target_and_builds_the_masks():
    batch = make_batch([([5, 6, 7], [8, 9]), ([5], [7, 8, 9, 10])])
    assert isinstance(batch, Batch) and len(batch) == 2
    assert batch.src.tolist() == [[5, 6, 7], [5, 0, 0]]
    assert batch.tgt_in.tolist() == [[1, 8, 9, 0, 0], [1, 7, 8, 9, 10]]  # <bos> y
    assert batch.tgt_out.tolist() == [[8, 9, 2, 0, 0], [7, 8, 9, 10, 2]]  # y <eos>
    assert batch.num_tokens == 3 + 5
    torch.testing.assert_close(batch.src_mask, tl.padding_mask(batch.src, 0))
    assert batch.src_mask.shape == (2, 1, 1, 3)
    assert batch.tgt_mask.shape == (2, 1, 5, 5)
    expected = tl.causal_mask(5) & torch.tensor([True, True, True, False, False])
    assert torch.equal(batch.tgt_mask[0, 0], expected)
    assert torch.equal(batch.tgt_mask[1, 0], tl.causal_mask(5))
    with pytest.raises(ValueError, match="pairs must hold at least one"):
        make_batch([])


def test_dataset_batches_cover_every_example_once():
    ds = make_task("copy", 103, seed=0, max_len=5)
    batches = list(ds.batches(20, shuffle=True, seed=4))
    assert [len(b) for b in batches] == [20] * 5 + [3]
    seen = sorted(tuple(row[row != 0].tolist()) for b in batches for row in b.src)
    assert seen == sorted(tuple(ds.src_vocab.encode(s)) for s, _ in ds.pairs)
    again = list(ds.batches(20, shuffle=True, seed=4))
    assert all(torch.equal(a.src, b.src) for a, b in zip(batches, again))  # same seed, same order
    assert not torch.equal(next(ds.batches(20, seed=5)).src, batches[0].src)
    with pytest.raises(ValueError, match="batch_size must be a positive integer"):
        next(ds.batches(0))


def test_bucketed_batches_cover_every_example_once_with_less_padding():
    ds = make_task("reverse", 1000, seed=0, max_len=16)
    plain = list(ds.batches(50, seed=2))
    bucketed = list(ds.batches(50, seed=2, bucket=True))

    def examples(batches):
        return sorted(tuple(row[row != 0].tolist()) for b in batches for row in b.src)

    def pads(batches):
        return sum(int((b.src == 0).sum()) for b in batches)

    assert examples(bucketed) == examples(plain) and len(bucketed) == len(plain) == 20
    assert pads(bucketed) < 0.2 * pads(plain)
    assert len({b.src.shape[1] for b in bucketed}) > 5  # batches of different lengths, in shuffled order
    assert [b.src.shape[1] for b in bucketed] != sorted(b.src.shape[1] for b in bucketed)
