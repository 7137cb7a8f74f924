"""The grader reads only what students submitted (``exercises/grading/files.py``).

A submissions folder can hold more than notebooks: symbolic links (to the set's own reference
solution, to a root-only file), FIFOs, sockets, devices, hard links to files elsewhere, links in
subfolders, or entries swapped for a link after the folder was listed. Each must get its own row,
0 points, and nothing read; no row, console line or journal line may quote any file. The same
goes for what a job writes in its folder while it runs (its result, its output, its records).

Most tests call the reading functions directly (fast, no release, no sandbox); one batch mixes an
honest submission with every hostile entry and runs the grader as the command line does.
"""

from __future__ import annotations

import csv
import importlib
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import nbformat
import pytest
from test_exercises import EXERCISES, MIXED_SET, grade_tool, shared_release

files = importlib.import_module(f"{grade_tool.__name__}.files")
discover_module = importlib.import_module(f"{grade_tool.__name__}.discover")
SECRET = "SECRET-MARKER-b7e41d"  # in every file outside the folder: must never show anywhere
NOT_REGULAR = "not a regular file"
LINK = f"{NOT_REGULAR}: a symbolic link"


@pytest.fixture
def outside(tmp_path) -> Path:
    """Files that were not submitted: a root-only secret, a notebook, a folder holding a notebook."""
    folder = tmp_path / "outside"
    (folder / "folder").mkdir(parents=True)
    secret = folder / "secret.txt"
    secret.write_text(f"root:{SECRET}:20228:0:99999:7:::\n")
    secret.chmod(0o600)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(f"answer = '{SECRET}'")])
    nbformat.write(nb, folder / "notebook.ipynb")
    nbformat.write(nb, folder / "folder" / "notebook.ipynb")
    return folder


def _rows(folder: Path, between=None) -> dict[str, tuple[str, str]]:
    """``name -> (status, detail)`` as the grader finds them (``between``: called after the listing)."""
    with files.SubmittedFolder(folder) as opened:
        subs = discover_module.discover(opened, set())
        if between is not None:
            between()
        for sub in subs:
            discover_module.inspect(sub, {})
    return {s.name: (s.status, s.detail) for s in subs}


def _in_thread(call, seconds: float = 10.0):
    """Run ``call`` in a thread; its result, or fail if it is still running after ``seconds``."""
    out: dict = {}

    def run() -> None:
        try:
            out["value"] = call()
        except BaseException as e:  # noqa: BLE001 - raised again in the test's own thread
            out["error"] = e

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still blocked after {seconds} s"
    if "error" in out:
        raise out["error"]
    return out["value"]


