"""English and French sentences to word tokens and back, the form BLEU reads them in.

* :func:`normalise`: the one form the course reads a sentence in (NFC, lower case, straight
  apostrophes, one plain space, one spacing of punctuation per language).
* :func:`tokenise` and :func:`detokenise`: words and punctuation marks, with English
  contractions split as in the Penn Treebank (``don't`` -> ``do n't``) and French elisions
  (``j'``, ``l'``, ``qu'`` ...) and inverted pronouns (``as-tu`` -> ``as -tu``) as tokens of
  their own. ``detokenise(tokenise(s, lang), lang) == normalise(s, lang)`` for every
  sentence of the Tatoeba corpus (tested).

Used by :mod:`transformer_lib.tatoeba` (the corpus) and :mod:`transformer_lib.translation`;
taught in chapter 12.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence

LANGUAGES = ("en", "fr")


def _language(lang: object) -> str:
    if not isinstance(lang, str) or lang not in LANGUAGES:
        raise ValueError(f"lang must be one of {list(LANGUAGES)}, got {lang!r}")
    return lang


def _text(text: object, name: str) -> str:
    if not isinstance(text, str):
        raise TypeError(f"{name} must be a str, got {type(text).__name__} {text!r}")
    return text


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
