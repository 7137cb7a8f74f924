"""`make bench`: every benchmark in one run, printed as tables.

Each module in this folder exposes `run() -> list[dict]`; the rows are printed as they are.
Pass module names to run only some: `python benchmarks/run.py bench_attention`.
"""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
MODULES = ["bench_attention", "bench_training", "bench_book"]


def format_table(rows: list[dict]) -> str:
    """The rows as a plain-text table: a column per key (in order of first appearance), blank where a row lacks it."""
    if not rows:
        return "(no rows)"
    columns = list(dict.fromkeys(key for row in rows for key in row))
    cells = [[str(row.get(c, "")) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths)), "  ".join("-" * w for w in widths)]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in cells]
    return "\n".join(lines)


def print_table(title: str, rows: list[dict]) -> None:
    print(f"\n== {title} ==")
    print(format_table(rows))


def main(names: list[str]) -> None:
    for name in names or MODULES:
        start = time.perf_counter()
        spec = importlib.util.spec_from_file_location(name, HERE / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        rows = module.run()
        print_table(f"{name} ({time.perf_counter() - start:.0f} s)", rows)


if __name__ == "__main__":
    main(sys.argv[1:])
