"""The Tatoeba English-French pairs: the corpus, its vocabularies and the split by English sentence.

The data are 76,036 English-French sentence pairs of the Tatoeba Project (tatoeba.org,
CC BY 2.0 FR), 1 to 9 English words each, shipped in ``transformer_lib/data/tatoeba/``; many English
sentences have several French translations. Read top to bottom:

* :func:`load_pairs`: the ``(english, french)`` pairs as their contributors wrote them.
* :func:`build_vocab`: a :class:`~transformer_lib.data.Vocab` of the training tokens
  (:func:`~transformer_lib.words.tokenise`) seen at least ``min_freq`` times, with
  ``<unk>`` (id 3) for the others; :func:`known_tokens` maps the others to it.
* :func:`split_by_source`: training, validation and test sets that share no English
  sentence; all the translations of one English sentence go to the same set.
* :class:`TranslationData` and :func:`make_translation_data`: all of the above together.

Taught in chapter 12.
"""

from __future__ import annotations

import gzip
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import _checks
from .data import Vocab
from .resources import data_path
from .tasks import Seq2SeqDataset
from .words import normalise, tokenise

DATA_FILE = data_path("tatoeba", "eng-fra-tatoeba-short.tsv.gz")  # package data (transformer_lib.resources)
DATA_MD5 = "962d675ce104c1e2763bb6c5bb2da1fe"  # of the decompressed file
UNK = "<unk>"
UNK_ID = 3  # after <pad>, <bos>, <eos>


# ---------------------------------------------------------------------------------------
# The corpus
# ---------------------------------------------------------------------------------------


def load_pairs(path: str | Path | None = None) -> list[tuple[str, str]]:
    """The ``(english, french)`` sentence pairs of the corpus, in file order (shortest first).

    Args:
        path: a ``english<TAB>french`` file, gzip-compressed if its name ends in ``.gz``;
            by default the course's copy of the Tatoeba pairs (``DATA_FILE``).
    """
    path = DATA_FILE if path is None else Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"path must be an existing file of english<TAB>french lines, got {path}")
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8", newline="\n") as f:
        lines = f.read().split("\n")
    pairs = []
    for number, line in enumerate(lines, start=1):
        if not line:
            continue
        fields = line.split("\t")
        if len(fields) != 2 or not all(fields):
            raise ValueError(f"line {number} of {path.name} must be english<TAB>french, got {line!r}")
        pairs.append((fields[0], fields[1]))
    return pairs


# ---------------------------------------------------------------------------------------
# Vocabularies
# ---------------------------------------------------------------------------------------


def build_vocab(token_lists: Iterable[Sequence[str]], min_freq: int = 1) -> Vocab:
    """A :class:`~transformer_lib.data.Vocab` of the tokens seen at least ``min_freq`` times.

    Ids: ``<pad>`` 0, ``<bos>`` 1, ``<eos>`` 2, ``<unk>`` 3, then the tokens from the most
    frequent down (ties in alphabetical order, so the ids are deterministic). Build it on
    the training set only; :func:`known_tokens` maps every other token to ``<unk>``.
    """
    min_freq = _checks.positive_int(min_freq, "min_freq")
    counts = Counter(t for tokens in token_lists for t in tokens)
    kept = sorted((t for t, n in counts.items() if n >= min_freq), key=lambda t: (-counts[t], t))
    return Vocab([UNK, *kept])


def known_tokens(tokens: Sequence[str], vocab: Vocab) -> tuple[str, ...]:
    """``tokens`` with each one missing from ``vocab`` replaced by ``<unk>``."""
    if UNK not in vocab:
        raise ValueError(f"vocab must hold {UNK} (build it with build_vocab), got {vocab!r}")
    return tuple(t if t in vocab else UNK for t in tokens)


# ---------------------------------------------------------------------------------------
# The split by English sentence
# ---------------------------------------------------------------------------------------


