"""Submissions: find them, read them (never writing to them), tell which set each belongs to.

Every file under the submissions folder is one submission (hidden files and ``__pycache__``
skipped). :func:`inspect` reads it and either gives it the status that stops it (``not a
notebook``, ``empty``, ``unknown exercise``) or its exercise set, found by :func:`detect_set`
from otter's metadata, the ``otter.Notebook("<set>.ipynb")`` line, or the functions it defines.
:func:`prepare_copy` makes the copy a job grades.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .autograders import LIBRARY, ExerciseSet

MAX_NOTEBOOK_BYTES = 64_000_000


@dataclass
class Submission:
    """One file of the submissions folder and what grading found out about it."""

    path: Path
    name: str  # relative to the submissions folder
    sha256: str = ""
    status: str = ""  # set when the file cannot be graded at all
    detail: str = ""
    exercise: str = ""
    notebook: dict | None = None
    mentions_library: bool = False
    row: dict[str, Any] = field(default_factory=dict)


def discover(folder: Path, skip: set[Path]) -> list[Submission]:
    """Every file under ``folder`` but hidden ones, ``__pycache__`` and ``skip`` (the score table)."""
    files = []
    for p in sorted(folder.rglob("*")):
        rel = p.relative_to(folder)
        if any(part.startswith(".") for part in rel.parts) or "__pycache__" in rel.parts:
            continue
        if p.is_file() and p.resolve() not in skip:
            files.append(Submission(path=p, name=str(rel)))
    return files


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


def inspect(sub: Submission, sets: dict[str, ExerciseSet]) -> None:
    """Read a submission (never writing to it) and set its exercise, or the status that stops it."""
    import nbformat

    try:
        size = sub.path.stat().st_size
        if size > MAX_NOTEBOOK_BYTES:
            sub.status = "not a notebook"
            sub.detail = f"the file is {size / 1e6:.0f} MB, too large for a notebook"
            return
        data = sub.path.read_bytes()
    except OSError as e:
        sub.status, sub.detail = "not a notebook", f"the file cannot be read: {e.strerror or e}"
        return
    sub.sha256 = hashlib.sha256(data).hexdigest()
    if not data.strip():
        sub.status, sub.detail = "empty", "the file is empty"
        return
    try:
        nb = nbformat.reads(data.decode("utf-8-sig"), as_version=4)
        if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
            raise ValueError("no list of cells")
    except Exception as e:
        sub.status, sub.detail = "not a notebook", f"not a readable notebook: {str(e).splitlines()[0][:120]}"
        return
    code = code_source(nb)
    if not any(src.strip() for src in code):
        sub.status, sub.detail = "empty", "the notebook has no code"
        return
    try:
        sub.exercise = detect_set(nb, sets)
    except Exception as e:  # a malformed notebook (metadata that is not a mapping, ...)
        sub.status, sub.detail = "not a notebook", f"not a readable notebook: {str(e)[:120]}"
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

