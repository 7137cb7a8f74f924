"""The toy sequence-to-sequence tasks, generated in code, and the dataset that holds them.

Every task is deterministic from its seed, so a chapter, a test and a benchmark see the
same data:

* ``"copy"``: ``3 1 4 1 5`` -> ``3 1 4 1 5``;
* ``"reverse"``: ``3 1 4 1 5`` -> ``5 1 4 1 3`` (the UvA deep-learning tutorial's task);
* ``"sort"``: ``3 1 4 1 5`` -> ``1 1 3 4 5``;
* ``"numbers"``: a translation-like task with different source and target vocabularies
  and lengths, numbers written in English words into digits:
  ``two thousand five`` -> ``2 0 0 5`` (American style, without "and").

:func:`make_task` generates one, :func:`make_splits` a training set and a held-out set with
no source in common; a :class:`Seq2SeqDataset` gives its pairs as ids or as padded
:class:`~transformer_lib.data.Batch` es. Taught in chapter 11 (first used in chapter 10).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
from torch.utils.data import DataLoader

from . import _checks
from .data import Batch, BucketBatchSampler, Vocab, make_batch

_ONES = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
         "fifteen sixteen seventeen eighteen nineteen").split()  # fmt: skip
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()
NUMBER_WORDS = (*_ONES, *_TENS[2:], "hundred", "thousand")


def number_to_words(n: int) -> list[str]:
    """An integer in [0, 999999] written in English words, e.g. ``2005 -> ['two', 'thousand', 'five']``."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise TypeError(f"n must be an int, got {type(n).__name__} {n!r}")
    if not 0 <= n <= 999_999:
        raise ValueError(f"n must be in [0, 999999], got {n}")
    n = int(n)
    if n == 0:
        return ["zero"]

    def below_thousand(k: int) -> list[str]:
        words = []
        if k >= 100:
            words += [_ONES[k // 100], "hundred"]
            k %= 100
        if k >= 20:
            words.append(_TENS[k // 10])
            k %= 10
        if k:
            words.append(_ONES[k])
        return words

    thousands, rest = divmod(n, 1000)
    return (below_thousand(thousands) + ["thousand"] if thousands else []) + below_thousand(rest)


def _symbols(num_symbols: int) -> list[str]:
    return [str(i) for i in range(num_symbols)]


def _sequence_source(
    rng: np.random.Generator, min_len: int, max_len: int, num_symbols: int
) -> tuple[str, ...]:
    length = int(rng.integers(min_len, max_len + 1))
    return tuple(str(s) for s in rng.integers(0, num_symbols, size=length))


def _make_target(task: str, src: tuple[str, ...]) -> tuple[str, ...]:
    if task == "copy":
        return src
    if task == "reverse":
        return src[::-1]
    return tuple(sorted(src, key=int))  # "sort"


TASKS = ("copy", "reverse", "sort", "numbers")


@dataclass
class Seq2SeqDataset:
    """Source-target pairs of tokens with their two vocabularies.

    Attributes:
        name: the task's name.
        pairs: ``[(source tokens, target tokens), ...]``, tuples of strings.
        src_vocab, tgt_vocab: the :class:`Vocab` of each side (the same object when the
            task uses one vocabulary).

    ``len(ds)``, ``ds[i]``, ``ds.encoded()`` (id lists), ``ds.loader(batch_size)`` (a
    ``DataLoader`` of :class:`Batch` es) and ``ds.batches(batch_size)`` (one pass of it).
    """

    name: str
    pairs: list[tuple[tuple[str, ...], tuple[str, ...]]]
    src_vocab: Vocab
    tgt_vocab: Vocab

    def __len__(self) -> int:
        return len(self.pairs)

    def __getitem__(self, i: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
        return self.pairs[i]

    def __repr__(self) -> str:
        return (f"Seq2SeqDataset({self.name!r}, {len(self)} pairs, src vocab {len(self.src_vocab)}, "
                f"tgt vocab {len(self.tgt_vocab)})")  # fmt: skip

    @property
    def max_src_len(self) -> int:
        return max(len(s) for s, _ in self.pairs)

    @property
    def max_tgt_len(self) -> int:
        return max(len(t) for _, t in self.pairs)

    def encoded(self) -> list[tuple[list[int], list[int]]]:
        """Every pair as ``(source ids, target ids)``, without specials."""
        if getattr(self, "_encoded", None) is None or len(self._encoded) != len(self.pairs):
            self._encoded = [(self.src_vocab.encode(s), self.tgt_vocab.encode(t)) for s, t in self.pairs]
        return self._encoded

    def loader(
        self, batch_size: int, shuffle: bool = True, seed: int | None = 0, bucket: bool = False
    ) -> DataLoader:
        """A ``torch.utils.data.DataLoader`` for one pass over the data in padded :class:`Batch` es.

        Args:
            batch_size: examples per batch (the last one may be smaller).
            shuffle: visit the examples in a random order (deterministic from ``seed``).
            seed: the shuffling seed; iterating the loader again gives the same batches.
            bucket: put examples of similar length together (within windows of 50
                batches, in shuffled batch order), so less of each batch is padding.

        The :class:`BucketBatchSampler` picks each batch's examples, :func:`make_batch`
        pads them (the collate function). Taught in chapter 11.
        """
        pairs = self.encoded()
        sampler = BucketBatchSampler([(len(s), len(t)) for s, t in pairs], batch_size, shuffle, seed, bucket)
        return DataLoader(pairs, batch_sampler=sampler, collate_fn=make_batch)

    def batches(
        self, batch_size: int, shuffle: bool = True, seed: int | None = 0, bucket: bool = False
    ) -> Iterator[Batch]:
        """One pass over the data in padded :class:`Batch` es: ``iter(self.loader(...))``, same arguments."""
        return iter(self.loader(batch_size, shuffle, seed, bucket))


def make_task(
    name: str,
    num_examples: int,
    seed: int = 0,
    *,
    min_len: int = 1,
    max_len: int = 16,
    num_symbols: int = 10,
    max_value: int = 9999,
    exclude: Iterable[Sequence[str]] = (),
) -> Seq2SeqDataset:
    """Generate ``num_examples`` distinct examples of a toy task, deterministically from ``seed``.

    Args:
        name: ``"copy"``, ``"reverse"``, ``"sort"`` or ``"numbers"``.
        num_examples: how many pairs; the sources are all different.
        seed: the random seed.
        min_len, max_len, num_symbols: sequence lengths and alphabet (symbols ``"0"``,
            ``"1"``, ...) of the copy, reverse and sort tasks.
        max_value: the largest number of the ``"numbers"`` task (at most 999999).
        exclude: sources that must not appear (pass a training set's sources to build a
            held-out set).

    Returns:
        a :class:`Seq2SeqDataset`. Taught in chapter 11.
    """
    name = _task_name(name)
    num_examples = _checks.positive_int(num_examples, "num_examples")
    rng = np.random.default_rng(seed)
    taken = {tuple(s) for s in exclude}
    if name == "numbers":
        max_value = _checks.positive_int(max_value, "max_value")
        if max_value > 999_999:
            raise ValueError(f"max_value must be at most 999999, got {max_value}")
        candidates = [tuple(number_to_words(int(v))) for v in rng.permutation(max_value + 1)]
        sources = [s for s in candidates if s not in taken][:num_examples]
        if len(sources) < num_examples:
            raise ValueError(f"num_examples must be at most {len(sources)} distinct numbers up to "
                             f"max_value={max_value} (after exclude), got {num_examples}")  # fmt: skip
        pairs = [(s, tuple(str(_words_to_number(s)))) for s in sources]
        return Seq2SeqDataset(name, pairs, Vocab(NUMBER_WORDS), Vocab(_symbols(10)))
    min_len = _checks.positive_int(min_len, "min_len")
    max_len = _checks.positive_int(max_len, "max_len")
    num_symbols = _checks.positive_int(num_symbols, "num_symbols")
    if min_len > max_len:
        raise ValueError(f"min_len must be at most max_len, got min_len={min_len} and max_len={max_len}")
    possible = sum(num_symbols**n for n in range(min_len, max_len + 1)) - len(taken)
    if num_examples > possible:
        raise ValueError(
            f"num_examples must be at most the {possible} distinct sequences possible, got {num_examples}"
        )
    pairs, seen = [], set(taken)
    while len(pairs) < num_examples:
        src = _sequence_source(rng, min_len, max_len, num_symbols)
        if src not in seen:
            seen.add(src)
            pairs.append((src, _make_target(name, src)))
    vocab = Vocab(_symbols(num_symbols))
    return Seq2SeqDataset(name, pairs, vocab, vocab)


def make_splits(
    name: str, num_train: int, num_test: int, seed: int = 0, **options
) -> tuple[Seq2SeqDataset, ...]:
    """A training set and a held-out test set of a task with no source in common.

    ``options`` are those of :func:`make_task`. Returns ``(train, test)``.
    """
    train = make_task(name, num_train, seed, **options)
    test = make_task(name, num_test, seed + 1_000_003, exclude=[s for s, _ in train.pairs], **options)
    return train, test


def _task_name(name: object) -> str:
    if not isinstance(name, str):
        raise TypeError(f"name must be one of {list(TASKS)}, got {type(name).__name__} {name!r}")
    if name not in TASKS:
        raise ValueError(f"name must be one of {list(TASKS)}, got {name!r}")
    return name


def _words_to_number(words: Sequence[str]) -> int:
    total, current = 0, 0
    for w in words:
        if w == "thousand":
            total, current = (current or 1) * 1000, 0
        elif w == "hundred":
            current *= 100
        elif w in _TENS:
            current += 10 * _TENS.index(w)
        else:
            current += _ONES.index(w)
    return total + current