def _release_fifo(path: Path) -> None:
    """Open the FIFO for writing and close it, so a reader blocked on it returns (cleanup on failure)."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
    except OSError:
        pass


# --------------------------------------------------------------------------------------------
# The submissions folder
# --------------------------------------------------------------------------------------------


def _make(kind: str, folder: Path, outside: Path) -> str:
    """Create one entry of ``kind`` in ``folder``; its name."""
    if kind == "symlink to a file outside":
        (folder / "shadow.ipynb").symlink_to(outside / "secret.txt")
        return "shadow.ipynb"
    if kind == "symlink to a notebook inside":
        (folder / "mine.ipynb").symlink_to("notes.txt")
        return "mine.ipynb"
    if kind == "dangling symlink":
        (folder / "gone.ipynb").symlink_to(outside / "no such file")
        return "gone.ipynb"
    if kind == "symlink to a folder":
        (folder / "linked").symlink_to(outside / "folder")
        return "linked"
    if kind == "nested symlink":
        (folder / "sub" / "deeper").mkdir(parents=True)
        (folder / "sub" / "deeper" / "nb.ipynb").symlink_to(outside / "secret.txt")
        return "sub/deeper/nb.ipynb"
    if kind == "FIFO":
        os.mkfifo(folder / "pipe.ipynb")
        return "pipe.ipynb"
    if kind == "socket":
        path = folder / "sock.ipynb"
        with socket.socket(socket.AF_UNIX) as s:
            s.bind(str(path))
        return "sock.ipynb"
    if kind == "device":
        try:
            os.mknod(folder / "null.ipynb", 0o666 | 0o020000, os.makedev(1, 3))  # /dev/null's numbers
        except (PermissionError, OSError) as e:
            pytest.skip(f"cannot make a device file here ({e.strerror})")
        return "null.ipynb"
    if kind == "hard link to a file outside":
        os.link(outside / "notebook.ipynb", folder / "hard.ipynb")
        return "hard.ipynb"
    raise ValueError(kind)


KINDS = {
    "symlink to a file outside": LINK,
    "symlink to a notebook inside": LINK,
    "dangling symlink": LINK,
    "symlink to a folder": LINK,
    "nested symlink": LINK,
    "FIFO": f"{NOT_REGULAR}: a FIFO",
    "socket": f"{NOT_REGULAR}: a socket",
    "device": f"{NOT_REGULAR}: a device",
    "hard link to a file outside": f"{NOT_REGULAR}: a hard link",
}


@pytest.mark.parametrize("kind", KINDS)
def test_an_entry_that_is_not_a_regular_file_of_the_folder_gets_its_row_and_is_not_read(kind, tmp_path, outside):
    folder = tmp_path / "submissions"
    folder.mkdir()
    (folder / "notes.txt").write_text("my answers are in my head")  # a regular neighbour: read
    name = _make(kind, folder, outside)
    rows = _in_thread(lambda: _rows(folder))
    assert rows[name][0] == KINDS[kind], rows[name]
    assert "nothing was read" in rows[name][1]
    assert rows["notes.txt"] == ("not a notebook", "not a readable notebook: the file is not JSON (line 1, column 1)")
    assert sorted(rows) == sorted([name, "notes.txt"]), "a linked folder is one entry, never entered"
    assert SECRET not in json.dumps(rows)


def test_a_fifo_is_never_opened_for_a_blocking_read(tmp_path):
    """Read directly, by name: the call returns at once with the FIFO's refusal."""
    os.mkfifo(tmp_path / "pipe.ipynb")
    try:
        with pytest.raises(files.Refused, match="a FIFO"):
            _in_thread(lambda: files.read_file(tmp_path, ("pipe.ipynb",), 1000))
    finally:
        _release_fifo(tmp_path / "pipe.ipynb")


def test_hard_links_whose_every_name_is_in_the_folder_are_read(tmp_path):
    """An archive that stored one file under two names: both are the student's, both are read."""
    folder = tmp_path / "submissions"
    folder.mkdir()
    (folder / "a.ipynb").write_text("not a notebook")
    os.link(folder / "a.ipynb", folder / "b.ipynb")
    rows = _rows(folder)
    assert [status for status, _ in rows.values()] == ["not a notebook", "not a notebook"], rows
    assert all("not JSON" in detail for _, detail in rows.values())


@pytest.mark.parametrize("swap", ["symlink", "folder symlink", "FIFO", "hard link"])
def test_an_entry_swapped_after_the_listing_is_refused_when_read(swap, tmp_path, outside):
    """The listing saw a regular file; what is there when it is read is what counts."""
    folder = tmp_path / "submissions"
    (folder / "sub").mkdir(parents=True)
    shutil.copyfile(outside / "notebook.ipynb", folder / "sub" / "nb.ipynb")
    target = folder / "sub" / "nb.ipynb"

    def swap_it() -> None:
        if swap == "folder symlink":  # the folder on the way becomes a link to a folder outside
            shutil.rmtree(folder / "sub")
            (folder / "sub").symlink_to(outside / "folder")
            return
        target.unlink()
        if swap == "symlink":
            target.symlink_to(outside / "secret.txt")
        elif swap == "FIFO":
            os.mkfifo(target)
        else:
            os.link(outside / "notebook.ipynb", target)

    try:
        rows = _in_thread(lambda: _rows(folder, between=swap_it))
    finally:
        if swap == "FIFO":
            _release_fifo(target)
    want = {"symlink": LINK, "folder symlink": LINK, "FIFO": f"{NOT_REGULAR}: a FIFO",
            "hard link": f"{NOT_REGULAR}: a hard link"}[swap]
    assert rows["sub/nb.ipynb"][0] == want, rows
    assert SECRET not in json.dumps(rows)


