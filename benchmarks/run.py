"""`make bench`: every benchmark in one run, printed as tables.

Every ``bench_*.py`` module in this folder is a benchmark (found in sorted order, so a new
one needs no change here). Each exposes ``run() -> list[dict]``; its rows are printed as a
table, after whatever the module prints itself (the side-by-side tables of
``torch.utils.benchmark.Compare``). Pass module names to run only some:
``python benchmarks/run.py bench_attention``.

The modules that time our code against PyTorch's share :func:`interleaved`: every timing
is ``torch.utils.benchmark.Timer.blocked_autorange`` (median of blocks), taken in rounds
that alternate the implementations so that background load hits both alike.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path
from types import ModuleType

from torch.utils import benchmark

HERE = Path(__file__).resolve().parent
PREFIX = "bench_"


def discover(folder: Path = HERE) -> list[str]:
    """The names of the benchmark modules in ``folder``: every ``bench_*.py``, sorted."""
    return sorted(path.stem for path in folder.glob(f"{PREFIX}*.py") if path.is_file())


def load(name: str, folder: Path = HERE) -> ModuleType:
    """Import the benchmark module ``name`` (``bench_*.py`` in ``folder``) and check it has ``run()``."""
    path = folder / f"{name}.py"
    if not name.startswith(PREFIX) or not path.is_file():
        raise ValueError(f"benchmark must name one of {discover(folder)}, got {name!r}")
    if str(folder) not in sys.path:  # the modules import this one (``from run import interleaved``)
        sys.path.insert(0, str(folder))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not callable(getattr(module, "run", None)):
        raise TypeError(f"benchmark {name} must define run() -> list[dict], and {path.name} has no run()")
    return module


def interleaved(
    timers: dict[str, benchmark.Timer], rounds: int, min_run_time: float
) -> dict[str, benchmark.Measurement]:
    """Time each of ``timers`` in ``rounds`` rounds of ``blocked_autorange``, alternating, merged per timer.

    Round r runs the timers in the given order when r is even and in reverse when it is odd
    (ours, theirs, theirs, ours, ...), so a burst of background load falls on both. Each
    round's ``blocked_autorange(min_run_time=...)`` first sizes its block (which warms up);
    the rounds' blocks are then merged into one ``Measurement`` per timer, whose ``median``
    is the median over every block (per run of the statement).
    """
    if rounds < 1:
        raise ValueError(f"rounds must be a positive int, got {rounds!r}")
    names = list(timers)
    measured: dict[str, list[benchmark.Measurement]] = {name: [] for name in names}
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            measured[name].append(timers[name].blocked_autorange(min_run_time=min_run_time))
    return {name: benchmark.Measurement.merge(ms)[0] for name, ms in measured.items()}


def print_comparison(measurements: list[benchmark.Measurement]) -> None:
    """Print ``torch.utils.benchmark.Compare``'s side-by-side table of ``measurements``, trimmed to
    their significant figures."""
    table = benchmark.Compare(measurements)
    table.trim_significant_figures()
    table.print()


def argument_parser(doc: str, rounds: int, threads: int) -> argparse.ArgumentParser:
    """A benchmark's command line: ``--rounds`` of :func:`interleaved` and ``--threads`` of every
    timed statement (defaults ``rounds`` and ``threads``), described by ``doc``'s first line."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=rounds, help="alternating blocked_autorange rounds")
    parser.add_argument("--threads", type=int, default=threads, help="threads of every timed statement")
    return parser


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


def main(names: list[str], folder: Path = HERE) -> None:
    """Run the named benchmarks (default: every one ``discover`` finds) and print their tables."""
    names = names or discover(folder)
    modules = [load(name, folder) for name in names]  # a wrong name fails before anything is timed
    for name, module in zip(names, modules):
        print(f"\n#### {name}", flush=True)
        start = time.perf_counter()
        rows = module.run()
        print_table(f"{name} ({time.perf_counter() - start:.0f} s)", rows)
        sys.stdout.flush()


if __name__ == "__main__":
    main(sys.argv[1:])
