"""Tests for the graded exercises (``exercises/``): authoring, release, self-check and batch grading.

One release is built per test session (with ``otter assign``) into a temporary folder, and one
mixed folder of submissions is graded once with ``exercises/grade.py``: every reference solution,
every student notebook as released, notebooks that raise, loop forever, exhaust memory, call
``sys.exit``, print megabytes, kill their kernel, are not notebooks or are empty, and notebooks
that tamper with the checks. The tests then read the rows. Under pytest-xdist the release and the
grades are built by whichever worker gets there first and shared through a file lock.
"""

from __future__ import annotations

import csv
import hashlib
import importlib.util
import json
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

import nbformat
import numpy as np
import psutil
import pytest
from filelock import FileLock

ROOT = Path(__file__).resolve().parent.parent
EXERCISES = ROOT / "exercises"
SETS = sorted(p.parent.name for p in EXERCISES.glob("*/instructor.ipynb"))
MIXED_SET = "01_softmax_cosine"  # the set the broken and tampering submissions are made from
LIMITS = dict(cpu_seconds=12, wall_seconds=180, memory_mb=2048)  # per submission of the mixed batch


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"exercises_{name}", EXERCISES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module


release_tool = _load("release")
grade_tool = _load("grade")
# Grading sandboxes each submission when the tests run as root with bubblewrap (as `make test`
# does in CI); elsewhere the same batches run unsandboxed, and the attacks' checks are skipped.
TRUSTED = not grade_tool.sandbox_kind()
TRUST = ["--trusted"] if TRUSTED else []
needs_sandbox = pytest.mark.skipif(TRUSTED, reason="the sandbox needs root and bubblewrap")


# --------------------------------------------------------------------------------------------
# Submissions made from the released notebooks
# --------------------------------------------------------------------------------------------


def _with_cells(nb, cells: list[tuple[int, str]]):
    """A copy of ``nb`` with code cells inserted (index -1 appends)."""
    nb = nbformat.from_dict(json.loads(json.dumps(nb)))
    for index, source in cells:
        cell = nbformat.v4.new_code_cell(source)
        cell.pop("id", None)
        if index == -1:
            nb.cells.append(cell)
        else:
            nb.cells.insert(index, cell)
    return nb


def _index_after_check(nb, question: str) -> int:
    check = f'grader.check("{question}")'
    return next(i for i, c in enumerate(nb.cells) if c.cell_type == "code" and check in c.source) + 1


TAMPER_CHECKS = """\
# Tampering: make every comparison and every checker pass, whatever the answers are.
import numpy as np
import exercise_checks
np.allclose = lambda *a, **k: True
np.isclose = lambda a, b, *r, **k: np.ones(np.broadcast(a, b).shape, dtype=bool)
np.array_equal = lambda *a, **k: True
np.testing.assert_allclose = lambda *a, **k: None
np.testing.assert_array_equal = lambda *a, **k: None
for _name in dir(exercise_checks):
    if _name.startswith(("check_", "expect_")):
        setattr(exercise_checks, _name, lambda *a, **k: None)
exercise_checks.call = lambda name, fn, *a, **k: None
"""

TAMPER_OTTER = """\
# Tampering: rewrite otter's test runner so that every test case reports a pass.
from otter.test_files import abstract_test, exception_test

def _always_pass(self, global_environment):
    self.test_case_results = [
        abstract_test.TestCaseResult(test_case=tc, message="passed", passed=True) for tc in self.test_cases
    ]

exception_test.ExceptionTestFile.run = _always_pass
"""

TAMPER_FILES = """\
# Tampering: overwrite the autograder's files within reach (tests, checks, config) with ones that pass.
import glob, os
for path in glob.glob("tests/*.py") + glob.glob("../source/tests/*.py"):
    name = os.path.splitext(os.path.basename(path))[0]
    with open(path, "w") as f:
        f.write(
            "from otter.test_files import test_case\\nOK_FORMAT = False\\nname = %r\\npoints = 100\\n"
            "@test_case(points=100)\\ndef test_free():\\n    pass\\n" % name
        )
for path in ["exercise_checks.py", *glob.glob("../source/files/*.py")]:
    with open(path, "a") as f:
        f.write("\\ndef call(*args, **kwargs):\\n    return None\\n")
for path in glob.glob("../source/*.json"):
    with open(path, "w") as f:
        f.write("{}")
"""

READ_HIDDEN = """\
# Reading the hidden tests: they are in the grading folder, so print them all.
import glob
sources = {path: open(path).read() for path in glob.glob("tests/*.py") + glob.glob("../source/tests/*.py")}
print(len(sources), "test files read;", sum("hidden=True" in s for s in sources.values()), "with hidden cases")
"""

# The attacks of a hostile submission. Each runs inside its own job's sandbox; the tests check
# that it changes nothing outside its job (other rows, the CSV, processes left behind).
SABOTEUR = """\
# A daemon: double fork, then execve with an empty environment (no marker to be found by), then
# for 30 s mark every answer recorded by the other jobs as a conflict (worth 0) and rewrite the table
# and its journal. The grader's source tells where both are; the test fills in the paths.
import os, sys
CODE = "\\n".join([
    "import glob, os, time",
    "for _ in range(100):",
    "    for answer in glob.glob('RECORDS/*.npz'):",
    "        try:",
    "            open(answer[:-4] + '.conflict', 'w').close()",
    "        except OSError:",
    "            pass",
    "    for f in glob.glob('CSV*'):",
    "        try:",
    "            open(f, 'w').write('submission,status')",
    "        except OSError:",
    "            pass",
    "    time.sleep(0.3)",
])
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execve(sys.executable, [sys.executable, "-c", CODE], {})
    os._exit(0)
"""

