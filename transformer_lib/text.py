"""Text cut into windows for a language model: the dataset of one split, its batches, the split.

:func:`split_text` cuts a text's token ids as nanoGPT does (the first 90 % to train on, the
last 10 % to validate) into two :class:`TextDataset` s whose items are windows
``x = ids[i : i + T]``, ``y = ids[i + 1 : i + T + 1]`` (``T`` = ``block_size``);
``TextDataset.loader`` draws seeded random windows, ``TextDataset.sequential_loader`` walks
the split in non-overlapping windows. Their batches are :class:`TextBatch` es. Taught in
the language-modelling chapter.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, RandomSampler, default_collate

from . import _checks


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
