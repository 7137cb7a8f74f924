"""A pytest plugin: nbval's checks of the chapters, read from the book's own execution.

``make book`` executes every chapter of the table of contents (Jupyter Book's execution cache,
``_build/.jupyter_cache``). Running nbval afterwards would execute each chapter a second time,
about four minutes of ``make test`` on two cores, to check the same cells. With this plugin,
nbval's items check the outputs that the book's execution produced instead:

- a cell whose execution raised fails, with the traceback (unless tagged ``raises-exception``);
- a cell tagged ``nbval-check-output`` fails when its outputs differ from the ones stored in the
  notebook, compared by nbval's own code (the same keys skipped, the same sanitising);
- a notebook that the cache holds no execution of for its present code (a chapter outside the
  table of contents, or one edited since the build) is executed by nbval as usual.

Usage (``make test`` runs it after ``make book``)::

    pytest -p tools.nbval_replay --nbval-lax --nbval-replay _build/.jupyter_cache chapters

``make notebooks`` runs plain nbval, which executes every chapter afresh.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbval.plugin import IPyNbCell, IPyNbFile, coalesce_streams

_NOTEBOOKS: dict[bool, set[str]] = {True: set(), False: set()}  # replayed? -> notebook names


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--nbval-replay", metavar="CACHE", default=None,
        help="check the outputs of the executions held in this Jupyter Book execution cache "
             "instead of executing the notebooks (those without one are executed as usual)")


def _executed(cache_path: str, notebook: Path) -> nbformat.NotebookNode | None:
    """The notebook with the outputs of its cached execution, or None if none matches its code."""
    from jupyter_cache import get_cache

    source = nbformat.read(str(notebook), as_version=4)
    try:
        _, merged = get_cache(cache_path).merge_match_into_notebook(source)
    except KeyError:  # no cached execution of this notebook's present code
        return None
    return merged


@pytest.hookimpl(hookwrapper=True)
def pytest_collect_file(file_path: Path, parent: pytest.Collector):
    outcome = yield
    cache = parent.config.getoption("--nbval-replay")
    if cache is None or file_path.suffix != ".ipynb":
        return
    if not Path(cache).is_dir():
        raise pytest.UsageError(f"--nbval-replay: expected the book's execution cache, found no folder {cache}")
    collectors = outcome.get_result()
    if not any(isinstance(c, IPyNbFile) for c in collectors):
        return
    executed = _executed(cache, file_path)
    if executed is None:  # nbval's own collector executes it
        return
    outcome.force_result([
        ReplayedNotebook.from_parent(parent, path=file_path, executed=executed)
        if isinstance(c, IPyNbFile) else c for c in collectors])


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Note which notebooks were replayed and which executed (with xdist, the workers' reports)."""
    if report.when == "call" and report.location[0].endswith(".ipynb"):
        replayed = ("nbval-replay", True) in report.user_properties
        _NOTEBOOKS[replayed].add(Path(report.location[0]).name)


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    if config.getoption("--nbval-replay") is not None:
        executed = sorted(_NOTEBOOKS[False])
        terminalreporter.write_line(
            f"nbval-replay: {len(_NOTEBOOKS[True])} notebook(s) checked from the book's execution; "
            f"{len(executed)} executed here ({', '.join(executed) or 'none'})")


class ReplayedNotebook(IPyNbFile):
    """nbval's notebook collector, with the cells' outputs taken from a finished execution."""

    def __init__(self, *args, executed: nbformat.NotebookNode, **kwargs):
        super().__init__(*args, **kwargs)
        self.executed_cells = [cell for cell in executed.cells if cell.cell_type == "code"]

    def setup(self) -> None:  # no kernel to start
        self.setup_sanitize_files()

    def teardown(self) -> None:
        pass

    def collect(self):
        for item in super().collect():
            yield ReplayedCell.from_parent(self, name=item.name, cell_num=item.cell_num,
                                           cell=item.cell, options=item.options)


class ReplayedCell(IPyNbCell):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.user_properties.append(("nbval-replay", True))

    def runtest(self) -> None:
        if self.options["skip"]:
            pytest.skip()
        outputs = self.parent.executed_cells[self.cell_num].outputs
        errors = [out for out in outputs if out.output_type == "error"]
        if errors and not self.options["check_exception"]:
            self.raise_cell_error("Cell execution caused an exception",
                                  "\n" + "\n".join(errors[0].traceback))
        if self.cell.execution_count is None:
            if self.cell.outputs:
                self.raise_cell_error("Unrun reference cell has outputs")
            return
        if self.options["check"] and not self.compare_outputs(
                coalesce_streams(outputs), coalesce_streams(self.cell.outputs)):
            self.raise_cell_error("Cell outputs differ", "\n".join(self.comparison_traceback))
