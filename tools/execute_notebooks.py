"""Execute notebooks in place, top to bottom, and store their outputs.

Chapters are kept in the repository with their outputs, so a learner sees them before
running anything and nbval can compare the cells tagged ``nbval-check-output``.
Widget state is not stored (the book build regenerates it); timings are printed.

Usage: python tools/execute_notebooks.py chapters/04_queries_keys_values.ipynb [...]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient


def execute(path: Path, timeout: int = 600) -> float:
    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})
    client.execute()
    seconds = time.perf_counter() - start
    nb.metadata.pop("widgets", None)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.metadata.pop("execution", None)
    nbformat.write(nb, path)
    return seconds


def main(paths: list[str]) -> None:
    if not paths:
        sys.exit(__doc__)
    for p in paths:
        seconds = execute(Path(p))
        print(f"{p}: {seconds:.1f} s")


if __name__ == "__main__":
    main(sys.argv[1:])