@pytest.mark.parametrize("swap", ["symlink", "FIFO", "hard link"])
def test_an_entry_swapped_between_the_first_look_and_the_open_is_refused(swap, tmp_path, outside, monkeypatch):
    """The race the descriptor's own fstat closes: the path looked regular, something else was opened."""
    folder = tmp_path / "submissions"
    folder.mkdir()
    target = folder / "nb.ipynb"
    shutil.copyfile(outside / "notebook.ipynb", target)
    real_stat = os.stat

    def stat_then_swap(path, *args, **kwargs):
        st = real_stat(path, *args, **kwargs)
        if path == "nb.ipynb" and not kwargs.get("follow_symlinks", True) and target.is_file():
            target.unlink()
            if swap == "symlink":
                target.symlink_to(outside / "secret.txt")
            elif swap == "FIFO":
                os.mkfifo(target)
            else:
                os.link(outside / "notebook.ipynb", target)
        return st

    monkeypatch.setattr(files.os, "stat", stat_then_swap)
    try:
        with pytest.raises(files.Refused) as refused:
            _in_thread(lambda: files.read_file(folder, ("nb.ipynb",), 1_000_000))
    finally:
        if swap == "FIFO":
            _release_fifo(target)
    want = {"symlink": LINK, "FIFO": f"{NOT_REGULAR}: a FIFO", "hard link": f"{NOT_REGULAR}: a hard link"}[swap]
    assert refused.value.status == want


def test_a_file_over_the_size_limit_is_not_read(tmp_path, monkeypatch):
    folder = tmp_path / "submissions"
    folder.mkdir()
    (folder / "big.ipynb").write_bytes(b"x" * 5000)
    monkeypatch.setattr(discover_module, "MAX_NOTEBOOK_BYTES", 4000)
    status, detail = _rows(folder)["big.ipynb"]
    assert status == "not a notebook" and "more than" in detail and "MB" in detail


# --------------------------------------------------------------------------------------------
# No file content in any message
# --------------------------------------------------------------------------------------------

_CELL = {"cell_type": "code", "source": "x = 1", "metadata": {}, "outputs": [], "execution_count": None}
CONTENTS = {
    "not JSON": f"{SECRET} {{".encode(),
    "not UTF-8": b"\xff\xfe" + SECRET.encode(),
    "JSON, not an object": json.dumps([SECRET]).encode(),
    "JSON, no metadata": json.dumps({"cells": [], "nbformat": 4, "nbformat_minor": 5, SECRET: 1}).encode(),
    "unsupported version": json.dumps({"nbformat": SECRET, "cells": []}).encode(),  # nbformat's error quotes it
    "nested too deeply": b"[" * 100_000 + SECRET.encode(),
    "invalid notebook": json.dumps({"cells": [{**_CELL, SECRET: SECRET}], "metadata": {}, "nbformat": 4,
                                    "nbformat_minor": 5}).encode(),
    "malformed metadata": json.dumps({"cells": [_CELL], "metadata": {"otter": {"assignment_name": [SECRET]}},
                                      "nbformat": 4, "nbformat_minor": 5}).encode(),
    "duplicate cell ids": json.dumps({"cells": [{**_CELL, "id": SECRET}, {**_CELL, "id": SECRET}], "metadata": {},
                                      "nbformat": 4, "nbformat_minor": 5}).encode(),
}


@pytest.mark.parametrize("what", CONTENTS)
def test_no_row_or_console_line_quotes_the_file(what, tmp_path, capfd, caplog):
    """The details name the problem (not JSON, not UTF-8, ...), never the bytes; nbformat's log is silenced."""
    folder = tmp_path / "submissions"
    folder.mkdir()
    (folder / "nb.ipynb").write_bytes(CONTENTS[what])
    with files.SubmittedFolder(folder) as opened:
        (sub,) = discover_module.discover(opened, set())
        discover_module.inspect(sub, {})
    if sub.status == "unknown exercise":  # read as a notebook: write the copy a job would grade, too
        nb = discover_module.parse_notebook(CONTENTS[what])
        with discover_module.quiet_nbformat():
            nbformat.write(discover_module.prepare_copy(nb, MIXED_SET), tmp_path / "copy.ipynb")
    printed = capfd.readouterr()
    assert sub.status in ("not a notebook", "unknown exercise"), sub
    assert SECRET not in sub.detail, sub.detail
    assert SECRET not in printed.out + printed.err + caplog.text


# --------------------------------------------------------------------------------------------
# What a job wrote in its own folder
# --------------------------------------------------------------------------------------------


