"""What every page of the book must and must not show a reader.

* No page names a source the reader cannot find: the book cites only the published works
  of ``references.bib`` (through ``{cite}``), never private notes, slides or reports.
* No visible code cell holds test scaffolding: widget timing and distinctness checks live
  in ``tests/``, nbval is driven by cell tags (not ``# NBVAL_`` comments), and cells that
  exist only to check are tagged ``remove-cell``.
* Every ``{cite}`` key is in the bibliography.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = sorted((ROOT / "chapters").glob("*.ipynb"))
PAGES = [ROOT / "intro.md", ROOT / "exercises.md", ROOT / "references.md", ROOT / "README.md"]
EXERCISES = sorted((ROOT / "exercises").glob("*/instructor.ipynb"))
HIDDEN = {"remove-cell", "remove-input"}

# Phrases that name a private source (notes, slides, reports the course grew from) or
# one of their authors. A reader cannot look any of them up.
PRIVATE = re.compile(
    r"\bseeds?\s*#?\s*0\d\d\b|\bseed (?:report|notes?|text|slides?|source)s?\b|\bthe seeds?\b"
    r"|\b(?:lecture|course|tutorial) (?:slides|notes)\b|\bthe slides\b|\bprogress report\b"
    r"|\bsource (?:notes|texts?)\b|\bour sources\b|\bprivate (?:notes|sources?)\b"
    r"|\bLiu's\b|\bMingyu\b|\bPavlos\b|\bProtopapas\b|\bBerns\b|\bSeungcheol\b|\bS\. Oh\b|\bOh's\b",
    re.IGNORECASE,
)
SCAFFOLD = re.compile(r"perf_counter|process_time|\.slowest\b|#\s*NBVAL_|frames\.outputs|\.frames\b")
CITE = re.compile(r"\{cite(?::\w+)?\}`([^`]+)`")


def cells(path: Path) -> list[dict]:
    return json.loads(path.read_text())["cells"]


def source(cell: dict) -> str:
    return "".join(cell["source"])


def texts() -> list[tuple[str, str]]:
    """(where, text) for every markdown cell, code cell and page of the book."""
    out = [(page.name, page.read_text()) for page in PAGES]
    for path in CHAPTERS + EXERCISES:
        out += [(f"{path.parent.name}/{path.name} cell {i}", source(c)) for i, c in enumerate(cells(path))]
    return out


def test_the_chapters_are_found():
    assert len(CHAPTERS) >= 14


def test_no_page_names_a_private_source():
    found = [f"{where}: {m.group(0)!r}" for where, text in texts() for m in PRIVATE.finditer(text)]
    assert not found, "the book cites only references.bib; these name a private source:\n" + "\n".join(found)


@pytest.mark.parametrize(
    "text",
    ["As Seed 003 says", "the seed report", "M. Liu's report", "the lecture slides", "Berns's tutorial notes",
     "S. Oh's report", "the source notes", "our sources", "the slides show", "seed 000 gives", "Pavlos spoke"],
)
def test_the_private_source_pattern_catches_each_known_phrase(text):
    assert PRIVATE.search(text)


@pytest.mark.parametrize(
    "text",
    ["rng = np.random.default_rng(0)", "torch.manual_seed(0)", "with a seed of 3", "seed=0", "seeded",
     "{cite}`vaswani2017` reports", "the report of the experiment below"],
)
def test_the_private_source_pattern_spares_ordinary_words(text):
    assert not PRIVATE.search(text)


def test_no_visible_cell_holds_test_scaffolding():
    found = []
    for path in CHAPTERS:
        for i, cell in enumerate(cells(path)):
            tags = set(cell.get("metadata", {}).get("tags", []))
            if cell["cell_type"] == "code" and not tags & HIDDEN and SCAFFOLD.search(source(cell)):
                found.append(f"{path.name} cell {i}: {SCAFFOLD.search(source(cell)).group(0)!r}")
    assert not found, "readers see the lesson, not the harness; move these checks to tests/:\n" + "\n".join(found)


def test_nbval_is_driven_by_tags_not_comments():
    found = [
        f"{path.name} cell {i}"
        for path in CHAPTERS
        for i, cell in enumerate(cells(path))
        if cell["cell_type"] == "code" and re.search(r"#\s*NBVAL_", source(cell))
    ]
    assert not found, "use the nbval-check-output / nbval-ignore-output tags instead:\n" + "\n".join(found)


def test_every_chapter_checks_some_outputs_with_nbval():
    for path in CHAPTERS:
        tagged = [c for c in cells(path) if "nbval-check-output" in c.get("metadata", {}).get("tags", [])]
        assert tagged, f"{path.name} has no cell tagged nbval-check-output"


def test_every_citation_is_in_the_bibliography():
    keys = set(re.findall(r"@\w+\{([^,\s]+),", (ROOT / "references.bib").read_text()))
    cited = {k.strip() for _, text in texts() for group in CITE.findall(text) for k in group.split(",")}
    assert cited, "no page cites anything"
    assert cited <= keys, f"cited but not in references.bib: {sorted(cited - keys)}"


# What chapter 17 quotes from other chapters, by chapter number. Each quote must still be in the
# chapter it names, word for word up to line breaks: a chapter rewritten under a quote leaves the
# quote telling the reader something that chapter no longer says. (Chapter 9 is described, not
# quoted.)
CH17_QUOTES = {
    "04": ["a saturated softmax barely learns"],
    "06": ["extra heads are not harmful, just redundant here"],
    "07": [
        "Without a mask it is also blind to order: shuffle the words of a sentence and the outputs come back"
        " shuffled, otherwise unchanged.",
        "did about as well in the paper's translation experiments",
    ],
    "08": ["pays off in practice"],
    "11": [
        "does not need the warm-up",
        "ends clearly worse than with it",
        "hurts perplexity, as the model learns to be more unsure, but improves accuracy and BLEU score",
    ],
}


def words(path: Path) -> str:
    return re.sub(r"\s+", " ", " ".join(source(c) for c in cells(path)))


def chapter(number: str) -> Path:
    (path,) = [p for p in CHAPTERS if p.name.startswith(f"{number}_")]
    return path


def missing_quotes(quotes: dict[str, list[str]]) -> list[str]:
    ch17 = words(chapter("17"))
    out = []
    for number, said in quotes.items():
        there = words(chapter(number))
        out += [f"chapter {number} no longer says {q!r}" for q in said if q not in there]
        out += [f"chapter 17 no longer quotes {q!r}" for q in said if q not in ch17]
    return out


def test_chapter_17_quotes_what_the_other_chapters_still_say():
    assert not missing_quotes(CH17_QUOTES), "\n".join(missing_quotes(CH17_QUOTES))


def test_a_quote_no_chapter_says_is_caught():
    assert missing_quotes({"09": ["one job of the normalisation"]}) == [
        "chapter 09 no longer says 'one job of the normalisation'",
        "chapter 17 no longer quotes 'one job of the normalisation'",
    ]
