"""Tests for transformer_lib.data (Vocab, batches, their sampler and masks), transformer_lib.tasks (the toy
tasks) and transformer_lib.text (text windows)."""

import pytest
import torch
from torch.utils.data import DataLoader, Sampler

import transformer_lib as tl
from transformer_lib.data import Batch, BucketBatchSampler, Vocab, make_batch, pad_sequences
from transformer_lib.tasks import Seq2SeqDataset, make_splits, make_task, number_to_words
from transformer_lib.text import TextBatch, TextDataset, make_text_batch, split_text

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
    with pytest.raises(ValueError, match=r"tokens.*vocabulary.*'q'"):
        v.encode(["a", "q"])
    with pytest.raises(TypeError, match="tokens.*one str"):
        v.encode("a")
    with pytest.raises(ValueError, match=r"ids.*\[0, 4\).*9"):
        v.decode([9])
    with pytest.raises(TypeError, match="tokens.*strings.*int"):
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
    with pytest.raises(ValueError, match=r"\bn\b.*999999.*1000000"):
        number_to_words(1_000_000)
    with pytest.raises(TypeError, match=r"\bn\b.*int.*float"):
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
    with pytest.raises(ValueError, match=r"name.*'copy'.*'numbers'.*'translate'"):
        make_task("translate", 10)
    with pytest.raises(ValueError, match="num_examples.*at most.*6 distinct.*7"):
        make_task("copy", 7, min_len=1, max_len=2, num_symbols=2)
    with pytest.raises(ValueError, match="num_examples.*100 distinct.*101"):
        make_task("numbers", 101, max_value=99)
    with pytest.raises(ValueError, match="min_len.*max_len.*4.*3"):
        make_task("copy", 5, min_len=4, max_len=3)
    with pytest.raises(ValueError, match="num_examples.*positive.*0"):
        make_task("copy", 0)


# --------------------------------------------------------------------------- batches


def test_pad_sequences():
    out = pad_sequences([[5, 6, 7], [8]], pad_id=0)
    assert out.tolist() == [[5, 6, 7], [8, 0, 0]] and out.dtype == torch.long
    assert pad_sequences([[1], [2, 3], []], pad_id=9).tolist() == [[1, 9], [2, 3], [9, 9]]
    assert pad_sequences([torch.tensor([4, 5])]).tolist() == [[4, 5]]
    with pytest.raises(ValueError, match="sequences.*at least one"):
        pad_sequences([])


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
    with pytest.raises(ValueError, match="pairs.*at least one"):
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
    with pytest.raises(ValueError, match="batch_size.*positive.*0"):
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


def test_loader_is_a_torch_dataloader_with_a_bucket_batch_sampler():
    ds = make_task("reverse", 230, seed=0, max_len=9)
    loader = ds.loader(32, seed=3, bucket=True)
    assert isinstance(loader, DataLoader) and isinstance(loader.batch_sampler, BucketBatchSampler)
    assert isinstance(loader.batch_sampler, Sampler) and loader.collate_fn is make_batch
    assert len(loader) == len(list(loader)) == 8  # 7 full batches and one of 6
    # the batches are the sampler's index lists, padded by make_batch
    pairs = ds.encoded()
    for indices, batch in zip(loader.batch_sampler, loader):
        expected = make_batch([pairs[i] for i in indices])
        assert torch.equal(batch.src, expected.src) and torch.equal(batch.tgt_out, expected.tgt_out)


def test_bucket_batch_sampler_is_seeded_and_covers_every_example_once():
    lengths = [(n % 7 + 1, n % 5 + 1) for n in range(203)]
    for bucket in (False, True):
        sampler = BucketBatchSampler(lengths, 20, shuffle=True, seed=11, bucket=bucket)
        first, again = list(sampler), list(sampler)
        assert first == again  # every pass over the sampler gives the same batches
        assert first == list(BucketBatchSampler(lengths, 20, shuffle=True, seed=11, bucket=bucket))
        assert first != list(BucketBatchSampler(lengths, 20, shuffle=True, seed=12, bucket=bucket))
        assert sorted(i for b in first for i in b) == list(range(203)) and len(first) == len(sampler) == 11
    in_order = list(BucketBatchSampler(lengths, 50, shuffle=False))
    assert in_order[0] == list(range(50)) and in_order[-1] == [200, 201, 202]
    bucketed = list(BucketBatchSampler(lengths, 20, shuffle=False, bucket=True))
    assert [lengths[i] for i in bucketed[0]] == sorted(lengths[i] for i in bucketed[0])
    with pytest.raises(TypeError, match="shuffle.*True or False.*int"):
        BucketBatchSampler(lengths, 20, shuffle=1)
    with pytest.raises(ValueError, match="batch_size.*positive.*-1"):
        BucketBatchSampler(lengths, -1)