@pytest.fixture
def job(tmp_path) -> SimpleNamespace:
    """A finished job's folder, as the grader made it: work/ and record/ (the job's own to write)."""
    job_dir = tmp_path / "job"
    (job_dir / "work").mkdir(parents=True)
    (job_dir / "record").mkdir()
    return grade_tool.jobs.Job(sub=None, dir=job_dir, uid=None)


def test_a_jobs_result_and_output_are_read_only_if_regular_files(job, outside):
    work = job.dir / "work"
    (work / "result.json").write_text(json.dumps({"claimed": {"q1": 1.0}}))
    (work / "worker.out").write_text("line\nlast line\n")
    assert grade_tool.scores._worker_result(job) == {"claimed": {"q1": 1.0}}
    assert grade_tool.scores._tail(job.dir, ("work", "worker.out")).endswith("last line\n")

    for name in ("result.json", "worker.out"):
        (work / name).unlink()
    (work / "result.json").symlink_to(outside / "secret.txt")
    (work / "worker.out").symlink_to(outside / "secret.txt")
    assert grade_tool.scores._worker_result(job) == {}
    assert grade_tool.scores._tail(job.dir, ("work", "worker.out")) == ""

    for name in ("result.json", "worker.out"):
        (work / name).unlink()
        os.mkfifo(work / name)
    try:
        assert _in_thread(lambda: grade_tool.scores._worker_result(job)) == {}
        assert _in_thread(lambda: grade_tool.scores._tail(job.dir, ("work", "worker.out"))) == ""
    finally:
        for name in ("result.json", "worker.out"):
            _release_fifo(work / name)


def test_only_regular_files_of_a_jobs_record_folder_are_copied_for_scoring(job, outside, tmp_path):
    record = job.dir / "record"
    (record / "softmax-1.npz").write_bytes(b"answer")
    (record / "softmax-2.npz").symlink_to(outside / "secret.txt")
    (record / "softmax-3.npz").symlink_to(outside / "notebook.ipynb")
    os.mkfifo(record / "softmax-4.npz")
    os.link(outside / "notebook.ipynb", record / "softmax-5.npz")
    (record / "big.npz").write_bytes(b"x" * 2000)
    copy = tmp_path / "copy"
    copy.mkdir()
    info = SimpleNamespace(checks=SimpleNamespace(recording=SimpleNamespace(MAX_RECORD_BYTES=1000)))
    try:
        left_out = _in_thread(lambda: grade_tool.scores.copy_records(info, job, copy))
    finally:
        _release_fifo(record / "softmax-4.npz")
    assert sorted(p.name for p in copy.iterdir()) == ["softmax-1.npz"]
    assert (copy / "softmax-1.npz").read_bytes() == b"answer"
    assert left_out == 5


# --------------------------------------------------------------------------------------------
# One batch: an honest submission among hostile entries, graded by the command line
# --------------------------------------------------------------------------------------------

# The kernel of a job replaces what its worker writes: its output with a link to a file the
# grader (root) could read, its result with a FIFO on which a read would block; then it kills its
# worker, so that the worker writes neither.
JOB_OUTPUT_ATTACK = """\
import os, signal
_work = os.path.join(os.path.dirname(os.environ["EXERCISES_RECORD_DIR"]), "work")
for _name in ("worker.out", "result.json"):
    try:
        os.remove(os.path.join(_work, _name))
    except OSError:
        pass
if KIND == "link":
    os.symlink(SECRET_PATH, os.path.join(_work, "worker.out"))
else:
    os.mkfifo(os.path.join(_work, "result.json"))
os.kill(os.getppid(), signal.SIGKILL)
"""

# Runs the grader's command line, with two additions: the entry "swapped.ipynb" is replaced by a
# link to the reference solution right after the folder is listed, and the journal is copied
# before the grader removes it.
DRIVER = """\
import os, shutil, sys
sys.path.insert(0, sys.argv[1])
import grading
from grading import cli, scores

folder, reference = sys.argv[2], sys.argv[3]
real_discover, real_finish = cli.discover, scores.ScoreTable.finish

def discover_then_swap(*args, **kwargs):
    subs = real_discover(*args, **kwargs)
    os.remove(os.path.join(folder, "swapped.ipynb"))
    os.symlink(reference, os.path.join(folder, "swapped.ipynb"))
    return subs

def finish_keeping_the_journal(self, rows, columns):
    self.journal.flush()
    shutil.copyfile(self.journal_path, str(self.journal_path) + ".kept")
    return real_finish(self, rows, columns)

cli.discover = discover_then_swap
scores.ScoreTable.finish = finish_keeping_the_journal
grading.main(sys.argv[4:])
"""


