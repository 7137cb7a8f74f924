"""Submissions: find them, read them (never writing to them), tell which set each belongs to.

Every entry under the submissions folder but its subfolders is one submission (hidden entries
and ``__pycache__`` skipped): :func:`discover` lists them through :class:`.files.SubmittedFolder`,
which never follows a link, and gives every entry that is not a regular file (a symbolic link, a
FIFO, a socket, a device) the status that stops it, ``not a regular file: <what it is>``.
:func:`inspect` reads a regular file (again without following any link, so an entry swapped for a
link after the listing is refused too) and either gives it the status that stops it (``not a
notebook``, ``empty``, ``unknown exercise``) or its exercise set, found by :func:`detect_set` from
otter's metadata, the ``otter.Notebook("<set>.ipynb")`` line, or the functions it defines. No
message about a file ever quotes its content. :func:`prepare_copy` makes the copy a job grades.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .autograders import LIBRARY, ExerciseSet
from .files import Refused, SubmittedFolder, not_regular, read_file

MAX_NOTEBOOK_BYTES = 64_000_000


@dataclass
class Submission:
    """One entry of the submissions folder and what grading found out about it."""

    path: Path
    name: str  # relative to the submissions folder
    sha256: str = ""
    status: str = ""  # set when the file cannot be graded at all
    detail: str = ""
    exercise: str = ""
    notebook: dict | None = None
    mentions_library: bool = False
    row: dict[str, Any] = field(default_factory=dict)
    folder: SubmittedFolder | None = field(default=None, repr=False)  # what it is read through

    def read(self) -> bytes:
        """The file's bytes (at most ``MAX_NOTEBOOK_BYTES``), never following a link; :class:`Refused`."""
        if self.folder is not None:
            return self.folder.read(self.name, MAX_NOTEBOOK_BYTES)
        return read_file(self.path.parent, (self.path.name,), MAX_NOTEBOOK_BYTES)


_NOT_SEARCHED = {
    "a folder too deep": "a folder nested too deeply: it was not searched",
    "an unreadable folder": "a folder that could not be opened: it was not searched",
}


def discover(folder: SubmittedFolder, skip: set[Path]) -> list[Submission]:
    """Every entry under ``folder`` but folders, hidden ones, ``__pycache__`` and ``skip`` (the score table).

    Entries that are not regular files get their status here and are never read.
    """
    skip_ids = set()
    for p in skip:
        with contextlib.suppress(OSError):
            st = os.stat(p)
            skip_ids.add((st.st_dev, st.st_ino))
    subs = []
    for name, kind in folder.entries(skip_ids):
        sub = Submission(path=folder.path / name, name=name, folder=folder)
        if kind in _NOT_SEARCHED:
            sub.status, sub.detail = "not a notebook", _NOT_SEARCHED[kind]
        elif kind != "a file":
            refused = not_regular(kind)
            sub.status, sub.detail = refused.status, refused.detail
        subs.append(sub)
    return subs


def code_source(nb: dict) -> list[str]:
    """The source of every code cell of a notebook (read as plain JSON)."""
    out = []
    for cell in nb.get("cells", []):
        if isinstance(cell, dict) and cell.get("cell_type") == "code":
            src = cell.get("source", "")
            out.append("".join(src) if isinstance(src, list) else str(src))
    return out


def detect_set(nb: dict, sets: dict[str, ExerciseSet]) -> str:
    """The exercise set of a notebook: otter's metadata, the grader line, or the functions defined."""
    meta = nb.get("metadata", {}).get("otter", {})
    name = meta.get("assignment_name") if isinstance(meta, dict) else None
    if name in sets:
        return name
    code = "\n".join(code_source(nb))
    for found in re.findall(r"otter\.Notebook\(\s*['\"]([^'\"]+)\.ipynb['\"]", code):
        if found in sets:
            return found
    defined = set(re.findall(r"^\s*def\s+(\w+)\s*\(", code, flags=re.M))
    scores = {s: len(defined & info.answer_names) / len(info.answer_names) for s, info in sets.items()}
    best = max(scores, key=scores.get, default="")
    return best if best and scores[best] >= 0.5 else ""


