"""English -> French translation of real sentences: the corpus, tokens, the split, BLEU, training.

The data are 76,036 English-French sentence pairs of the Tatoeba Project (tatoeba.org,
CC BY 2.0 FR), 1 to 9 English words each, stored in ``data/tatoeba/``; many English
sentences have several French translations. Read top to bottom:

* :func:`load_pairs`: the ``(english, french)`` pairs as their contributors wrote them.
* :func:`normalise`: the one form the course reads a sentence in (NFC, lower case, straight
  apostrophes, one plain space, one spacing of punctuation per language).
* :func:`tokenise` and :func:`detokenise`: words and punctuation marks, with English
  contractions split as in the Penn Treebank (``don't`` -> ``do n't``) and French elisions
  (``j'``, ``l'``, ``qu'`` ...) and inverted pronouns (``as-tu`` -> ``as -tu``) as tokens of
  their own. ``detokenise(tokenise(s, lang), lang) == normalise(s, lang)`` for every
  sentence of the corpus (tested).
* :func:`build_vocab`: a :class:`~transformer_lib.data.Vocab` of the training tokens seen
  at least ``min_freq`` times, with ``<unk>`` (id 3) for the others.
* :func:`split_by_source`: training, validation and test sets that share no English
  sentence; all the translations of one English sentence go to the same set.
* :class:`TranslationData` and :func:`make_translation_data`: all of the above together.
* :func:`corpus_bleu` (with :func:`bleu_signature`) and :func:`sentence_bleu`: BLEU
  (Papineni et al., 2002) with sacreBLEU (Post, 2018), its default ``13a`` tokenisation,
  against every reference translation of each source sentence; :func:`d2l_bleu`: the
  hand-written variant of
  *Dive into Deep Learning* (with :func:`d2l_preprocess`), kept only to compare with its
  published numbers.
* :class:`NextToken` and :func:`translate`: English sentences to French with greedy decoding
  or beam search.
* :func:`train_with_bleu`: :func:`~transformer_lib.training.train` in rounds, with the
  validation BLEU measured between rounds.
* :func:`save_translation_model` and :func:`load_translation_model`: a half-precision
  checkpoint with its two vocabularies.

Taught in chapter 12.
"""

from __future__ import annotations

import gzip
import math
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import sacrebleu
import torch
from torch import nn
from tqdm.auto import tqdm

from . import _checks
from .checkpoints import load_checkpoint, save_checkpoint
from .data import Vocab, make_batch
from .decoding import beam_search, greedy_decode
from .optim import make_optimizer
from .tasks import Seq2SeqDataset
from .training import History, train

DATA_FILE = Path(__file__).resolve().parent.parent / "data" / "tatoeba" / "eng-fra-tatoeba-short.tsv.gz"
DATA_MD5 = "962d675ce104c1e2763bb6c5bb2da1fe"  # of the decompressed file
#: the shipped model and its record, written by ``make translation`` (scripts/train_translation.py)
RESULTS_DIR = Path(__file__).resolve().parent.parent / "results" / "translation"
LANGUAGES = ("en", "fr")
UNK = "<unk>"
UNK_ID = 3  # after <pad>, <bos>, <eos>


def _language(lang: object) -> str:
    if not isinstance(lang, str) or lang not in LANGUAGES:
        raise ValueError(f"lang must be one of {list(LANGUAGES)}, got {lang!r}")
    return lang


def _text(text: object, name: str) -> str:
    if not isinstance(text, str):
        raise TypeError(f"{name} must be a str, got {type(text).__name__} {text!r}")
    return text


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
# Normalisation, tokens and back
# ---------------------------------------------------------------------------------------

# typographic apostrophes and hyphens -> their ASCII forms
_ASCII = str.maketrans({"\u2019": "'", "\u2018": "'", "\u02bc": "'", "\u2010": "-", "\u2011": "-"})


