"""Every exercise solution whose code computes something runs, so a changed library cannot
leave a solution that no longer works (or no longer says what its prose claims).

A solution's code is each ``python`` fenced block inside a ``{solution}`` directive of a
chapter. The blocks of one solution run in order, in a fresh namespace prepared by the
chapter's setup cell (its first code cell a reader sees: imports and seeds; the hidden cell
before it installs the library where it is missing, tools/install_cell.py) and nothing else, so a
reader can paste a solution into a fresh notebook after the setup cell. A solution's own
``assert`` lines are its checks.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import matplotlib.pyplot as plt
import pytest

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = sorted((ROOT / "chapters").glob("*.ipynb"))

# a {solution} directive: an opening fence of 3+ backticks or colons, then its body up to
# the same fence; inside it, python blocks fenced with ``` or ~~~
SOLUTION = re.compile(r"^(?P<fence>`{3,}|:{3,})\{solution\}[^\n]*\n(?P<body>.*?)^(?P=fence)\s*$", re.M | re.S)
CODE = re.compile(r"^(?P<fence>`{3,}|~{3,})\s*(?:\{code-cell\}\s*|\{code-block\}\s*)?(?:python|ipython3?|py)\s*\n"
                  r"(?P<code>.*?)^(?P=fence)\s*$", re.M | re.S)
LABEL = re.compile(r"\{solution\}\s*(\S+)")


def setup_cell(cells: list[dict]) -> str:
    first = next(c for c in cells if c["cell_type"] == "code" and "remove-cell" not in c["metadata"].get("tags", []))
    return "\n".join(line for line in "".join(first["source"]).splitlines() if not line.lstrip().startswith("%"))


def solutions() -> list[tuple[str, str, str]]:
    """(chapter, label, code) for every solution with code."""
    out = []
    for path in CHAPTERS:
        cells = json.loads(path.read_text())["cells"]
        for cell in cells:
            if cell["cell_type"] != "markdown":
                continue
            text = "".join(cell["source"])
            for match in SOLUTION.finditer(text):
                blocks = [m.group("code") for m in CODE.finditer(match.group("body"))]
                if blocks:
                    label = LABEL.search(match.group(0)).group(1)
                    out.append((path.name, label, "\n\n".join(blocks)))
    return out


SOLUTIONS = solutions()


def test_solutions_with_code_are_found():
    # most chapters' solutions compute something; finding none means the parser broke
    assert len({chapter for chapter, _, _ in SOLUTIONS}) >= 10, SOLUTIONS


def test_the_parser_reads_both_fence_styles():
    text = "````{solution} ch99-ex1\n:class: dropdown\nProse.\n\n```python\nx = 1\n```\n\n~~~python\ny = 2\n~~~\n````\n"
    match = SOLUTION.search(text)
    assert [m.group("code") for m in CODE.finditer(match.group("body"))] == ["x = 1\n", "y = 2\n"]


@pytest.mark.parametrize(("chapter", "label", "code"), SOLUTIONS, ids=[label for _, label, _ in SOLUTIONS])
def test_solution_runs(chapter, label, code, capsys):
    cells = json.loads((ROOT / "chapters" / chapter).read_text())["cells"]
    namespace: dict = {"__name__": f"solution_{label}"}
    exec(compile(setup_cell(cells), f"{chapter}:setup", "exec"), namespace)
    exec(compile(code, f"{chapter}:{label}", "exec"), namespace)
    plt.close("all")