@pytest.fixture(scope="session")
def release(tmp_path_factory, worker_id) -> Path:
    return shared_release(tmp_path_factory, worker_id)


def test_a_batch_with_hostile_entries_reads_none_of_them_and_grades_the_honest_one(release, tmp_path, outside):
    reference = release / MIXED_SET / "autograder" / f"{MIXED_SET}.ipynb"  # the set's own solution
    student = release / MIXED_SET / "student" / f"{MIXED_SET}.ipynb"
    shutil.copyfile(reference, outside / "solution copy.ipynb")
    (outside / "folder" / "solution.ipynb").symlink_to(reference)
    folder = tmp_path / "submissions"
    (folder / "sub").mkdir(parents=True)
    shutil.copyfile(reference, folder / "honest.ipynb")
    (folder / "cheat.ipynb").symlink_to(reference)
    (folder / "shadow.ipynb").symlink_to(outside / "secret.txt")
    shutil.copyfile(student, folder / "swapped.ipynb")  # a link to the reference once listed
    os.mkfifo(folder / "pipe.ipynb")
    os.link(outside / "solution copy.ipynb", folder / "hard.ipynb")
    (folder / "linked_folder").symlink_to(outside / "folder")
    (folder / "sub" / "nested.ipynb").symlink_to(reference)
    solution = nbformat.read(reference, as_version=4)
    for kind in ("link", "fifo"):
        attack = JOB_OUTPUT_ATTACK.replace("KIND", repr(kind)).replace("SECRET_PATH", repr(str(outside / "secret.txt")))
        nb = nbformat.from_dict(json.loads(json.dumps(solution)))
        nb.cells.append(nbformat.v4.new_code_cell(attack))
        nb.cells[-1].pop("id", None)
        nbformat.write(nb, folder / f"job_output_{kind}.ipynb")

    out = tmp_path / "grades.csv"
    trusted = [] if grade_tool.sandbox_kind() else ["--trusted"]
    args = [str(folder), "--release", str(release), "--out", str(out), "--jobs", "2", "--timeout", "12",
            "--wall", "180", "--memory", "2048", *trusted]
    try:
        ran = subprocess.run([sys.executable, "-c", DRIVER, str(EXERCISES), str(folder), str(reference), *args],
                             capture_output=True, text=True, timeout=400, cwd=tmp_path)
    finally:
        _release_fifo(folder / "pipe.ipynb")
    console = ran.stdout + ran.stderr
    assert ran.returncode == 0, console[-3000:]
    with open(out, newline="") as f:
        rows = {r["submission"]: r for r in csv.DictReader(f)}
    got = {name: (r["status"], r["total"]) for name, r in rows.items()}
    assert got == {
        "honest.ipynb": ("ok", rows["honest.ipynb"]["possible"]),
        "cheat.ipynb": (LINK, "0"),
        "shadow.ipynb": (LINK, "0"),
        "swapped.ipynb": (LINK, "0"),
        "pipe.ipynb": (f"{NOT_REGULAR}: a FIFO", "0"),
        "hard.ipynb": (f"{NOT_REGULAR}: a hard link", "0"),
        "linked_folder": (LINK, "0"),
        "sub/nested.ipynb": (LINK, "0"),
        "job_output_link.ipynb": ("error", rows["job_output_link.ipynb"]["total"]),
        "job_output_fifo.ipynb": ("error", rows["job_output_fifo.ipynb"]["total"]),
    }, got
    assert float(rows["honest.ipynb"]["possible"]) > 0  # full marks, beside every hostile entry
    assert "the grader stopped unexpectedly" in rows["job_output_link.ipynb"]["detail"]
    journal = Path(str(out) + ".journal.kept").read_text()
    assert len(journal.splitlines()) == 3  # the three jobs that ran
    assert "(1 ok, 2 error, 7 not a regular file)" in console, console[-2000:]
    for text in (out.read_text(), console, journal):
        assert SECRET not in text