def normalise(text: str, lang: str) -> str:
    """The form the course reads a sentence in; what :func:`detokenise` writes back.

    1. Unicode NFC (one code point for ``é``), then lower case.
    2. Typographic apostrophes (``’``, ``‘``) become ``'``; the Unicode hyphen becomes ``-``.
    3. Every run of white space, no-break, narrow no-break (U+202F) and thin (U+2009)
       spaces included, becomes one plain space; none at either end.
    4. Punctuation spacing. No space before ``.`` and ``,`` in either language. English:
       no space before ``? ! : ;`` either. French typography: one space before ``? ! ; »``
       and before ``:`` (except between digits, ``3:30``), one space after ``«``.

    What is lost is only what these steps remove: case, the kind of apostrophe and of
    space, and the spacing variants of punctuation (most French references of the corpus
    put a space before ``?`` and ``!``: 221 of their 17,666 do not follow a space).

    Args:
        text: one sentence.
        lang: ``"en"`` or ``"fr"``.
    """
    text, lang = _text(text, "text"), _language(lang)
    # 1) one code point per character, lower case (NFC again: lowering can decompose)
    text = unicodedata.normalize("NFC", unicodedata.normalize("NFC", text).lower())
    # 2) ASCII apostrophes and hyphens
    text = text.translate(_ASCII)
    # 3) one plain space (str.split splits on every Unicode space, U+202F and U+2009 too)
    text = " ".join(text.split())
    # 4) punctuation spacing
    text = re.sub(r" ([.,])", r"\1", text)
    if lang == "en":
        return re.sub(r" ([?!:;])", r"\1", text)
    text = re.sub(r" ?([?!;»])", r" \1", text)
    text = re.sub(r" ?:(?!\d)", " :", text)
    text = re.sub(r"« ?", "« ", text)
    return text.strip()


LEADING = frozenset('"«(¿¡')  # punctuation split off the front of a word
TRAILING = frozenset('.,?!:;"»)')  # ... and off its end
#: English contractions split off as tokens of their own (Penn Treebank style)
CONTRACTIONS = ("n't", "'s", "'m", "'re", "'ve", "'ll", "'d")
#: French elided words: ``j'ai`` -> ``j' ai``, ``jusqu'à`` -> ``jusqu' à`` (``aujourd'hui`` stays whole)
ELISIONS = ("c", "d", "j", "l", "m", "n", "s", "t", "qu", "jusqu", "lorsqu", "puisqu")
#: French pronouns joined by a hyphen after a verb: ``as-tu`` -> ``as -tu``, ``a-t-il`` -> ``a -t-il``
CLITICS = ("je", "tu", "il", "elle", "on", "nous", "vous", "ils", "elles", "ce", "moi", "toi", "le", "la",
           "les", "lui", "leur", "y", "en")  # fmt: skip
_ELISION = re.compile(rf"({'|'.join(ELISIONS)})'(.+)")
_EUPHONIC_T = re.compile(r"(.+?)(-t-(?:il|elle|on|ils|elles))")
_CLITIC = re.compile(rf"(.+)(-(?:{'|'.join(CLITICS)}))")


def _split_word(word: str, lang: str) -> list[str]:
    """One word without edge punctuation -> its tokens (contractions, elisions, clitics)."""
    if lang == "en":
        tail: list[str] = []
        while True:
            suffix = next((c for c in CONTRACTIONS if word.endswith(c) and len(word) > len(c)), None)
            if suffix is None:
                return [word, *tail]
            word, tail = word[: -len(suffix)], [suffix, *tail]
    head: list[str] = []
    while (m := _ELISION.fullmatch(word)) is not None:
        head.append(m.group(1) + "'")
        word = m.group(2)
    tail = []
    while (m := _EUPHONIC_T.fullmatch(word) or _CLITIC.fullmatch(word)) is not None:
        word, tail = m.group(1), [m.group(2), *tail]
    return [*head, word, *tail]


def tokenise(text: str, lang: str) -> list[str]:
    """A sentence's tokens: :func:`normalise`, split at spaces, then punctuation and word parts.

    Punctuation in ``LEADING`` and ``TRAILING`` is split off the ends of each word, one
    mark a token (``"hello?"`` -> ``" hello ? "``); marks inside a word stay (``3:30``,
    ``u.s``). English: ``CONTRACTIONS`` become tokens of their own (``i'm`` -> ``i 'm``,
    ``can't`` -> ``ca n't``, ``tom's`` -> ``tom 's``). French: ``ELISIONS`` keep their
    apostrophe (``qu'il`` -> ``qu' il``) and the pronouns after a verb keep their hyphen
    (``dis-le-moi`` -> ``dis -le -moi``), so :func:`detokenise` knows to join them.

    Args:
        text: one sentence.
        lang: ``"en"`` or ``"fr"``.

    Returns:
        the list of token strings.
    """
    tokens: list[str] = []
    for word in normalise(text, lang).split(" "):
        front, back = [], []
        while word and word[0] in LEADING:
            front.append(word[0])
            word = word[1:]
        while word and word[-1] in TRAILING:
            back.insert(0, word[-1])
            word = word[:-1]
        tokens += front + (_split_word(word, lang) if word else []) + back
    return tokens