BLOCK_OUTPUT = """\
# Put a folder where the grader will write its table, so that it cannot write it.
import os
try:
    os.makedirs('CSV')
except OSError:
    pass
"""


def aimed(attack: str, out: Path) -> str:
    """An attack aimed at this batch: its score table ``out`` and its jobs' record folders."""
    records = f"{tempfile.gettempdir()}/exercise-grading-*/job-*/record"
    return attack.replace("RECORDS", records).replace("CSV", str(out))


DISGUISED_IMPORT = """\
# Take the answers from the reference library, imported under a name built at run time.
import importlib
try:
    _ref = importlib.import_module("transformer" + "_lib")
    softmax, cosine_similarity = _ref.softmax, _ref.cosine_similarity
except Exception:
    pass
"""

STACK_PEEK = """\
# Take the answers from the library that the checks module imported.
import sys
try:
    _ref = sys.modules["exercise_checks"].tl
    softmax, cosine_similarity = _ref.softmax, _ref.cosine_similarity
except Exception:
    pass
"""

CHILD_MEMORY = """\
# Three child processes of 900 MB each: every one under the per-process limit, together over the job's.
import subprocess, sys
code = "import time; b = b'x' * (900 * 2**20); time.sleep(30)"
children = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(3)]
for child in children:
    child.wait()
"""

NAIVE_SOFTMAX = """\
    x = np.asarray(x, dtype=float)
    e = np.exp(x)  # no maximum subtracted: overflows for large logits
    return e / np.sum(e, axis=axis, keepdims=True)
"""


def make_submissions(release: Path, folder: Path, attacks: bool = True) -> dict[str, dict]:
    """Write the mixed folder of submissions; return what each should get.

    ``attacks``: include the hostile submissions, which only a sandbox can contain; they aim
    at the score table the batch writes, ``grades.csv`` beside ``folder``.
    """
    out = folder.parent / "grades.csv"
    folder.mkdir(parents=True, exist_ok=True)
    expected: dict[str, dict] = {}
    for s in SETS:
        solution = release / s / "autograder" / f"{s}.ipynb"
        student = release / s / "student" / f"{s}.ipynb"
        shutil.copyfile(solution, folder / f"solution {s}.ipynb")
        expected[f"solution {s}.ipynb"] = {"status": "ok", "full": True, "exercise": s}
        (folder / "students").mkdir(exist_ok=True)
        shutil.copyfile(student, folder / "students" / f"unchanged_{s}.json")  # any file name
        expected[f"students/unchanged_{s}.json"] = {"status": "ok", "zero": True, "exercise": s}

    sol = nbformat.read(release / MIXED_SET / "autograder" / f"{MIXED_SET}.ipynb", as_version=4)
    stu = nbformat.read(release / MIXED_SET / "student" / f"{MIXED_SET}.ipynb", as_version=4)
    after_q2 = _index_after_check(sol, "q2")

    def write(name: str, nb, **expect) -> None:
        nbformat.write(nb, folder / name)
        expected[name] = {"exercise": MIXED_SET, **expect}

    write("raises.ipynb", _with_cells(sol, [(after_q2, "raise ValueError('a bug in my scratch cell')")]),
          status="error", full=True)
    write("loops.ipynb", _with_cells(sol, [(after_q2, "while True:\n    pass")]), status="timeout", full=True)
    hog = "import numpy as np\nhog = [np.ones(10**7) for _ in range(10**5)]"
    write("memory.ipynb", _with_cells(sol, [(after_q2, hog)]), status="out of memory", full=True)
    write("exits.ipynb", _with_cells(sol, [(after_q2, "import sys\nsys.exit(3)")]), status="error", full=True)
    write("kills_kernel.ipynb", _with_cells(sol, [(after_q2, "import os\nos._exit(3)")]), status="error", partial=True)
    write("prints.ipynb", _with_cells(sol, [(after_q2, "for _ in range(40):\n    print('x' * 500_000)")]),
          status="ok", full=True)
    write("tampers_checks.ipynb", _with_cells(stu, [(1, TAMPER_CHECKS)]), status="tampered", zero=True)
    write("tampers_otter.ipynb", _with_cells(stu, [(1, TAMPER_OTTER)]), status="tampered", zero=True)
    write("tampers_files.ipynb", _with_cells(stu, [(1, TAMPER_FILES)]), status="tampered", zero=True)
    naive = nbformat.from_dict(json.loads(json.dumps(sol)))
    cell = next(c for c in naive.cells if c.cell_type == "code" and c.source.startswith("def softmax("))
    head = cell.source.split('"""', 2)
    cell.source = '"""'.join(head[:2]) + '"""\n' + NAIVE_SOFTMAX
    write("reads_hidden_tests.ipynb", _with_cells(naive, [(1, READ_HIDDEN)]), status="ok", naive_softmax=True)
    last = len(stu.cells) - 1  # before the final check_all
    for name, nb, expect in [] if not attacks else [
        ("attack_saboteur.ipynb", _with_cells(stu, [(1, aimed(SABOTEUR, out))]), dict(status="ok", zero=True)),
        ("attack_blocks_output.ipynb", _with_cells(stu, [(1, aimed(BLOCK_OUTPUT, out))]),
         dict(status="ok", zero=True)),
        ("attack_disguised_import.ipynb", _with_cells(stu, [(last, DISGUISED_IMPORT)]),
         dict(status="tampered", zero=True)),
        ("attack_stack_peek.ipynb", _with_cells(stu, [(last, STACK_PEEK)]), dict(status="ok", zero=True)),
        ("attack_child_memory.ipynb", _with_cells(sol, [(after_q2, CHILD_MEMORY)]), dict(status="out of memory")),
    ]:
        write(name, nb, **expect)

    (folder / "not_a_notebook.ipynb").write_text("this is not JSON {")
    expected["not_a_notebook.ipynb"] = {"status": "not a notebook"}
    (folder / "essay.docx").write_bytes(b"PK\x03\x04 not a notebook at all")
    expected["essay.docx"] = {"status": "not a notebook"}
    (folder / "empty.ipynb").write_bytes(b"")
    expected["empty.ipynb"] = {"status": "empty"}
    nbformat.write(nbformat.v4.new_notebook(), folder / "no_cells.ipynb")
    expected["no_cells.ipynb"] = {"status": "empty"}
    other = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print('hello')")])
    nbformat.write(other, folder / "some_other_notebook.ipynb")
    expected["some_other_notebook.ipynb"] = {"status": "unknown exercise"}
    return expected


