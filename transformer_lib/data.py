"""Toy sequence-to-sequence tasks, a small vocabulary class, batches with their masks, and text
cut into windows for a language model.

Every task is generated in code and is deterministic from its seed, so a chapter, a test
and a benchmark see the same data:

* ``"copy"``: ``3 1 4 1 5`` -> ``3 1 4 1 5``;
* ``"reverse"``: ``3 1 4 1 5`` -> ``5 1 4 1 3`` (the UvA deep-learning tutorial's task);
* ``"sort"``: ``3 1 4 1 5`` -> ``1 1 3 4 5``;
* ``"numbers"``: a translation-like task with different source and target vocabularies
  and lengths, numbers written in English words into digits:
  ``two thousand five`` -> ``2 0 0 5`` (American style, without "and").

:class:`Vocab` maps tokens to ids with ``<pad>`` = 0, ``<bos>`` = 1, ``<eos>`` = 2 first.
:func:`make_batch` pads a list of examples and builds the masks the model needs:
the decoder input is the target shifted right (``<bos> y_1 ... y_n``) and the training
target is ``y_1 ... y_n <eos>`` (teacher forcing). Taught in chapter 11.

Batches come from PyTorch's own ``torch.utils.data.DataLoader``: :class:`BucketBatchSampler`
chooses which examples go together (shuffled, optionally of similar length) and
:func:`make_batch` is the collate function that pads them (``Seq2SeqDataset.loader``).

For a language model, :func:`split_text` cuts a text's token ids as nanoGPT does (the first
90 % to train on, the last 10 % to validate) into two :class:`TextDataset` s whose items
are windows ``x = ids[i : i + T]``, ``y = ids[i + 1 : i + T + 1]`` (``T`` = ``block_size``);
``TextDataset.loader`` draws seeded random windows, ``TextDataset.sequential_loader``
walks the split in non-overlapping windows. Their batches are :class:`TextBatch` es.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, RandomSampler, Sampler, default_collate

from . import _checks
from .torch_attention import causal_mask, padding_mask

PAD, BOS, EOS = "<pad>", "<bos>", "<eos>"
SPECIALS = (PAD, BOS, EOS)
PAD_ID, BOS_ID, EOS_ID = 0, 1, 2


class Vocab:
    """Tokens <-> integer ids, with ``<pad>`` = 0, ``<bos>`` = 1 and ``<eos>`` = 2 first.

    Args:
        tokens: the ordinary tokens, in the order their ids should follow (duplicates
            are kept once).

    ``encode(tokens)`` gives ids, ``decode(ids)`` gives tokens back (stopping at
    ``<eos>`` and dropping ``<pad>``/``<bos>``). Taught in chapter 11.
    """

    pad_id, bos_id, eos_id = PAD_ID, BOS_ID, EOS_ID

    def __init__(self, tokens: Iterable[str]):
        if isinstance(tokens, str):
            raise TypeError("tokens must be an iterable of token strings, got one str; wrap it in a list")
        self.id_to_token: list[str] = list(SPECIALS)
        self.token_to_id: dict[str, int] = {t: i for i, t in enumerate(SPECIALS)}
        for token in tokens:
            if not isinstance(token, str):
                raise TypeError(f"tokens must be strings, got {type(token).__name__} {token!r}")
            if token not in self.token_to_id:
                self.token_to_id[token] = len(self.id_to_token)
                self.id_to_token.append(token)

    def __len__(self) -> int:
        return len(self.id_to_token)

    def __contains__(self, token: object) -> bool:
        return token in self.token_to_id

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Vocab) and self.id_to_token == other.id_to_token

    def __hash__(self) -> int:
        return hash(tuple(self.id_to_token))

    def __repr__(self) -> str:
        shown = " ".join(self.id_to_token[:12]) + (" ..." if len(self) > 12 else "")
        return f"Vocab({len(self)} tokens: {shown})"

    @property
    def tokens(self) -> list[str]:
        """The ordinary tokens (without the specials)."""
        return self.id_to_token[len(SPECIALS) :]

    def encode(self, tokens: Sequence[str], add_bos: bool = False, add_eos: bool = False) -> list[int]:
        """Token strings to ids, optionally with ``<bos>`` in front and ``<eos>`` at the end."""
        if isinstance(tokens, str):
            raise TypeError("tokens must be a sequence of token strings, got one str; use text.split()")
        unknown = [t for t in tokens if t not in self.token_to_id]
        if unknown:
            raise ValueError(f"tokens must be in the vocabulary, got unknown {unknown[:5]}")
        ids = [self.token_to_id[t] for t in tokens]
        return [BOS_ID] * add_bos + ids + [EOS_ID] * add_eos

    def decode(self, ids: Iterable[int] | torch.Tensor, strip: bool = True) -> list[str]:
        """Ids to token strings; with ``strip`` stop at ``<eos>`` and drop ``<pad>`` and ``<bos>``."""
        if isinstance(ids, torch.Tensor):
            if ids.ndim != 1:
                raise ValueError(f"ids must be one sequence, shape (seq,), got shape {tuple(ids.shape)}")
            ids = ids.tolist()
        tokens = []
        for i in ids:
            if not 0 <= int(i) < len(self):
                raise ValueError(f"ids must be in [0, {len(self)}), got {i}")
            i = int(i)
            if strip and i == EOS_ID:
                break
            if strip and i in (PAD_ID, BOS_ID):
                continue
            tokens.append(self.id_to_token[i])
        return tokens


# ---------------------------------------------------------------------------------------
# Batches
# ---------------------------------------------------------------------------------------


def pad_sequences(sequences: Sequence[Sequence[int]], pad_id: int = PAD_ID) -> torch.Tensor:
    """Right-pad id lists to one ``(batch, max_len)`` long tensor (``torch.nn.utils.rnn.pad_sequence``)."""
    if len(sequences) == 0:
        raise ValueError("sequences must hold at least one sequence, got none")
    tensors = [torch.as_tensor(s, dtype=torch.long) for s in sequences]
    # (batch, max_len), each row right-padded with pad_id
    return torch.nn.utils.rnn.pad_sequence(tensors, batch_first=True, padding_value=pad_id)


@dataclass
class Batch:
    """A padded batch with its masks (pad id 0, right padding).

    Attributes:
        src: ``(batch, src_len)`` source ids.
        tgt_in: ``(batch, tgt_len)`` decoder input, ``<bos> y_1 ... y_n`` (shifted right).
        tgt_out: ``(batch, tgt_len)`` what each position must predict, ``y_1 ... y_n <eos>``.
        src_mask: ``(batch, 1, 1, src_len)`` boolean, ``False`` at source pads.
        tgt_mask: ``(batch, 1, tgt_len, tgt_len)`` boolean: causal and not a pad.
        num_tokens: the number of real (non-pad) tokens in ``tgt_out``.
    """

    src: torch.Tensor
    tgt_in: torch.Tensor
    tgt_out: torch.Tensor
    src_mask: torch.Tensor
    tgt_mask: torch.Tensor
    num_tokens: int

    def __len__(self) -> int:
        return self.src.shape[0]

    def to(self, device: torch.device | str) -> Batch:
        """The same batch on another device."""
        moved = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in vars(self).items()}
        return Batch(**moved)


def make_batch(
    pairs: Sequence[tuple[Sequence[int], Sequence[int]]],
    pad_id: int = PAD_ID,
    bos_id: int = BOS_ID,
    eos_id: int = EOS_ID,
) -> Batch:
    """Pad ``[(source ids, target ids), ...]`` into a :class:`Batch` with its masks.

    The target gets ``<bos>`` in front for the decoder input and ``<eos>`` at the end for
    the training target, so both have length ``max(len(target)) + 1``. This is the collate
    function of ``Seq2SeqDataset.loader``'s ``DataLoader``.
    """
    if len(pairs) == 0:
        raise ValueError("pairs must hold at least one (source ids, target ids) pair, got none")
    src = pad_sequences([s for s, _ in pairs], pad_id)  # (batch, src_len)
    tgt_in = pad_sequences([[bos_id, *t] for _, t in pairs], pad_id)  # (batch, tgt_len)
    tgt_out = pad_sequences([[*t, eos_id] for _, t in pairs], pad_id)  # (batch, tgt_len)
    src_mask = padding_mask(src, pad_id)  # (batch, 1, 1, src_len)
    tgt_mask = causal_mask(tgt_in.shape[1]) & padding_mask(tgt_in, pad_id)  # (batch, 1, tgt_len, tgt_len)
    return Batch(src, tgt_in, tgt_out, src_mask, tgt_mask, int((tgt_out != pad_id).sum()))


class BucketBatchSampler(Sampler[list[int]]):
    """Which examples go together: lists of indices, one list per batch, for a ``DataLoader``.

    Args:
        lengths: each example's length, or a tuple of lengths (source, target) compared in
            order; only used with ``bucket``.
        batch_size: examples per batch (the last batch of a pass may be smaller).
        shuffle: visit the examples in a random order.
        seed: the seed of that order (numpy's ``default_rng``); every pass over the
            sampler gives the same batches.
        bucket: put examples of similar length together: the shuffled order is cut into
            windows of ``50 * batch_size`` examples, each window sorted by length and cut
            into batches, and (with ``shuffle``) the batches are shuffled, so a batch needs
            less padding while the order of lengths stays random.

    Every example is in exactly one batch of a pass. Pass it as ``batch_sampler=`` to
    ``torch.utils.data.DataLoader``. Taught in chapter 11.
    """

    window_batches = 50

    def __init__(
        self,
        lengths: Sequence[int | tuple[int, ...]],
        batch_size: int,
        shuffle: bool = True,
        seed: int | None = 0,
        bucket: bool = False,
    ):
        self.lengths = list(lengths)
        self.batch_size = _checks.positive_int(batch_size, "batch_size")
        for name, value in (("shuffle", shuffle), ("bucket", bucket)):
            if not isinstance(value, bool):
                raise TypeError(f"{name} must be True or False, got {type(value).__name__} {value!r}")
        self.shuffle, self.bucket = shuffle, bucket
        self.seed = seed

    def __len__(self) -> int:
        # windows hold a whole number of batches, so bucketing never adds a batch
        return -(-len(self.lengths) // self.batch_size)

    def __iter__(self) -> Iterator[list[int]]:
        n, size = len(self.lengths), self.batch_size
        rng = np.random.default_rng(self.seed)
        order = rng.permutation(n) if self.shuffle else np.arange(n)
        if not self.bucket:
            groups = [order[i : i + size] for i in range(0, n, size)]
        else:
            window = self.window_batches * size
            groups = []
            for w in range(0, n, window):
                chunk = sorted(order[w : w + window], key=lambda i: self.lengths[i])
                groups += [chunk[i : i + size] for i in range(0, len(chunk), size)]
            if self.shuffle:
                groups = [groups[i] for i in rng.permutation(len(groups))]
        for group in groups:
            yield [int(i) for i in group]


# ---------------------------------------------------------------------------------------
# The tasks
# ---------------------------------------------------------------------------------------

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


# ---------------------------------------------------------------------------------------
# Text for a language model
# ---------------------------------------------------------------------------------------


@dataclass
class TextBatch:
    """Windows of a text for a decoder-only language model (no padding, no source).

    Attributes:
        tgt_in: ``(batch, block_size)`` token ids, ``ids[i : i + T]``.
        tgt_out: ``(batch, block_size)`` the next token at every position, ``ids[i + 1 : i + T + 1]``.
        num_tokens: ``batch * block_size``, the tokens predicted.
    """

    tgt_in: torch.Tensor
    tgt_out: torch.Tensor
    num_tokens: int

    def __len__(self) -> int:
        return self.tgt_in.shape[0]

    def to(self, device: torch.device | str) -> TextBatch:
        """The same batch on another device."""
        return TextBatch(self.tgt_in.to(device), self.tgt_out.to(device), self.num_tokens)


def make_text_batch(windows: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> TextBatch:
    """Stack ``[(x, y), ...]`` windows into a :class:`TextBatch`: the loaders' collate function."""
    if len(windows) == 0:
        raise ValueError("windows must hold at least one (x, y) window, got none")
    tgt_in, tgt_out = default_collate(list(windows))  # two (batch, block_size) tensors
    return TextBatch(tgt_in, tgt_out, tgt_out.numel())


class TextDataset(Dataset):
    """One split of a tokenised text, seen as windows of ``block_size`` tokens (a ``torch`` ``Dataset``).

    Args:
        ids: the token ids of the text, ``(num_tokens,)`` (a list, numpy array or tensor).
        block_size: T, the context length: the tokens in one window.

    Item ``i`` (``0 <= i < len(ids) - block_size``) is the pair ``x = ids[i : i + T]``,
    ``y = ids[i + 1 : i + T + 1]``: at every position of ``x`` the model must predict the
    token that follows. ``loader`` draws random windows, as nanoGPT's ``get_batch`` does;
    ``sequential_loader`` reads the split once in non-overlapping windows. Taught in the
    language-modelling chapter.
    """

    def __init__(self, ids: Sequence[int] | np.ndarray | torch.Tensor, block_size: int):
        self.block_size = _checks.positive_int(block_size, "block_size")
        if isinstance(ids, str):
            raise TypeError("ids must be token ids, got a str; encode the text with a tokenizer first")
        ids = torch.as_tensor(ids)
        if ids.ndim != 1 or ids.is_floating_point() or ids.dtype == torch.bool:
            raise TypeError(f"ids must be a one-dimensional sequence of integer ids, got {ids.dtype} "
                            f"of shape {tuple(ids.shape)}")  # fmt: skip
        if len(ids) <= self.block_size:
            raise ValueError(f"ids must hold more than block_size={self.block_size} tokens, got {len(ids)}")
        self.ids = ids.to(torch.long)  # (num_tokens,)

    def __len__(self) -> int:
        """The number of windows (start positions)."""
        return len(self.ids) - self.block_size

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if not 0 <= i < len(self):
            raise IndexError(f"i must be in [0, {len(self)}), got {i}")
        t = self.block_size
        return self.ids[i : i + t], self.ids[i + 1 : i + t + 1]  # (T,), (T,)

    def __repr__(self) -> str:
        return f"TextDataset({len(self.ids):,} tokens, block_size={self.block_size})"

    def loader(self, batch_size: int, num_batches: int, seed: int = 0) -> DataLoader:
        """``num_batches`` batches of ``batch_size`` windows starting at random positions.

        Starts are drawn uniformly with replacement (``RandomSampler(replacement=True)``)
        from a ``torch.Generator`` seeded with ``seed``, so the same seed gives the same
        windows, on any machine.
        """
        batch_size = _checks.positive_int(batch_size, "batch_size")
        num_batches = _checks.positive_int(num_batches, "num_batches")
        generator = torch.Generator().manual_seed(seed)
        total = batch_size * num_batches
        starts = RandomSampler(self, replacement=True, num_samples=total, generator=generator)
        return DataLoader(self, batch_size=batch_size, sampler=starts, collate_fn=make_text_batch)

    def sequential_loader(self, batch_size: int) -> DataLoader:
        """Every non-overlapping window in order, ``ids[0 : T]``, ``ids[T : 2T]``, ...: the whole split once.

        The last ``len(ids) % T`` or so tokens, too few for a full window, are left out.
        """
        batch_size = _checks.positive_int(batch_size, "batch_size")
        starts = range(0, len(self), self.block_size)
        return DataLoader(self, batch_sampler=BatchSampler(starts, batch_size, drop_last=False),
                          collate_fn=make_text_batch)  # fmt: skip


def split_text(
    ids: Sequence[int] | np.ndarray | torch.Tensor, block_size: int, train_fraction: float = 0.9
) -> tuple[TextDataset, TextDataset]:
    """Split a text's token ids by position, as nanoGPT does: the first 90 % to train, the rest to validate.

    Args:
        ids: ``(num_tokens,)`` the whole text's ids.
        block_size: T of both :class:`TextDataset` s.
        train_fraction: the share of the tokens, from the start, in the training split
            (``int(len(ids) * train_fraction)`` of them).

    Returns:
        ``(train, validation)``. Validation text comes after all the training text, so
        no window of it was seen in training (a random split of windows would leak
        overlapping text).
    """
    if isinstance(train_fraction, bool) or not isinstance(train_fraction, (int, float)):
        raise TypeError(f"train_fraction must be a float in (0, 1), got {type(train_fraction).__name__}")
    if not 0.0 < train_fraction < 1.0:
        raise ValueError(f"train_fraction must be in (0, 1), got {train_fraction}")
    ids = torch.as_tensor(ids)
    n = int(len(ids) * train_fraction)
    return TextDataset(ids[:n], block_size), TextDataset(ids[n:], block_size)