def _is_elision(token: str) -> bool:
    return token.endswith("'") and token[:-1] in ELISIONS


def _is_clitic(token: str) -> bool:
    return _EUPHONIC_T.fullmatch("x" + token) is not None or _CLITIC.fullmatch("x" + token) is not None


def detokenise(tokens: Sequence[str], lang: str) -> str:
    """Tokens back to a sentence in :func:`normalise`'s form (the text BLEU is computed on).

    Tokens are joined with spaces, except: no space before ``. , )`` and a closing
    ``"``, none after ``( ¿ ¡`` and an opening ``"`` (quotes alternate, opening first).
    English: no space before ``? ! : ; »`` or a contraction (``do n't`` -> ``don't``), none
    after ``«``. French: a space before ``? ! : ; »`` and after ``«`` (French typography,
    as most references of the corpus write it), none after an elision (``j' ai`` ->
    ``j'ai``) or before a joined pronoun (``as -tu`` -> ``as-tu``).

    Args:
        tokens: token strings (specials such as ``<unk>`` are written as they are).
        lang: ``"en"`` or ``"fr"``.
    """
    lang = _language(lang)
    if isinstance(tokens, str):
        raise TypeError("tokens must be a sequence of token strings, got one str; use tokenise(text, lang)")
    attach_left = {".", ",", ")"} | ({"?", "!", ":", ";", "»"} if lang == "en" else set())
    attach_right = {"(", "¿", "¡"} | ({"«"} if lang == "en" else set())
    out: list[str] = []
    quote_open = False
    glue_next = True  # no space before the first token
    for token in tokens:
        if token == '"':
            left, right = quote_open, not quote_open
            quote_open = not quote_open
        elif lang == "en":
            left, right = token in attach_left or token in CONTRACTIONS, token in attach_right
        else:
            left = token in attach_left or _is_clitic(token)
            right = token in attach_right or _is_elision(token)
        if not (glue_next or left):
            out.append(" ")
        out.append(token)
        glue_next = right
    return "".join(out)


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


# ---------------------------------------------------------------------------------------
# BLEU
# ---------------------------------------------------------------------------------------


def _check_references(hypotheses: Sequence[str], references: Sequence[Sequence[str]]) -> None:
    if isinstance(hypotheses, str) or not all(isinstance(h, str) for h in hypotheses):
        raise TypeError("hypotheses must be a list of str, one translation per source sentence")
    if len(references) != len(hypotheses):
        raise ValueError(f"references must hold one list per hypothesis ({len(hypotheses)}), "
                         f"got {len(references)}")  # fmt: skip
    for i, refs in enumerate(references):
        if isinstance(refs, str) or len(refs) == 0 or not all(isinstance(r, str) for r in refs):
            raise ValueError(f"references[{i}] must be a non-empty list of str, got {refs!r}")


def corpus_bleu(hypotheses: Sequence[str], references: Sequence[Sequence[str]]) -> sacrebleu.BLEUScore:
    """Corpus BLEU with sacreBLEU's defaults (``13a`` tokenisation, 4-grams, no smoothing).

    Args:
        hypotheses: one translation per source sentence.
        references: for each source sentence, the list of ALL its reference translations
            (any number, at least one).

    sacreBLEU takes references as streams (stream k holds every sentence's k-th
    reference); a sentence with fewer references than the most has ``None`` in the
    remaining streams, which sacreBLEU drops, so each sentence is scored against exactly
    its own references: n-gram counts clipped by the largest count in any one reference,
    brevity penalty from the reference length closest to the hypothesis's. (An empty
    string would not do: sacreBLEU keeps ``""`` as a reference of length 0.)

    Returns:
        sacreBLEU's ``BLEUScore`` (``.score`` in 0-100, ``.precisions``, ``.bp``, ...).
    """
    return _corpus_bleu(hypotheses, references)[0]