def _hash_tree(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _shared(tmp_path_factory, worker_id: str, name: str, build):
    """Build once per session: under xdist the first worker to get the lock builds, others read the result."""
    if worker_id == "master":
        return build(tmp_path_factory.mktemp(name))
    shared = tmp_path_factory.getbasetemp().parent
    with FileLock(str(shared / f"{name}.lock")):
        cache = shared / f"{name}.json"
        if cache.is_file():
            return json.loads(cache.read_text())
        data = build(shared / name)
        cache.write_text(json.dumps(data))
        return data


def _build_release(root: Path) -> dict:
    start = time.monotonic()
    release_tool.build_release(root / "release", jobs=2, run_tests=False)
    return {"release": str(root / "release"), "seconds": time.monotonic() - start}


@pytest.fixture(scope="session")
def release(tmp_path_factory, worker_id) -> Path:
    """The release built from the instructor notebooks with otter assign, once per session."""
    return Path(_shared(tmp_path_factory, worker_id, "exercise_release", _build_release)["release"])


@pytest.fixture(scope="session")
def graded(tmp_path_factory, worker_id, release) -> dict:
    """The mixed folder of submissions graded by exercises/grade.py, once per session."""

    def build(root: Path) -> dict:
        submissions = root / "submissions"
        expected = make_submissions(release, submissions, attacks=not TRUSTED)
        before = _hash_tree(submissions)
        start = time.monotonic()
        rows = grade_tool.grade_folder(submissions, root / "grades.csv", release=release, jobs=2,
                                       limits=grade_tool.Limits(**LIMITS), progress=False, trusted=TRUSTED)
        seconds = time.monotonic() - start
        time.sleep(5)  # what a submission left running would do after the grader returned
        with open(root / "grades.csv", newline="") as f:
            on_disk = list(csv.DictReader(f))
        left = [p.pid for p in psutil.process_iter(["uids"])
                if p.info["uids"] and p.info["uids"].real >= grade_tool.JOB_UID_BASE]
        return {"csv": str(root / "grades.csv"), "rows": rows, "expected": expected, "on_disk": on_disk,
                "left_running": left, "unchanged": before == _hash_tree(submissions), "seconds": seconds}

    return _shared(tmp_path_factory, worker_id, "exercise_grades", build)


def _row(graded, name: str) -> dict:
    return next(r for r in graded["rows"] if r["submission"] == name)


# --------------------------------------------------------------------------------------------
# The release
# --------------------------------------------------------------------------------------------


def test_there_are_five_sets_of_three_to_six_questions(release):
    assert len(SETS) >= 5
    sets = grade_tool.load_release(release)
    assert sorted(sets) == SETS
    for info in sets.values():
        assert 3 <= len(info.tests) <= 6, info.name
        assert all(points > 0 for points in info.possible.values())


@pytest.mark.parametrize("name", SETS)
def test_student_notebook_has_no_solutions_and_no_hidden_tests(release, name):
    student = release / name / "student"
    nb = nbformat.read(student / f"{name}.ipynb", as_version=4)
    text = json.dumps(nb)
    assert "BEGIN SOLUTION" not in text and "END SOLUTION" not in text
    assert "hidden=True" not in text and "hidden: true" not in text
    assert (student / "exercise_checks.py").is_file()
    public = nb.metadata["otter"]["tests"]
    assert public, "the public tests travel in the notebook's metadata"
    solution = nbformat.read(release / name / "autograder" / f"{name}.ipynb", as_version=4)
    solved = {c.source for c in solution.cells if c.cell_type == "code"}
    answers = [c.source for c in nb.cells if c.cell_type == "code" and c.source.startswith("def ")]
    assert answers and not any(a in solved for a in answers), "every answer cell must differ from the solution"
    with zipfile_open(release / name) as zf:
        hidden = sum(zf.read(n).decode().count("hidden=True") for n in zf.namelist() if n.startswith("tests/"))
    assert hidden >= len(public), "each question has hidden tests"


def zipfile_open(result: Path):
    import zipfile

    return zipfile.ZipFile(next((result / "autograder").glob("*-autograder_*.zip")))


# --------------------------------------------------------------------------------------------
# Instructor notebooks and student self-checks
# --------------------------------------------------------------------------------------------


def _run_cells(path: Path, monkeypatch) -> tuple[dict, list[nbformat.NotebookNode], list[str]]:
    """Run a notebook's code cells top to bottom in one namespace, in its own folder.

    Like a kernel (``Restart & Run All`` with errors allowed) but in this process, where numpy,
    torch and otter are already imported. Returns the namespace, the ``grader.check`` cells
    (not run) and the errors raised by the other cells.
    """
    monkeypatch.chdir(path.parent)
    monkeypatch.syspath_prepend(str(path.parent))
    monkeypatch.delitem(sys.modules, "exercise_checks", raising=False)
    nb = nbformat.read(path, as_version=4)
    namespace: dict = {"__name__": "__main__"}
    checks, errors = [], []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        if cell.source.startswith("grader.check"):
            checks.append(cell)
            continue
        try:
            exec(compile(cell.source, f"{path.name}, cell {index}", "exec"), namespace)
        except Exception as e:
            errors.append(f"cell {index} ({cell.source.splitlines()[0]}): {type(e).__name__}: {e}")
    sys.modules.pop("exercise_checks", None)
    return namespace, checks, errors


@pytest.mark.parametrize("name", SETS)
def test_instructor_notebook_passes_its_own_tests(name, monkeypatch):
    """Run the instructor notebook top to bottom: every test cell calls its test on the solution."""
    nb = nbformat.read(EXERCISES / name / "instructor.ipynb", as_version=4)
    tests = [c for c in nb.cells if c.cell_type == "code" and "\ndef test_" in "\n" + c.source]
    assert len(tests) >= 3 * 4, "each question has public and hidden tests"
    _, _, errors = _run_cells(EXERCISES / name / "instructor.ipynb", monkeypatch)
    assert not errors, "\n".join(errors)


@pytest.mark.parametrize("name", SETS)
def test_released_student_notebook_self_checks_fail_with_pointers(release, name, tmp_path, monkeypatch):
    """Do what a student does first: run the released notebook and every grader.check; all fail, saying why."""
    student = tmp_path / "student"
    shutil.copytree(release / name / "student", student)
    namespace, checks, _ = _run_cells(student / f"{name}.ipynb", monkeypatch)
    monkeypatch.syspath_prepend(str(student))
    questions = [c for c in checks if c.source.startswith('grader.check("')]
    assert len(questions) >= 3
    for cell in questions:
        result = eval(cell.source, namespace)
        text = repr(result)
        assert not result.passed_all and "Test case failed" in text, text
        assert "returned None: its body is still `...`" in text, text
    sys.modules.pop("exercise_checks", None)


def test_a_notebook_that_waits_forever_is_stopped_with_its_kernel(release, tmp_path):
    """The wall-clock limit: the worker and the notebook's kernel are killed, nothing is left running."""
    import psutil

    folder = tmp_path / "subs"
    folder.mkdir()
    stu = nbformat.read(release / MIXED_SET / "student" / f"{MIXED_SET}.ipynb", as_version=4)
    nbformat.write(_with_cells(stu, [(1, "import time\ntime.sleep(3600)")]), folder / "sleeps.ipynb")
    work = tmp_path / "work"
    work.mkdir()
    rows = grade_tool.grade_folder(folder, tmp_path / "grades.csv", release=release, jobs=1,
                                   limits=grade_tool.Limits(cpu_seconds=20, wall_seconds=15, memory_mb=2048),
                                   progress=False, workdir=work, trusted=TRUSTED)
    assert rows[0]["status"] == "timeout" and "stopped" in rows[0]["detail"]
    left = []
    for p in psutil.process_iter():
        try:
            if str(work) in p.environ().get("EXERCISES_RECORD_DIR", ""):
                left.append(p)
        except psutil.Error:
            continue
    assert not left
    assert not list(work.iterdir()), "the work folder is cleaned up"


def test_a_notebook_that_sleeps_is_stopped_once_idle(release, tmp_path, monkeypatch):
    """No CPU used for IDLE_SECONDS: the notebook is waiting, not computing, and gives its slot back."""
    monkeypatch.setattr(grade_tool, "IDLE_SECONDS", 8)
    folder = tmp_path / "subs"
    folder.mkdir()
    stu = nbformat.read(release / MIXED_SET / "student" / f"{MIXED_SET}.ipynb", as_version=4)
    nbformat.write(_with_cells(stu, [(1, "import time\ntime.sleep(3600)")]), folder / "sleeps.ipynb")
    start = time.monotonic()
    rows = grade_tool.grade_folder(folder, tmp_path / "grades.csv", release=release, jobs=1,
                                   limits=grade_tool.Limits(cpu_seconds=60, wall_seconds=300, memory_mb=2048),
                                   progress=False, trusted=TRUSTED)
    assert rows[0]["status"] == "timeout" and "no computation for 8 s" in rows[0]["detail"], rows[0]
    assert time.monotonic() - start < 120


def test_two_batches_at_once_never_share_a_job_user():
    # every process of a job's uid is killed when the job ends: a shared uid would let one
    # batch kill (or write into) the other's jobs
    first, second = grade_tool.JobUsers(2), grade_tool.JobUsers(2)
    held = first.uids + second.uids
    first.release()
    second.release()
    assert len(held) == len(set(held)) == 4
    again = grade_tool.JobUsers(2)  # released uids are free again
    assert again.uids == held[:2]
    again.release()


def test_grading_refuses_to_start_without_a_sandbox_unless_trusted(release, tmp_path, monkeypatch):
    folder = _two_ungradable(tmp_path)
    monkeypatch.setattr(grade_tool, "sandbox_kind", lambda: "")
    with pytest.raises(SystemExit, match="needs a sandbox.*--trusted"):
        grade_tool.grade_folder(folder, tmp_path / "grades.csv", release=release, progress=False)
    rows = grade_tool.grade_folder(folder, tmp_path / "grades.csv", release=release, progress=False, trusted=True)
    assert [r["status"] for r in rows] == ["empty", "not a notebook"]


@pytest.mark.parametrize("name", SETS)
def test_the_set_is_recognised_without_otter_metadata(release, name):
    """A student who copied their cells into a fresh notebook still gets the right set."""
    sets = grade_tool.load_release(release)
    nb = nbformat.read(release / name / "student" / f"{name}.ipynb", as_version=4)
    assert grade_tool.detect_set(nb, sets) == name
    nb.metadata = {}
    assert grade_tool.detect_set(nb, sets) == name  # from otter.Notebook("<set>.ipynb")
    nb.cells = [c for c in nb.cells if "otter" not in c.source]
    assert grade_tool.detect_set(nb, sets) == name  # from the functions it defines


def test_command_line_writes_grades_csv_in_the_current_directory(release, tmp_path, monkeypatch):
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "blank.ipynb").write_bytes(b"")
    (folder / "notes.txt").write_text("my answers are in my head")
    monkeypatch.chdir(tmp_path)
    grade_tool.main([str(folder), "--release", str(release), *TRUST])
    with open(tmp_path / "grades.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(r["submission"], r["status"]) for r in rows] == [("blank.ipynb", "empty"), ("notes.txt", "not a notebook")]
    assert sorted(p.name for p in folder.iterdir()) == ["blank.ipynb", "notes.txt"]


def _two_ungradable(tmp_path: Path) -> Path:
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "blank.ipynb").write_bytes(b"")
    (folder / "notes.txt").write_text("my answers are in my head")
    return folder