# --------------------------------------------------------------------------- text for a language model


def test_text_dataset_windows_predict_the_next_token():
    ids = torch.arange(100) % 17
    data = TextDataset(ids, block_size=8)
    assert len(data) == 92  # windows start at 0 .. 91, the last one's target ends at id 99
    x, y = data[5]
    assert x.tolist() == ids[5:13].tolist() and y.tolist() == ids[6:14].tolist()
    assert data[91][1][-1].item() == ids[99].item()
    with pytest.raises(IndexError, match=r"i must be in \[0, 92\).*92"):
        data[92]
    batch = make_text_batch([data[0], data[3]])
    assert isinstance(batch, TextBatch) and len(batch) == 2 and batch.num_tokens == 16
    assert batch.tgt_in.shape == batch.tgt_out.shape == (2, 8)
    assert torch.equal(batch.tgt_in[:, 1:], batch.tgt_out[:, :-1])  # shifted by one position


def test_split_text_is_by_position():
    ids = torch.arange(1000)
    train, val = split_text(ids, block_size=16)
    assert torch.equal(train.ids, ids[:900]) and torch.equal(val.ids, ids[900:])
    # no window of one split holds a token of the other
    assert max(int(b.tgt_out.max()) for b in train.loader(64, 40, seed=0)) <= 899
    assert min(int(b.tgt_in.min()) for b in val.loader(64, 10, seed=0)) >= 900
    train, val = split_text(list(range(10, 110)), 4, train_fraction=0.75)
    assert train.ids.tolist() == list(range(10, 85)) and val.ids.tolist() == list(range(85, 110))
    with pytest.raises(ValueError, match=r"train_fraction.*\(0, 1\).*1.5"):
        split_text(ids, 16, train_fraction=1.5)


def test_random_windows_are_seeded():
    data = TextDataset(torch.arange(5000), block_size=32)
    loader = data.loader(12, num_batches=5, seed=7)
    assert isinstance(loader, DataLoader) and len(loader) == 5
    first = [b.tgt_in for b in loader]
    assert all(t.shape == (12, 32) for t in first)
    again = [b.tgt_in for b in data.loader(12, num_batches=5, seed=7)]
    other = [b.tgt_in for b in data.loader(12, num_batches=5, seed=8)]
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    assert not torch.equal(first[0], other[0])
    starts = torch.cat([t[:, 0] for t in first])
    assert len(set(starts.tolist())) > 50  # different windows, not one repeated
    assert all(torch.equal(t[:, 1:] - t[:, :-1], torch.ones(12, 31, dtype=torch.long)) for t in first)


def test_sequential_windows_cover_the_split_once():
    data = TextDataset(torch.arange(103), block_size=10)
    batches = list(data.sequential_loader(4))
    assert [len(b) for b in batches] == [4, 4, 2]
    starts = torch.cat([b.tgt_in[:, 0] for b in batches]).tolist()
    assert starts == list(range(0, 100, 10))  # non-overlapping; the last three tokens left out
    targets = torch.cat([b.tgt_out.flatten() for b in batches]).tolist()
    assert targets == list(range(1, 101))  # every token from the second on is predicted once


def test_text_dataset_errors_name_the_argument():
    with pytest.raises(ValueError, match="ids.*more than block_size=8.*8"):
        TextDataset(torch.arange(8), 8)
    with pytest.raises(TypeError, match="ids.*integer.*float"):
        TextDataset(torch.rand(20), 4)
    with pytest.raises(TypeError, match="ids.*str.*tokenizer"):
        TextDataset("some text", 4)
    with pytest.raises(TypeError, match="block_size.*positive.*float"):
        TextDataset(torch.arange(20), 4.0)
    with pytest.raises(ValueError, match="num_batches.*positive.*0"):
        TextDataset(torch.arange(20), 4).loader(2, 0)
    with pytest.raises(ValueError, match="windows.*at least one"):
        make_text_batch([])