def bleu_signature(hypotheses: Sequence[str], references: Sequence[Sequence[str]]) -> str:
    """sacreBLEU's signature of :func:`corpus_bleu` on these sentences (number of references,
    case, tokenisation, smoothing, version), the string to report beside the score."""
    return _corpus_bleu(hypotheses, references)[1]


def _corpus_bleu(hypotheses, references) -> tuple[sacrebleu.BLEUScore, str]:
    _check_references(hypotheses, references)
    width = max((len(r) for r in references), default=1)
    streams = [[refs[k] if k < len(refs) else None for refs in references] for k in range(width)]
    metric = sacrebleu.BLEU()
    score = metric.corpus_score(list(hypotheses), streams)
    return score, str(metric.get_signature())


def sentence_bleu(hypothesis: str, references: Sequence[str]) -> float:
    """Sentence-level BLEU in [0, 1] with sacreBLEU (``13a``, 4-grams, exponential
    smoothing of zero counts, effective order for short sentences) against all references."""
    _check_references([_text(hypothesis, "hypothesis")], [references])
    return sacrebleu.sentence_bleu(hypothesis, list(references)).score / 100


def d2l_preprocess(text: str) -> str:
    """*Dive into Deep Learning*'s preprocessing of a sentence, for :func:`d2l_bleu`: no-break
    spaces as spaces, lower case, and a space inserted before ``, . ! ?`` where none is
    (``"J'ai perdu."`` -> ``"j'ai perdu ."``; elisions and contractions stay whole)."""
    text = _text(text, "text").replace("\u202f", " ").replace("\xa0", " ").lower()
    return "".join(" " + c if i > 0 and c in ",.!?" and text[i - 1] != " " else c for i, c in enumerate(text))


def d2l_bleu(prediction: str, reference: str, k: int = 2) -> float:
    """*Dive into Deep Learning*'s hand-written BLEU, only to compare with its published numbers.

    ``exp(min(0, 1 - len_ref / len_pred)) * prod_{n=1..k} p_n ** (1 / 2**n)`` on tokens
    split at spaces, with ``p_n`` the clipped n-gram precision. It differs from
    sacreBLEU's :func:`sentence_bleu`: one reference only, n-grams up to ``k = 2`` (not 4),
    weights ``1/2, 1/4`` (not a geometric mean with equal weights), no smoothing (one
    missing bigram gives 0), and no tokenisation of its own (the text must already be
    split, ``"j'ai perdu ."``, as :func:`d2l_preprocess` does).
    """
    k = _checks.positive_int(k, "k")
    pred, ref = _text(prediction, "prediction").split(" "), _text(reference, "reference").split(" ")
    score = math.exp(min(0.0, 1 - len(ref) / len(pred)))
    for n in range(1, min(k, len(pred)) + 1):
        ref_grams = Counter(tuple(ref[i : i + n]) for i in range(len(ref) - n + 1))
        pred_grams = Counter(tuple(pred[i : i + n]) for i in range(len(pred) - n + 1))
        matches = sum(min(c, ref_grams[g]) for g, c in pred_grams.items())
        score *= (matches / (len(pred) - n + 1)) ** (0.5**n)
    return score


# ---------------------------------------------------------------------------------------
# Translating
# ---------------------------------------------------------------------------------------


def _device_of(model: nn.Module) -> torch.device:
    param = next(model.parameters(), None)
    return torch.device("cpu") if param is None else param.device