def test_the_score_table_is_checked_before_grading_and_its_checksum_printed(release, tmp_path, capsys):
    folder = _two_ungradable(tmp_path)
    (tmp_path / "taken").mkdir()
    with pytest.raises(SystemExit, match="--out must be a file path, got the folder"):
        grade_tool.main([str(folder), "--release", str(release), "--out", str(tmp_path / "taken"), *TRUST])
    out = tmp_path / "grades.csv"
    grade_tool.main([str(folder), "--release", str(release), "--out", str(out), *TRUST])
    printed = capsys.readouterr().out
    digest = hashlib.sha256(out.read_bytes()).hexdigest()
    assert f"sha256 of {out}: {digest}" in printed
    assert sorted(p.name for p in tmp_path.iterdir()) == ["grades.csv", "in", "taken"]  # no journal, no temp file


def test_a_table_that_cannot_be_moved_into_place_is_printed_and_kept_in_the_journal(
    release, tmp_path, capsys, monkeypatch
):
    folder = _two_ungradable(tmp_path)
    out = tmp_path / "grades.csv"

    def blocked(src, dst):  # as when a submission replaced the output path with a folder
        raise IsADirectoryError(21, "Is a directory")

    monkeypatch.setattr(grade_tool.os, "replace", blocked)
    with pytest.raises(SystemExit, match=r"could not write .*grades.csv \(Is a directory\).*grades.csv.journal"):
        grade_tool.main([str(folder), "--release", str(release), "--out", str(out), *TRUST])
    printed = capsys.readouterr().out
    assert "blank.ipynb,,empty" in printed and "notes.txt,,not a notebook" in printed
    assert (tmp_path / "grades.csv.journal").exists() and not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".grades.csv.")]  # no temp file left


