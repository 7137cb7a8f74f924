"""Tests of grading whole folders (``exercises/grading``, run by ``exercises/grade.py``).

One mixed folder of submissions is graded once per session, on the release that
``test_exercises.py`` builds: every reference solution, every student notebook as released,
notebooks that raise, loop forever, exhaust memory, call ``sys.exit``, print megabytes, kill their
kernel, are not notebooks or are empty, notebooks that tamper with the checks, and (where the
sandbox runs: root with bubblewrap) the attacks of hostile submissions. The tests then read the
rows. Other tests grade small folders of their own: limits, job users, the set's recognition, the
command line and the score table; and check that the worker and the grader's in-memory copy of
the checks stand on their own.
"""

from __future__ import annotations

import ast
import csv
import hashlib
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import nbformat
import psutil
import pytest
from test_exercises import EXERCISES, MIXED_SET, NAIVE_SOFTMAX, SETS, grade_tool, shared_build, shared_release

LIMITS = dict(cpu_seconds=12, wall_seconds=180, memory_mb=2048)  # per submission of the mixed batch
# Grading sandboxes each submission when the tests run as root with bubblewrap (as `make test`
# does in CI); elsewhere the same batches run unsandboxed, and the attacks' checks are skipped.
TRUSTED = not grade_tool.sandbox_kind()
TRUST = ["--trusted"] if TRUSTED else []
needs_sandbox = pytest.mark.skipif(TRUSTED, reason="the sandbox needs root and bubblewrap")


@pytest.fixture(scope="session")
def release(tmp_path_factory, worker_id) -> Path:
    """The session's release, the one test_exercises.py reads (built once, shared)."""
    return shared_release(tmp_path_factory, worker_id)


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
import sys
import numpy as np
import exercise_checks
np.allclose = lambda *a, **k: True
np.isclose = lambda a, b, *r, **k: np.ones(np.broadcast(a, b).shape, dtype=bool)
np.array_equal = lambda *a, **k: True
np.testing.assert_allclose = lambda *a, **k: None
np.testing.assert_array_equal = lambda *a, **k: None
for _module in [m for n, m in list(sys.modules.items()) if n.split(".")[0] == "exercise_checks"]:
    for _name in dir(_module):
        if _name.startswith(("check_", "expect_")):
            setattr(_module, _name, lambda *a, **k: None)
    if hasattr(_module, "call"):
        _module.call = lambda name, fn, *a, **k: None
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
for path in glob.glob("exercise_checks/*.py") + glob.glob("../source/files/exercise_checks/*.py"):
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
# Take the answers from the library that the checks package imported.
import sys
for _module in [m for n, m in list(sys.modules.items()) if n.split(".")[0] == "exercise_checks"]:
    _ref = getattr(_module, "tl", None)
    if _ref is not None:
        softmax, cosine_similarity = _ref.softmax, _ref.cosine_similarity
"""

CHILD_MEMORY = """\
# Three child processes of 900 MB each: every one under the per-process limit, together over the job's.
import subprocess, sys
code = "import time; b = b'x' * (900 * 2**20); time.sleep(30)"
children = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(3)]
for child in children:
    child.wait()
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

    return shared_build(tmp_path_factory, worker_id, "exercise_grades", build)


def _row(graded, name: str) -> dict:
    return next(r for r in graded["rows"] if r["submission"] == name)



# --------------------------------------------------------------------------------------------
# Grading one folder at a time: limits, job users, the set, the command line, the table
# --------------------------------------------------------------------------------------------


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


def test_a_notebook_that_sleeps_is_stopped_once_idle(release, tmp_path):
    """No CPU used for idle_seconds: the notebook is waiting, not computing, and gives its slot back."""
    folder = tmp_path / "subs"
    folder.mkdir()
    stu = nbformat.read(release / MIXED_SET / "student" / f"{MIXED_SET}.ipynb", as_version=4)
    nbformat.write(_with_cells(stu, [(1, "import time\ntime.sleep(3600)")]), folder / "sleeps.ipynb")
    start = time.monotonic()
    rows = grade_tool.grade_folder(folder, tmp_path / "grades.csv", release=release, jobs=1,
                                   limits=grade_tool.Limits(cpu_seconds=60, wall_seconds=300, memory_mb=2048,
                                                            idle_seconds=8),
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
    monkeypatch.setattr(grade_tool.cli, "sandbox_kind", lambda: "")
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
    with pytest.raises(SystemExit, match="--out.*folder"):
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

    monkeypatch.setattr(grade_tool.scores.os, "replace", blocked)
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
# What runs where: the worker in the sandbox, the checks in the grader's memory
# --------------------------------------------------------------------------------------------


def test_the_worker_imports_only_otter_and_the_standard_library():
    """The worker runs where the repository is hidden: nothing of the grading package, no rerun of it."""
    tree = ast.parse((EXERCISES / "grading" / "worker.py").read_text())
    imports = [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert not [n for n in imports if isinstance(n, ast.ImportFrom) and n.level], "no relative imports"
    names = {alias.name.split(".")[0] for n in imports if isinstance(n, ast.Import) for alias in n.names}
    names |= {n.module.split(".")[0] for n in imports if isinstance(n, ast.ImportFrom)}
    assert "otter" in names
    assert names <= set(sys.stdlib_module_names) | {"otter"}, names
    assert "runpy" not in names
    for path in (EXERCISES / "grading").glob("*.py"):
        assert "runpy" not in path.read_text() and "run_path" not in path.read_text(), path.name


def test_the_grader_imports_each_autograders_checks_from_memory(release):
    """Each set's checks package comes from its zip's bytes, under a name of its own, whole."""
    sets = grade_tool.load_release(release)
    names = [info.checks.__name__ for info in sets.values()]
    assert len(set(names)) == len(sets) and "exercise_checks" not in names
    for info in sets.values():
        zip_path = next((release / info.name / "autograder").glob("*-autograder_*.zip"))
        for module in ("", ".recording", ".compare", ".set05_layers_decoding"):
            spec = sys.modules[info.checks.__name__ + module].__spec__
            assert spec.origin.startswith(f"{zip_path}::files/exercise_checks/"), spec.origin
        assert info.checks.check_greedy_decode.__module__ == info.checks.__name__ + ".set05_layers_decoding"
        assert isinstance(info.checks.Replay("softmax", "."), info.checks.Replay)