def split_by_source(
    pairs: Sequence[tuple[str, str]], num_valid: int = 2000, num_test: int = 2000, seed: int = 0
) -> dict[str, list[tuple[str, str]]]:
    """Training, validation and test pairs that share no English sentence.

    The pairs are grouped by their normalised English sentence (``I'm home.`` and
    ``I’m home.`` are one sentence); a seeded permutation of the groups puts ``num_test``
    of them in the test set, the next ``num_valid`` in the validation set and the rest in
    the training set, each group with all its translations. A split of the pairs
    themselves would put the same English sentence on both sides (with another of its
    translations), and a model could score on the held-out set by remembering.

    Returns:
        ``{"train": pairs, "valid": pairs, "test": pairs}`` (each in file order).
    """
    num_valid = _checks.positive_int(num_valid, "num_valid")
    num_test = _checks.positive_int(num_test, "num_test")
    groups: dict[str, list[int]] = {}
    for i, (english, _) in enumerate(pairs):
        groups.setdefault(normalise(english, "en"), []).append(i)
    if num_valid + num_test >= len(groups):
        raise ValueError(f"num_valid + num_test must leave training sentences out of {len(groups)} distinct "
                         f"English sentences, got {num_valid} + {num_test}")  # fmt: skip
    keys = list(groups)
    order = np.random.default_rng(seed).permutation(len(keys))
    side = {}
    for rank, g in enumerate(order):
        side[keys[g]] = "test" if rank < num_test else "valid" if rank < num_test + num_valid else "train"
    out: dict[str, list[tuple[str, str]]] = {"train": [], "valid": [], "test": []}
    for key, members in groups.items():
        out[side[key]] += [tuple(pairs[i]) for i in members]
    return out


@dataclass
class TranslationData:
    """The split corpus with its vocabularies (build it with :func:`make_translation_data`).

    Attributes:
        splits: ``{"train" | "valid" | "test": [(english, french), ...]}`` as written.
        src_vocab, tgt_vocab: English and French vocabularies of the training set.
        min_freq: the vocabularies' frequency cut-off.

    ``dataset(split)``: a :class:`~transformer_lib.tasks.Seq2SeqDataset` of token pairs
    (unknown tokens as ``<unk>``) for :func:`~transformer_lib.training.train`;
    ``references(split)``: the distinct English sentences and all their translations.
    """

    splits: dict[str, list[tuple[str, str]]]
    src_vocab: Vocab
    tgt_vocab: Vocab
    min_freq: int

    def _split(self, split: str) -> list[tuple[str, str]]:
        if split not in self.splits:
            raise ValueError(f"split must be one of {list(self.splits)}, got {split!r}")
        return self.splits[split]

    def dataset(self, split: str = "train") -> Seq2SeqDataset:
        """One training example per pair: ``(English tokens, French tokens)``, unknowns as ``<unk>``."""
        src, tgt = self.src_vocab, self.tgt_vocab
        pairs = [
            (known_tokens(tokenise(en, "en"), src), known_tokens(tokenise(fr, "fr"), tgt))
            for en, fr in self._split(split)
        ]
        return Seq2SeqDataset(f"tatoeba-{split}", pairs, self.src_vocab, self.tgt_vocab)

    def references(self, split: str = "test") -> tuple[list[str], list[list[str]]]:
        """``(sources, references)``: each distinct normalised English sentence (in file
        order) and the list of its distinct normalised French translations."""
        refs: dict[str, list[str]] = {}
        for en, fr in self._split(split):
            translations = refs.setdefault(normalise(en, "en"), [])
            fr = normalise(fr, "fr")
            if fr not in translations:
                translations.append(fr)
        return list(refs), list(refs.values())


def make_translation_data(
    pairs: Sequence[tuple[str, str]] | None = None,
    *,
    min_freq: int = 2,
    num_valid: int = 2000,
    num_test: int = 2000,
    seed: int = 0,
) -> TranslationData:
    """Split the pairs by English sentence (:func:`split_by_source`) and build the vocabularies
    on the training set (:func:`build_vocab`).

    Args:
        pairs: ``(english, french)`` pairs; by default :func:`load_pairs`'s.
        min_freq: tokens seen fewer times in training become ``<unk>``.
        num_valid, num_test, seed: as in :func:`split_by_source`.
    """
    pairs = load_pairs() if pairs is None else pairs
    min_freq = _checks.positive_int(min_freq, "min_freq")
    splits = split_by_source(pairs, num_valid, num_test, seed)
    src_vocab = build_vocab((tokenise(en, "en") for en, _ in splits["train"]), min_freq)
    tgt_vocab = build_vocab((tokenise(fr, "fr") for _, fr in splits["train"]), min_freq)
    return TranslationData(splits, src_vocab, tgt_vocab, min_freq)