# --------------------------------------------------------------------------------------------
# Grading the mixed folder
# --------------------------------------------------------------------------------------------


def test_every_submission_gets_one_row(graded):
    names = [r["submission"] for r in graded["rows"]]
    assert sorted(names) == sorted(graded["expected"])
    with open(graded["csv"], newline="") as f:
        assert [r["submission"] for r in csv.DictReader(f)] == names


def test_grading_never_modifies_the_submissions(graded):
    assert graded["unchanged"]


@pytest.mark.parametrize("kind", ["status", "points"])
def test_rows_match_what_each_submission_deserves(graded, kind):
    problems = []
    for name, want in graded["expected"].items():
        row = _row(graded, name)
        if kind == "status":
            if row["status"] != want["status"]:
                problems.append(f"{name}: status {row['status']!r}, expected {want['status']!r} ({row['detail']})")
            continue
        if "exercise" in want and row["exercise"] != want["exercise"]:
            problems.append(f"{name}: exercise {row['exercise']!r}")
        total, possible = float(row["total"] or 0), float(row["possible"] or 0)
        if want.get("full") and total != possible:
            problems.append(f"{name}: {total}/{possible}, expected full marks ({row['detail']})")
        if want.get("zero") and total != 0:
            problems.append(f"{name}: {total}/{possible}, expected 0 ({row['detail']})")
        if want.get("partial") and not 0 < total < possible:
            problems.append(f"{name}: {total}/{possible}, expected partial credit ({row['detail']})")
    assert not problems, "\n".join(problems)


