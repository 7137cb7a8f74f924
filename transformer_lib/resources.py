"""The course's data and recorded results, shipped inside the package.

Two folders travel with the library, in the wheel as in the repository:

* ``transformer_lib/data/``: the corpora the chapters read (tiny Shakespeare, the Tatoeba
  English-French pairs), each with a README giving its source, licence and checksum.
* ``transformer_lib/records/``: what the training scripts recorded (``scripts/``, run with
  ``make shakespeare``, ``make translation``, ``make ablations``, ``make toy-models``): the
  shipped weights and the settings, versions, hardware and results of each run.

Both are found with :func:`importlib.resources.files`, so they are where the installed
package is, whether that is a clone of the repository or a wheel in a virtual environment::

    from transformer_lib.resources import data_path, records_path
    text = data_path("tinyshakespeare", "input.txt").read_text(encoding="utf-8")
    record = records_path("shakespeare", "char.json")
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

__all__ = ["data_path", "records_path"]

FOLDERS = ("data", "records")


def _path(folder: str, parts: tuple[str, ...]) -> Path:
    for part in parts:
        if not isinstance(part, str) or not part or part in (".", "..") or "/" in part or "\\" in part:
            raise ValueError(f"parts: each must be one file or folder name (a non-empty str without '/'), "
                             f"got {part!r}")
    root = files("transformer_lib") / folder
    if not isinstance(root, Path):  # a zipped package: its files are not on disk
        raise RuntimeError(f"transformer_lib/{folder} is not a folder on disk ({type(root).__name__}); "
                           "install the package as files (pip installs wheels that way)")
    path = root.joinpath(*parts)
    if not path.exists():
        parent = path.parent
        there = sorted(p.name for p in parent.iterdir()) if parent.is_dir() else []
        raise FileNotFoundError(f"parts: transformer_lib/{folder}/{'/'.join(parts)} does not exist; "
                                f"{parent.relative_to(root.parent)}/ holds {there}")
    return path


def data_path(*parts: str) -> Path:
    """A file or folder of the course's data: ``data_path("tinyshakespeare", "input.txt")``.

    With no arguments, the data folder itself. Raises ``FileNotFoundError`` naming what the
    folder holds when the file is not there.
    """
    return _path("data", parts)


def records_path(*parts: str) -> Path:
    """A file or folder of the recorded runs: ``records_path("translation", "model.pt")``.

    With no arguments, the records folder itself. Raises ``FileNotFoundError`` naming what the
    folder holds when the file is not there.
    """
    return _path("records", parts)