@contextlib.contextmanager
def quiet_nbformat() -> Iterator[None]:
    """Silence nbformat's log and warnings, which quote the notebook (a validation error prints the
    offending cell): nothing of a submission is written to the console."""
    from traitlets.log import get_logger

    log = get_logger()
    logger = log.logger if isinstance(log, logging.LoggerAdapter) else log
    disabled = logger.disabled
    logger.disabled = True
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.disabled = disabled


class NotANotebook(ValueError):
    """Why some bytes are not a notebook, in the grader's words (never quoting them)."""


def parse_notebook(data: bytes) -> Any:
    """The notebook (nbformat 4) in ``data``, or :class:`NotANotebook` saying why, without its content."""
    import nbformat

    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise NotANotebook("the file is not UTF-8 text") from None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:  # its message has no content, only the position
        raise NotANotebook(f"the file is not JSON (line {e.lineno}, column {e.colno})") from None
    except RecursionError:
        raise NotANotebook("the file's JSON is nested too deeply") from None
    except ValueError:
        raise NotANotebook("the file is not JSON") from None
    if not isinstance(raw, dict):
        raise NotANotebook("the file is JSON but not a notebook (not a JSON object)")
    try:
        with quiet_nbformat():
            nb = nbformat.reads(text, as_version=4)
    except Exception as e:  # nbformat's messages quote the file: only the kind of error is kept
        raise NotANotebook(f"the file is JSON but nbformat cannot read it as a notebook ({type(e).__name__})") \
            from None
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        raise NotANotebook("the file is JSON but not a notebook (it has no list of cells)")
    return nb


def inspect(sub: Submission, sets: dict[str, ExerciseSet]) -> None:
    """Read a submission (never writing to it) and set its exercise, or the status that stops it."""
    if sub.status:  # not a regular file: never read
        return
    try:
        data = sub.read()
    except Refused as e:
        sub.status, sub.detail = e.status, e.detail
        return
    except OSError as e:
        sub.status, sub.detail = "not a notebook", f"the file cannot be read: {e.strerror or type(e).__name__}"
        return
    sub.sha256 = hashlib.sha256(data).hexdigest()
    if not data.strip():
        sub.status, sub.detail = "empty", "the file is empty"
        return
    try:
        nb = parse_notebook(data)
    except NotANotebook as e:
        sub.status, sub.detail = "not a notebook", f"not a readable notebook: {e}"
        return
    code = code_source(nb)
    if not any(src.strip() for src in code):
        sub.status, sub.detail = "empty", "the notebook has no code"
        return
    try:
        sub.exercise = detect_set(nb, sets)
    except Exception as e:  # a malformed notebook (metadata that is not a mapping, ...): no content quoted
        sub.status, sub.detail = "not a notebook", f"not a readable notebook: its cells or metadata are " \
            f"malformed ({type(e).__name__})"
        return
    if not sub.exercise:
        sub.status = "unknown exercise"
        sub.detail = "not one of the exercise sets: " + ", ".join(sets)
        return
    sub.notebook = nb
    sub.mentions_library = any(re.search(rf"\b{LIBRARY}\b", src) for src in code)


def prepare_copy(nb: dict, exercise: str) -> dict:
    """The notebook the worker grades: the submission's cells, with otter's metadata and kernel set."""
    import nbformat

    nb = json.loads(json.dumps(nb))  # a deep copy; the submission itself is never touched
    nb = nbformat.from_dict(nb)
    nb.setdefault("metadata", {})
    otter_meta = nb.metadata.get("otter")
    if not isinstance(otter_meta, dict):
        otter_meta = {}
    otter_meta["assignment_name"] = exercise
    nb.metadata["otter"] = otter_meta
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    for cell in nb.cells:
        cell.pop("id", None)
    nb["nbformat"], nb["nbformat_minor"] = 4, 4
    return nb