@needs_sandbox
def test_the_table_on_disk_is_the_graders_own_after_the_batch_and_a_wait(graded):
    rows = [{k: v for k, v in r.items()} for r in graded["rows"]]
    on_disk = [{k: v for k, v in r.items() if v != ""} for r in graded["on_disk"]]
    assert on_disk == [{k: v for k, v in r.items() if v != ""} for r in rows]


@needs_sandbox
def test_no_process_of_any_job_outlives_the_batch(graded):
    assert graded["left_running"] == []


@needs_sandbox
def test_attacks_change_nothing_but_their_own_row(graded):
    # honest submissions graded in the same batch as the saboteur keep full marks, untouched
    for s in SETS:
        row = _row(graded, f"solution {s}.ipynb")
        assert (row["status"], row["total"]) == ("ok", row["possible"]), row
    assert "reference library" in _row(graded, "attack_disguised_import.ipynb")["detail"]


def test_reading_the_hidden_tests_earns_nothing(graded):
    """The hidden tests hold inputs, not answers: an overflowing softmax still fails them."""
    row = _row(graded, "reads_hidden_tests.ipynb")
    solution = _row(graded, f"solution {MIXED_SET}.ipynb")
    assert float(row["q2"]) < float(solution["q2"])
    assert float(row["q1"]) == float(solution["q1"])


def test_timeout_and_memory_details_are_reported(graded):
    assert "CPU time limit" in _row(graded, "loops.ipynb")["detail"]
    assert "memory limit" in _row(graded, "memory.ipynb")["detail"]
    assert "ValueError" in _row(graded, "raises.ipynb")["detail"]
    assert "SystemExit" in _row(graded, "exits.ipynb")["detail"]
    assert "kernel died" in _row(graded, "kills_kernel.ipynb")["detail"]
    assert "claimed" in _row(graded, "tampers_checks.ipynb")["detail"]


def test_seconds_per_submission_are_recorded(graded):
    timed = [float(r["seconds"]) for r in graded["rows"] if r["status"] in ("ok", "error", "tampered")]
    assert timed and all(0 < s < LIMITS["wall_seconds"] for s in timed)



# --------------------------------------------------------------------------------------------
# Hidden tests catch the naive answers that the public ones let through
# --------------------------------------------------------------------------------------------

NAIVE_ANSWERS = {
    "softmax that subtracts one maximum for the whole array": ("01_softmax_cosine", "q2", "softmax", """
def softmax(x, axis=-1):
    e = np.exp(x - np.max(x))
    return e / e.sum(axis=axis, keepdims=True)
"""),
    "cosine similarity that divides by a zero norm": ("01_softmax_cosine", "q1", "cosine_similarity", """
def cosine_similarity(A, B=None):
    B = A if B is None else B
    return (A / np.linalg.norm(A, axis=1, keepdims=True)) @ (B / np.linalg.norm(B, axis=1, keepdims=True)).T
"""),
    "scores that transpose K for two or four axes only": ("02_masked_attention", "q1", "attention_scores", """
def attention_scores(Q, K):
    K_T = np.transpose(K, (0, 1, 3, 2)) if K.ndim == 4 else K.T
    return Q @ K_T / np.sqrt(Q.shape[-1])
"""),
    "masked attention whose softmax does not subtract the maximum": (
        "02_masked_attention", "q4", "masked_attention", """
def masked_attention(Q, K, V, mask=None):
    scores = Q @ np.swapaxes(K, -1, -2) / np.sqrt(Q.shape[-1])
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    e = np.exp(scores)
    total = e.sum(axis=-1, keepdims=True)
    weights = np.divide(e, total, out=np.zeros_like(e), where=total > 0)
    return weights @ V, weights
"""),
    "decoder mask that assumes the padding is at the end": ("02_masked_attention", "q5", "decoder_mask", """
def decoder_mask(tokens, pad_id):
    seq = tokens.shape[1]
    lengths = (tokens != pad_id).sum(axis=1)
    keep = np.arange(seq)[None, :] < lengths[:, None]
    return np.tril(np.ones((seq, seq), dtype=bool))[None] & keep[:, None, :]
"""),
    "multi-head attention that takes the values from the keys": ("03_multi_head", "q3", "multi_head_attention", """
def multi_head_attention(query, key, value, params, num_heads, mask=None):
    b, q_len, d = query.shape
    def split(x):
        return x.reshape(b, x.shape[1], num_heads, d // num_heads).transpose(0, 2, 1, 3)
    q = split(query @ params["W_q"] + params["b_q"])
    k = split(key @ params["W_k"] + params["b_k"])
    v = split(key @ params["W_v"] + params["b_v"])
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(d // num_heads)
    if mask is not None:
        s = np.where(mask, s, -np.inf)
    w = np.exp(s - s.max(-1, keepdims=True))
    w = w / w.sum(-1, keepdims=True)
    return (w @ v).transpose(0, 2, 1, 3).reshape(b, q_len, d) @ params["W_o"] + params["b_o"], w
"""),
    "a rotation that only works for whole offsets": ("04_positional", "q2", "rotation_matrix", """
def rotation_matrix(phi, omega):
    c, s = np.cos(omega * int(phi)), np.sin(omega * int(phi))
    return np.array([[c, s], [-s, c]])
"""),
    "layer norm with the variance as mean(x**2) - mean**2": ("05_layers_decoding", "q1", "layer_norm", """
def layer_norm(x, gamma, beta, eps=1e-5):
    mean = x.mean(-1, keepdims=True)
    var = (x ** 2).mean(-1, keepdims=True) - mean ** 2
    return (x - mean) / np.sqrt(var + eps) * gamma + beta
"""),
    "greedy decoding one token too long": ("05_layers_decoding", "q4", "greedy_decode", """
def greedy_decode(next_token_logits, bos_id, eos_id, max_len):
    tokens = [bos_id]
    for _ in range(max_len):
        tokens.append(int(np.argmax(next_token_logits(tokens))))
        if tokens[-1] == eos_id:
            break
    return tokens
"""),
}