class NextToken(nn.Module):
    """A translation model as decoding sees it: the next token's log-probabilities only, never ``<unk>``.

    :func:`~transformer_lib.decoding.greedy_decode` and :func:`~transformer_lib.decoding.beam_search`
    call ``decode`` on the whole prefix at every step and keep only the last position's
    log-probabilities. This wrapper runs the output layer (linear and log-softmax over the
    French vocabulary, the largest single cost of a small model's step) on that position
    alone, which gives the same answer, and sets ``<unk>``'s log-probability to ``-inf``:
    an ``<unk>`` can never match a reference word, so the best real word is always the
    better guess (the same as fairseq's ``--unkpen`` set to infinity).

    Args:
        model: a :class:`~transformer_lib.model.Transformer` (``encoder``, ``decoder``, ``generator``).
        banned: token ids never produced.
    """

    def __init__(self, model: nn.Module, banned: Sequence[int] = (UNK_ID,)):
        super().__init__()
        for part in ("encode", "decoder", "generator"):
            if getattr(model, part, None) is None:
                raise TypeError(f"model must be an encoder-decoder Transformer with a generator, "
                                f"got {type(model).__name__} without {part}")  # fmt: skip
        self.model = model
        self.banned = list(banned)

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor | None = None) -> torch.Tensor:
        """``(batch, src_len)`` ids to ``memory`` ``(batch, src_len, d_model)``."""
        return self.model.encode(src, src_mask)

    def decode(
        self,
        tgt: torch.Tensor,
        memory: torch.Tensor,
        src_mask: torch.Tensor | None = None,
        tgt_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Log-probabilities ``(batch, 1, tgt_vocab)`` of the token after the whole prefix ``tgt``."""
        x = self.model.decoder(tgt, memory, src_mask, tgt_mask)[:, -1:]  # (batch, 1, d_model)
        log_probs = self.model.generator(x)  # (batch, 1, tgt_vocab)
        log_probs[..., self.banned] = -math.inf
        return log_probs


def translate(
    model: nn.Module,
    sentences: Sequence[str],
    src_vocab: Vocab,
    tgt_vocab: Vocab,
    *,
    beam_size: int | None = None,
    alpha: float = 0.6,
    batch_size: int = 250,
    max_len: int | None = None,
) -> list[str]:
    """English sentences to French, in :func:`normalise`'s form (the model decoded through
    :class:`NextToken`, so it never writes ``<unk>``).

    Args:
        model: an encoder-decoder :class:`~transformer_lib.model.Transformer`.
        sentences: English sentences as written (they are tokenised here).
        src_vocab, tgt_vocab: the vocabularies the model was trained with.
        beam_size: ``None`` for greedy decoding (:func:`~transformer_lib.decoding.greedy_decode`,
            a batch at a time), else the width of :func:`~transformer_lib.decoding.beam_search`
            with length normalisation ``alpha``.
        batch_size: sentences encoded at once (sorted by length, so batches pad little).
        max_len: the most French tokens per sentence; by default twice the English
            length plus 10.

    Returns:
        one French sentence per English one, in the input order.
    """
    if isinstance(sentences, str):
        raise TypeError("sentences must be a list of str, got one str; wrap it in a list")
    batch_size = _checks.positive_int(batch_size, "batch_size")
    if beam_size is not None:
        beam_size = _checks.positive_int(beam_size, "beam_size")
    sources = [src_vocab.encode(known_tokens(tokenise(s, "en"), src_vocab)) for s in sentences]
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    device = _device_of(model)
    decoder = NextToken(model)
    out: list[str] = [""] * len(sources)
    for start in range(0, len(order), batch_size):
        chosen = order[start : start + batch_size]
        batch = make_batch([(sources[i], []) for i in chosen])
        src, src_mask = batch.src.to(device), batch.src_mask.to(device)
        limit = 2 * src.shape[1] + 10 if max_len is None else _checks.positive_int(max_len, "max_len")
        if beam_size is None:
            ids = greedy_decode(decoder, src, limit, src_mask=src_mask)
        else:
            ids = beam_search(decoder, src, limit, beam_size, alpha=alpha, src_mask=src_mask)
        for row, i in zip(ids.cpu(), chosen):
            out[i] = detokenise(tgt_vocab.decode(row), "fr")
    return out


def evaluate_bleu(
    model: nn.Module,
    data: TranslationData,
    split: str = "test",
    *,
    limit: int | None = None,
    beam_size: int | None = None,
    alpha: float = 0.6,
) -> float:
    """Corpus BLEU (0-100) of the model's translations of a held-out split's distinct English
    sentences against all their references.

    ``limit`` keeps ``limit`` sentences evenly spaced through the split (the corpus is
    sorted by length, so the first ones would all be short), a fixed subset."""
    sources, references = data.references(split)
    if limit is not None and _checks.positive_int(limit, "limit") < len(sources):
        keep = np.linspace(0, len(sources) - 1, limit).round().astype(int)
        sources, references = [sources[i] for i in keep], [references[i] for i in keep]
    hypotheses = translate(model, sources, data.src_vocab, data.tgt_vocab, beam_size=beam_size, alpha=alpha)
    return corpus_bleu(hypotheses, references).score


# ---------------------------------------------------------------------------------------
# Training with validation BLEU, and the shipped checkpoint
# ---------------------------------------------------------------------------------------


def train_with_bleu(
    model: nn.Module,
    data: TranslationData,
    *,
    steps: int,
    eval_every: int,
    valid_sentences: int = 500,
    batch_size: int = 128,
    warmup_steps: int = 400,
    lr_factor: float = 1.0,
    smoothing: float = 0.1,
    seed: int = 0,
    progress: bool = True,
    time_limit: float | None = None,
) -> tuple[History, list[dict]]:
    """Train with :func:`~transformer_lib.training.train` in rounds of ``eval_every`` steps, and
    measure the greedy validation BLEU on ``valid_sentences`` validation sentences (a fixed
    subset spread over all lengths, see :func:`evaluate_bleu`) after each round.

    One optimizer and schedule (:func:`~transformer_lib.optim.make_optimizer`) and one
    :class:`~transformer_lib.training.History` run through all the rounds, so this is one
    training run; batches are bucketed by length (``bucket=True``) and shuffled anew each
    round. ``time_limit`` (seconds of training steps) stops early. ``progress`` shows one
    tqdm bar for the whole run, with the last loss and validation BLEU.

    Returns:
        ``(history, curve)``; ``curve`` has one dict per round: ``step``, ``minutes`` and
        ``cpu_minutes`` (wall and processor time of the training steps so far),
        ``train_loss`` (mean over the round), ``valid_bleu``.
    """
    steps = _checks.positive_int(steps, "steps")
    eval_every = _checks.positive_int(eval_every, "eval_every")
    valid_sentences = _checks.positive_int(valid_sentences, "valid_sentences")
    d_model = model.config.d_model
    optimizer, scheduler = make_optimizer(model, d_model, warmup_steps, lr_factor)
    history = History()
    train_set = data.dataset("train")
    curve: list[dict] = []
    bar = tqdm(total=steps, disable=not progress, desc="training", unit="step")
    try:
        while history.steps < steps and (time_limit is None or history.train_seconds < time_limit):
            start = history.steps
            train(model, train_set, steps=min(eval_every, steps - start), batch_size=batch_size,
                  smoothing=smoothing, seed=seed + start, bucket=True, progress=False, optimizer=optimizer,
                  scheduler=scheduler, history=history, time_limit=time_limit)  # fmt: skip
            curve.append({
                "step": history.steps,
                "minutes": round(history.train_seconds / 60, 3),
                "cpu_minutes": round(history.train_cpu_seconds / 60, 3),
                "train_loss": round(float(np.mean(history.losses[start:])), 4),
                "valid_bleu": round(evaluate_bleu(model, data, "valid", limit=valid_sentences), 2),
            })  # fmt: skip
            bar.update(history.steps - start)
            last = curve[-1]
            bar.set_postfix(loss=f"{last['train_loss']:.2f}", valid_bleu=f"{last['valid_bleu']:.1f}")
    finally:
        bar.close()
    return history, curve


def save_translation_model(
    path: str | Path,
    model: nn.Module,
    src_vocab: Vocab,
    tgt_vocab: Vocab,
    history: History | None = None,
    dtype: torch.dtype = torch.float16,
) -> None:
    """Save a :func:`~transformer_lib.checkpoints.save_checkpoint` file of the model's weights in
    ``dtype`` (float16: half the size of float32) plus its two vocabularies (``src_tokens``,
    ``tgt_tokens``)."""
    save_checkpoint(path, model, history=history, dtype=dtype)
    state = torch.load(path, map_location="cpu", weights_only=True)
    state["src_tokens"], state["tgt_tokens"] = src_vocab.tokens, tgt_vocab.tokens
    torch.save(state, path)


def load_translation_model(path: str | Path) -> tuple[nn.Module, Vocab, Vocab, History | None]:
    """``(model, src_vocab, tgt_vocab, history)`` from :func:`save_translation_model`'s file;
    the model is float32 (built from the saved config) and in eval mode."""
    model, history = load_checkpoint(path)
    state = torch.load(path, map_location="cpu", weights_only=True)
    if "src_tokens" not in state or "tgt_tokens" not in state:
        raise ValueError(f"path must be a file written by save_translation_model, got one without "
                         f"vocabularies: {path}")  # fmt: skip
    return model.float(), Vocab(state["src_tokens"]), Vocab(state["tgt_tokens"]), history
