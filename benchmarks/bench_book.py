"""Book build timings: a cold build from a clean tree, then a rebuild after a prose edit.

The tree is the repository's tracked files copied to a temporary folder (so the real
_build and its cache are untouched). Goals (issue: the book): cold build at most 5 minutes
on a 2-core machine, and a rebuild after editing one chapter's prose at most 30 s.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COLD_GOAL_S = 300.0
PROSE_GOAL_S = 30.0


def _tracked_files() -> list[str]:
    out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if line and (ROOT / line).is_file()]


def _build(tree: Path) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "tools/build_book.py"], cwd=tree, check=True,
                   stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def _edit_prose(tree: Path) -> str:
    """Append a sentence to the first markdown cell of the first chapter."""
    chapter = sorted((tree / "chapters").glob("*.ipynb"))[0]
    nb = json.loads(chapter.read_text())
    cell = next(c for c in nb["cells"] if c["cell_type"] == "markdown")
    source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
    cell["source"] = source + "\n\nThis sentence was added to time a prose-only rebuild."
    chapter.write_text(json.dumps(nb, indent=1))
    return chapter.name


def run() -> list[dict]:
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "book"
        for name in _tracked_files():
            target = tree / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, target)
        widgets = ROOT / "_book_static" / "widgets"
        if widgets.exists():  # fetched from the npm registry once; not part of the timing
            shutil.copytree(widgets, tree / "_book_static" / "widgets")
        cold = _build(tree)
        edited = _edit_prose(tree)
        warm = _build(tree)
    return [
        {"benchmark": "book: cold build", "seconds": round(cold, 1), "goal_s": COLD_GOAL_S,
         "met": cold <= COLD_GOAL_S},
        {"benchmark": f"book: rebuild after a prose edit ({edited})", "seconds": round(warm, 1),
         "goal_s": PROSE_GOAL_S, "met": warm <= PROSE_GOAL_S},
    ]


if __name__ == "__main__":
    for row in run():
        print(row)