def _run_question(release: Path, set_name: str, question: str, answer: str, source: str, monkeypatch) -> tuple:
    """Run a question's released tests (public and hidden) on an answer; its (public, hidden) results."""
    from otter.test_files import ExceptionTestFile

    info = grade_tool.load_release(release)[set_name]
    namespace: dict = {"np": np}
    exec(source, namespace)
    monkeypatch.setitem(sys.modules, "exercise_checks", info.checks)
    tests = ExceptionTestFile.from_string(info.tests[question], path=f"tests/{question}.py")
    with np.errstate(all="ignore"):
        tests.run({answer: namespace[answer]})
    public = [r for r in tests.test_case_results if not r.test_case.hidden]
    hidden = [r for r in tests.test_case_results if r.test_case.hidden]
    return public, hidden


@pytest.mark.parametrize("mistake", sorted(NAIVE_ANSWERS))
def test_hidden_tests_catch_what_the_public_ones_let_through(release, mistake, monkeypatch):
    """Each naive answer passes every public test of its question and fails a hidden one."""
    public, hidden = _run_question(release, *NAIVE_ANSWERS[mistake], monkeypatch)
    assert public and all(r.passed for r in public), [r.message for r in public if not r.passed]
    assert any(not r.passed for r in hidden)


def test_the_public_self_check_fails_a_naive_softmax_with_the_overflow_hint(release, tmp_path, monkeypatch):
    """What set 1 is about shows before grading: grader.check("q2") on a softmax that overflows fails, saying why."""
    student = tmp_path / "student"
    shutil.copytree(release / MIXED_SET / "student", student)
    path = student / f"{MIXED_SET}.ipynb"
    nb = nbformat.read(path, as_version=4)
    cell = next(c for c in nb.cells if c.cell_type == "code" and c.source.startswith("def softmax("))
    cell.source = "def softmax(x, axis=-1):\n" + NAIVE_SOFTMAX
    nbformat.write(nb, path)
    namespace, _, _ = _run_cells(path, monkeypatch)
    monkeypatch.syspath_prepend(str(student))
    with np.errstate(all="ignore"):
        result = eval('grader.check("q2")', namespace)
    text = repr(result)
    sys.modules.pop("exercise_checks", None)
    assert not result.passed_all and "All test cases passed" not in text, text
    assert "np.exp overflowed" in text and "subtract the maximum" in text, text


# --------------------------------------------------------------------------------------------
# The public self-checks name the mistakes students make
# --------------------------------------------------------------------------------------------

_MASKED = """
def masked_attention(Q, K, V, mask=None):
    d_k = Q.shape[-1]
    scores = Q @ np.swapaxes(K, -1, -2) / {scale}
    if mask is not None and {use_mask}:
        scores = np.where(mask, scores, -np.inf)
    with np.errstate(invalid="ignore"):
        e = np.exp(scores - scores.max(axis=-1, keepdims=True))
        weights = np.nan_to_num(e / e.sum(axis=-1, keepdims=True), nan=0.0)
    return {returned}
"""


def _masked(scale: str = "np.sqrt(d_k)", use_mask: str = "True", returned: str = "weights @ V, weights") -> str:
    return _MASKED.format(scale=scale, use_mask=use_mask, returned=returned)


_MHA = """
def multi_head_attention(query, key, value, params, num_heads, mask=None):
    b, q_len, d = query.shape
    d_k = d // num_heads
    def split(x):
        return x.reshape(b, x.shape[1], num_heads, d_k).transpose(0, 2, 1, 3)
    q = split(query @ params["W_q"] + params["b_q"])
    k = split(key @ params["W_k"] + params["b_k"])
    v = split(value @ params["W_v"] + params["b_v"])
    {swap}
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt({scale})
    if mask is not None:
        s = np.where(mask, s, -np.inf)
    w = np.exp(s - s.max(-1, keepdims=True))
    w = w / w.sum(-1, keepdims=True)
    out = (w @ v).transpose(0, 2, 1, 3).reshape(b, q_len, d) @ params["W_o"] + params["b_o"]
    return {returned}
"""


