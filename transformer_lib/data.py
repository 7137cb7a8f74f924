"""Tokens to ids and examples to padded batches: the vocabulary class, batches with their masks,
and the sampler that chooses which examples go together.

:class:`Vocab` maps tokens to ids with ``<pad>`` = 0, ``<bos>`` = 1, ``<eos>`` = 2 first.
:func:`make_batch` pads a list of examples and builds the masks the model needs:
the decoder input is the target shifted right (``<bos> y_1 ... y_n``) and the training
target is ``y_1 ... y_n <eos>`` (teacher forcing). Taught in chapter 11.

Batches come from PyTorch's own ``torch.utils.data.DataLoader``: :class:`BucketBatchSampler`
chooses which examples go together (shuffled, optionally of similar length) and
:func:`make_batch` is the collate function that pads them
(:meth:`~transformer_lib.tasks.Seq2SeqDataset.loader`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch.utils.data import Sampler

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
