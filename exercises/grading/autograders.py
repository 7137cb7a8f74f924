"""The release: every autograder read into memory once, before any submission runs.

:func:`load_release` reads each ``<set>/autograder/*-autograder_*.zip`` of a release built by
``make exercises``: its test files, the points of each question, the names of the answers the
tests check, and the checks package shipped in the zip (``files/exercise_checks/``), imported
straight from the zip's bytes (:class:`PackageFromMemory`) under a name of its own per set. No
file of the release is read again while submissions run; :func:`snapshot` and
:func:`restore_changes` put back anything that changed in the release folder meanwhile.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import inspect
import io
import json
import re
import sys
import types
import zipfile
from dataclasses import dataclass
from pathlib import Path

CHECKS_MODULE = "exercise_checks"  # the package the tests import
LIBRARY = "transformer_lib"  # the course library: the reference the checks compare answers with


def skip_slow_imports() -> None:
    """Skip jsonschema's optional ``rfc3987_syntax``, which builds a grammar on import (~1.5 s)."""
    sys.modules.setdefault("rfc3987_syntax", None)


@dataclass
class ExerciseSet:
    """One exercise set of the release, held in memory for the whole batch."""

    name: str
    zip_bytes: bytes
    tests: dict[str, str]  # question -> test file source
    possible: dict[str, float]  # question -> points possible
    answer_names: set[str]  # the functions the tests check
    checks: types.ModuleType  # the checks package shipped in the autograder


def question_key(name: str) -> tuple:
    """Sort key putting ``q2`` before ``q10``."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))


class PackageFromMemory(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports one package whose source files are held in memory (``relative path -> source``).

    While :meth:`load` runs, it sits first on ``sys.meta_path`` and answers for the package and
    its submodules only, so the package's relative imports (``from .compare import ...``) find
    their siblings in the same memory; every module's file name in tracebacks is ``origin``
    followed by its path.
    """

    def __init__(self, name: str, sources: dict[str, str], origin: str) -> None:
        self.name, self.sources, self.origin = name, sources, origin

    def _relative(self, fullname: str) -> str | None:
        if fullname == self.name:
            return "__init__.py"
        if fullname.startswith(self.name + "."):
            return fullname[len(self.name) + 1:].replace(".", "/") + ".py"
        return None

    def find_spec(self, fullname: str, path: object = None,
                  target: object = None) -> importlib.machinery.ModuleSpec | None:
        rel = self._relative(fullname)
        if rel is None or rel not in self.sources:
            return None
        return importlib.util.spec_from_loader(fullname, self, origin=f"{self.origin}/{rel}",
                                               is_package=fullname == self.name)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None  # the default module object

    def exec_module(self, module: types.ModuleType) -> None:
        rel = self._relative(module.__name__)
        exec(compile(self.sources[rel], f"{self.origin}/{rel}", "exec"), module.__dict__)

    def load(self) -> types.ModuleType:
        """Import the package (and, through its ``__init__``, its submodules) from memory."""
        for key in [k for k in sys.modules if k == self.name or k.startswith(self.name + ".")]:
            del sys.modules[key]  # an earlier load of the same release
        sys.meta_path.insert(0, self)
        try:
            return importlib.import_module(self.name)
        finally:
            sys.meta_path.remove(self)


def _checks_package(zf: zipfile.ZipFile, set_name: str, origin: str) -> types.ModuleType:
    """The checks package of one autograder zip, imported from memory as ``exercise_checks_<set>``."""
    prefix = f"files/{CHECKS_MODULE}/"
    sources = {n[len(prefix):]: zf.read(n).decode() for n in zf.namelist()
               if n.startswith(prefix) and n.endswith(".py")}
    if "__init__.py" not in sources:
        raise SystemExit(f"{origin} holds no {prefix}__init__.py: rebuild the release with `make exercises`")
    name = f"{CHECKS_MODULE}_{re.sub(r'[^0-9A-Za-z_]', '_', set_name)}"
    return PackageFromMemory(name, sources, f"{origin}::{prefix.rstrip('/')}").load()


def load_release(release: Path) -> dict[str, ExerciseSet]:
    """Read every ``<set>/autograder/*-autograder_*.zip`` of the release into memory."""
    skip_slow_imports()
    from otter.test_files import ExceptionTestFile

    sets: dict[str, ExerciseSet] = {}
    for zip_path in sorted(release.glob("*/autograder/*-autograder_*.zip")):
        data = zip_path.read_bytes()
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            config = json.loads(zf.read("otter_config.json"))
            name = config.get("assignment_name") or zip_path.parent.parent.name
            tests = {
                Path(n).stem: zf.read(n).decode()
                for n in zf.namelist()
                if n.startswith("tests/") and n.endswith(".py")
            }
            checks = _checks_package(zf, name, str(zip_path))
        possible, answers = {}, set()
        for q in sorted(tests, key=question_key):
            tf = ExceptionTestFile.from_string(tests[q], path=f"tests/{q}.py")
            possible[q] = float(tf.possible)
            for case in tf.test_cases:
                answers.update(inspect.signature(case.body.test_func).parameters)  # the answers it takes
        tests = {q: tests[q] for q in sorted(tests, key=question_key)}
        sets[name] = ExerciseSet(name, data, tests, possible, answers, checks)
    return sets


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (the release is small): path -> bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def restore_changes(folder: Path, before: dict[str, bytes]) -> list[str]:
    """Put back any file of ``folder`` that changed since ``before``; return what changed."""
    changed = []
    for rel, data in before.items():
        p = folder / rel
        try:
            same = p.is_file() and p.read_bytes() == data
        except OSError:
            same = False
        if not same:
            changed.append(rel)
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(data)
    return changed