def _mha(swap: str = "", scale: str = "d_k", returned: str = "out, w") -> str:
    return _MHA.format(swap=swap, scale=scale, returned=returned)


# mistake: (set, question, answer, source, words the message of a failing public test must hold)
MISTAKES = {
    "softmax with keepdims forgotten": ("01_softmax_cosine", "q2", "softmax", """
def softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis))
    return e / e.sum(axis=axis)
""", ["raised ValueError", "keepdims=True", "axis 1 reduced away"]),
    "masked attention that ignores the mask": ("02_masked_attention", "q4", "masked_attention",
                                                _masked(use_mask="False"), ["the mask was ignored"]),
    "masked attention returning (weights, output)": ("02_masked_attention", "q4", "masked_attention",
                                                     _masked(returned="weights, weights @ V"),
                                                     ["in the wrong order", "(output, weights)"]),
    "masked attention dividing by d_k": ("02_masked_attention", "q4", "masked_attention", _masked(scale="d_k"),
                                         ["divided by d_k; divide by its square root"]),
    "masked attention scaling by the number of keys": ("02_masked_attention", "q4", "masked_attention",
                                                       _masked(scale="np.sqrt(K.shape[-2])"),
                                                       ["the scale uses the number of keys k_len"]),
    "masked attention with rows of nan": ("02_masked_attention", "q4", "masked_attention",
                                          _masked().replace("np.nan_to_num(", "(").replace(", nan=0.0)", ")"),
                                          ["the attention weights contain NaN", "nothing to attend to"]),
    "masked attention with one key too few": ("02_masked_attention", "q4", "masked_attention",
                                              _masked(returned="weights @ V, weights[..., 1:]"),
                                              ["the attention weights have shape"]),
    "masked attention with unrecognised weights": ("02_masked_attention", "q4", "masked_attention",
                                                   _masked(returned="weights @ V, weights ** 2"),
                                                   ["the attention weights do not match"]),
    "scores scaled by the number of keys": ("02_masked_attention", "q1", "attention_scores", """
def attention_scores(Q, K):
    return Q @ np.swapaxes(K, -1, -2) / np.sqrt(K.shape[-2])
""", ["the scale uses the number of keys k_len"]),
    "decoder mask with the pad id hard-coded": ("02_masked_attention", "q5", "decoder_mask", """
def decoder_mask(tokens, pad_id):
    seq = tokens.shape[1]
    return np.tril(np.ones((seq, seq), dtype=bool))[None] & (tokens != 0)[:, None, :]
""", ["hard-coded as 0"]),
    "multi-head attention with keys and values swapped after projection": (
        "03_multi_head", "q3", "multi_head_attention", _mha(swap="k, v = v, k"),
        ["the projected keys and values were swapped"]),
    "multi-head attention scaling by the number of keys": (
        "03_multi_head", "q3", "multi_head_attention", _mha(scale="key.shape[1]"), ["divided by sqrt(k_len)"]),
    "multi-head attention returning (weights, output)": (
        "03_multi_head", "q3", "multi_head_attention", _mha(returned="w, out"), ["in the wrong order"]),
    "multi-head attention averaging the heads' weights": (
        "03_multi_head", "q3", "multi_head_attention", _mha(returned="out, w.mean(axis=1)"),
        ["the heads axis (axis 1) is missing"]),
    "multi-head attention returning one sequence's weights": (
        "03_multi_head", "q3", "multi_head_attention", _mha(returned="out, w[0]"),
        ["the batch axis (axis 0) is missing"]),
    "multi-head attention with unrecognised weights": (
        "03_multi_head", "q3", "multi_head_attention", _mha(returned="out, w ** 2"),
        ["the attention weights of multi_head_attention do not match"]),
}


SINGULAR_VERB_AFTER_WEIGHTS = re.compile(r"weights\b[^:\n]*? (has shape|does not match|contains|is wrong)")


@pytest.mark.parametrize("mistake", sorted(MISTAKES))
def test_the_public_self_check_names_the_mistake(release, mistake, monkeypatch):
    """The answer with a classic mistake fails a public test whose message names that mistake."""
    set_name, question, answer, source, words = MISTAKES[mistake]
    public, _ = _run_question(release, set_name, question, answer, source, monkeypatch)
    messages = [r.message for r in public if not r.passed]
    assert any(all(w in m for w in words) for m in messages), messages
    singular = [m for m in messages if SINGULAR_VERB_AFTER_WEIGHTS.search(m)]
    assert not singular, singular


def test_a_square_softmax_without_keepdims_is_named(monkeypatch):
    """No error from numpy for a square array: the check recognises the wrong values instead."""
    monkeypatch.syspath_prepend(str(EXERCISES))
    monkeypatch.delitem(sys.modules, "exercise_checks", raising=False)
    import exercise_checks

    def softmax(x, axis=-1):
        e = np.exp(x - x.max(axis=axis))
        return e / e.sum(axis=axis)

    with pytest.raises(AssertionError, match="taken without keepdims=True"):
        exercise_checks.check_softmax(softmax, np.random.default_rng(0).normal(size=(4, 4)))
    sys.modules.pop("exercise_checks", None)
