"""Grade a folder of submitted exercise notebooks into ``grades.csv`` (``make grade``).

Usage::

    python exercises/grade.py SUBMISSIONS [--out grades.csv] [--release exercises/release]
                              [--jobs 2] [--timeout 120] [--wall SECONDS] [--memory 4096]

Every file under ``SUBMISSIONS`` (any name, any depth; hidden files skipped) is one submission and
gets one row in ``--out`` (default ``grades.csv`` in the current directory, so the submissions
folder is never written to): the exercise set, a status, the points of each question, the total,
the points possible, the seconds it took and a detail. Statuses: ``ok`` (graded normally),
``error`` (a cell raised or called ``sys.exit``, or the kernel died; what was checked still
counts), ``timeout`` (CPU time used up, or still running at the wall-clock limit), ``out of
memory``, ``tampered`` (the notebook's own checks claimed more than its answers are worth),
``not a notebook``, ``empty`` and ``unknown exercise``. The set is read from the metadata
``otter assign`` writes, else from the ``otter.Notebook("<set>.ipynb")`` line, else from the
names of the functions the notebook defines.

How one submission is graded:

1. Before any submission runs, this process reads every autograder zip of the release into
   memory, with the checks module inside it, and keeps a copy of the release folder.
2. The submission is read (never written), and a copy goes into a fresh temporary folder with a
   fresh copy of its autograder. A worker process, forked from a fork server that has otter
   imported, leaves this process's session, sets its limits with ``resource.setrlimit`` (memory,
   CPU time, file size; the notebook's kernel inherits them) and grades the copy with otter's
   Python API, ``otter.api.grade_submission``: no Docker. ``--jobs`` workers run at once.
3. The kernel starts with an IPython startup file that imports the checks before any cell runs
   and turns the CPU-time signal into a ``TimeoutError`` in the running cell, so the rest of the
   notebook still runs. A worker still alive after ``--wall`` seconds is killed with every
   process it started (its tree, and anything carrying its job marker).
4. In the kernel, the tests record every answer they check as plain arrays (see
   ``exercise_checks.py``). Back here, where no student code ever runs, the autograder's tests are
   run again by otter's own test runner on the recorded answers, with every expected value
   computed here by transformer_lib and PyTorch. Those are the points. Otter's score from inside
   the kernel is only compared with them: when it claims more, the row says ``tampered``.

So a notebook that rebinds ``np.allclose`` or ``np.testing.assert_allclose``, patches otter or
the checks, overwrites the test files in its folder, reads the hidden tests or forges otter's
results changes what its own kernel claims, not its grade: the verdict comes from code loaded
before the batch started and from nothing but the numbers its functions returned, and the hidden
tests hold inputs, not answers. What a notebook can still do is what any program run as your
user can do (kill processes, write your files); after the batch the release folder is compared
with its copy and restored if changed. For hostile code, grade in a container or as another user.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import hashlib
import io
import json
import os
import re
import resource
import runpy
import shutil
import signal
import sys
import tempfile
import time
import types
import uuid
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DEFAULT_RELEASE = HERE / "release"
JOB_MARKER = "EXERCISES_GRADING_JOB"
WORKER_RUN_NAME = "__exercise_grading_worker__"
CHECKS_MODULE = "exercise_checks"
STATUS_ORDER = ["ok", "error", "tampered", "out of memory", "timeout", "not a notebook", "empty",
                "unknown exercise"]
MAX_NOTEBOOK_BYTES = 64_000_000
CPU_GRACE_SECONDS = 15  # CPU time left to the rest of the notebook once one cell hit the limit
CPU_LIMIT_MESSAGE = "the notebook used up its CPU time limit; this cell was stopped"
KERNEL_STARTUP = f"""\
# Written by exercises/grade.py. IPython runs this when the grading kernel starts, before any cell.
import resource
import signal
import sys

sys.modules.setdefault("rfc3987_syntax", None)  # an optional import of jsonschema that costs seconds
import {CHECKS_MODULE}  # bind the checks' numpy functions before the notebook's own code can rebind them


def _cpu_time_up(signum, frame):
    # The soft CPU limit was reached: stop the running cell, leave the rest of the notebook the
    # grace period up to the hard limit (at which the kernel is killed).
    soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
    resource.setrlimit(resource.RLIMIT_CPU, (hard, hard))
    raise TimeoutError("{CPU_LIMIT_MESSAGE}")


signal.signal(signal.SIGXCPU, _cpu_time_up)
"""


def skip_slow_imports() -> None:
    """Skip jsonschema's optional ``rfc3987_syntax``, which builds a grammar on import (~1.5 s)."""
    sys.modules.setdefault("rfc3987_syntax", None)


# --------------------------------------------------------------------------------------------
# The release: autograders read once, before any submission runs
# --------------------------------------------------------------------------------------------


@dataclass
class Limits:
    """What one submission may use.

    ``cpu_seconds`` is CPU time of the notebook's kernel (RLIMIT_CPU), so a busy machine does not
    cut honest work short; ``wall_seconds`` stops notebooks that wait forever without computing.
    """

    cpu_seconds: int = 120
    wall_seconds: float = 420.0
    memory_mb: int = 4096


@dataclass
class ExerciseSet:
    """One exercise set of the release, held in memory for the whole batch."""

    name: str
    zip_bytes: bytes
    tests: dict[str, str]  # question -> test file source
    possible: dict[str, float]  # question -> points possible
    answer_names: set[str]  # the functions the tests check
    checks: types.ModuleType  # the checks module shipped in the autograder


def _question_key(name: str) -> tuple:
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))


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
            checks_source = zf.read(f"files/{CHECKS_MODULE}.py").decode()
        possible, answers = {}, set()
        for q in sorted(tests, key=_question_key):
            tf = ExceptionTestFile.from_string(tests[q], path=f"tests/{q}.py")
            possible[q] = float(tf.possible)
            for case in tf.test_cases:
                answers.update(case.body._get_func_params())
        module = types.ModuleType(CHECKS_MODULE)
        module.__file__ = f"{zip_path}::files/{CHECKS_MODULE}.py"
        exec(compile(checks_source, module.__file__, "exec"), module.__dict__)
        tests = {q: tests[q] for q in sorted(tests, key=_question_key)}
        sets[name] = ExerciseSet(name, data, tests, possible, answers, module)
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


# --------------------------------------------------------------------------------------------
# Submissions: find them, read them, tell which set each belongs to
# --------------------------------------------------------------------------------------------


@dataclass
class Submission:
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
    files = []
    for p in sorted(folder.rglob("*")):
        rel = p.relative_to(folder)
        if any(part.startswith(".") for part in rel.parts) or "__pycache__" in rel.parts:
            continue
        if p.is_file() and p.resolve() not in skip:
            files.append(Submission(path=p, name=str(rel)))
    return files


def _code_source(nb: dict) -> list[str]:
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
    code = "\n".join(_code_source(nb))
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
            sub.status, sub.detail = "not a notebook", f"the file is {size / 1e6:.0f} MB, too large for a notebook"
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
    code = _code_source(nb)
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
    sub.mentions_library = any(re.search(r"\btransformer_lib\b", src) for src in code)


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


# --------------------------------------------------------------------------------------------
# The worker: one submission, one process, limits set before it starts
# --------------------------------------------------------------------------------------------


def apply_limits(memory_mb: int, cpu_seconds: int) -> None:
    """Limit this process and everything it starts: memory, CPU time, file sizes, no core dumps.

    Limits are per process and inherited: the kernel gets ``cpu_seconds`` of CPU time (then
    SIGXCPU, which the kernel's startup file turns into a TimeoutError in the running cell) and
    is killed ``CPU_GRACE_SECONDS`` later.
    """
    memory = memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + CPU_GRACE_SECONDS))
    resource.setrlimit(resource.RLIMIT_FSIZE, (256 * 1024 * 1024, 256 * 1024 * 1024))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def worker_main(job: str, env: dict[str, str], memory_mb: int, cpu_seconds: int) -> None:
    """Grade ``job/<set>.ipynb`` with ``job/autograder.zip``; write ``job/result.json``.

    Runs in a process of its own, forked from the fork server (which has otter imported). It
    leaves the grader's session, sends its output to ``job/worker.out``, takes the job's
    environment and sets the limits before otter starts the notebook's kernel, which inherits
    all of them.
    """
    job_dir = Path(job)
    os.setsid()
    out = os.open(job_dir / "worker.out", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.environ.update(env)
    os.chdir(job_dir)
    tempfile.tempdir = env["TMPDIR"]
    apply_limits(memory_mb, cpu_seconds)
    skip_slow_imports()
    result: dict[str, Any] = {"claimed": {}, "cases": {}, "errors": []}
    try:
        import otter.api

        notebook = next(job_dir.glob("*.ipynb"))
        results = otter.api.grade_submission(str(notebook), str(job_dir / "autograder.zip"), quiet=True)
        for q, tf in results.results.items():
            result["claimed"][str(q)] = float(tf.score)
            result["cases"][str(q)] = [
                {"passed": bool(r.passed), "hidden": bool(r.test_case.hidden), "message": str(r.message)[:3000]}
                for r in tf.test_case_results
            ]
        executed = results.notebook
        for cell in executed.cells if executed is not None else []:
            for output in cell.get("outputs", []):
                if output.get("output_type") == "error":
                    first_line = next((ln for ln in cell.source.splitlines() if ln.strip()), "")
                    result["errors"].append({
                        "ename": str(output.get("ename", ""))[:200],
                        "evalue": str(output.get("evalue", ""))[:300],
                        "line": first_line[:80],
                    })
    except BaseException as e:  # noqa: BLE001 - report anything, including SystemExit
        result["fatal"] = f"{type(e).__name__}: {str(e)[:500]}"
    children = resource.getrusage(resource.RUSAGE_CHILDREN)  # the kernel, once it has exited
    result["kernel_cpu"] = children.ru_utime + children.ru_stime
    own = resource.getrusage(resource.RUSAGE_SELF)
    result["worker_cpu"] = own.ru_utime + own.ru_stime
    (job_dir / "result.json").write_text(json.dumps(result))


_CONTEXT = None


def worker_context() -> Any:
    """A multiprocessing fork server with otter already imported: workers start in milliseconds."""
    global _CONTEXT
    if _CONTEXT is None:
        import multiprocessing

        _CONTEXT = multiprocessing.get_context("forkserver")
        _CONTEXT.set_forkserver_preload(["otter.api"])
    return _CONTEXT


# --------------------------------------------------------------------------------------------
# Running the batch
# --------------------------------------------------------------------------------------------


@dataclass
class Job:
    sub: Submission
    dir: Path
    marker: str
    proc: Any = None  # a multiprocessing.Process
    start: float = 0.0
    timed_out: bool = False


def kill_job_processes(job: Job) -> None:
    """Kill the worker and everything it started: its process tree and anything carrying its marker."""
    import psutil

    victims = []
    if job.proc is not None:
        try:
            parent = psutil.Process(job.proc.pid)
            victims = [parent, *parent.children(recursive=True)]
        except psutil.NoSuchProcess:
            victims = []
    me = os.getpid()
    for p in psutil.process_iter(["pid"]):
        if p.pid == me or p in victims:
            continue
        try:
            if p.environ().get(JOB_MARKER) == job.marker:
                victims.append(p)
        except (psutil.Error, OSError):
            continue
    for p in victims:
        try:
            p.send_signal(signal.SIGKILL)
        except psutil.Error:
            pass
    psutil.wait_procs(victims, timeout=5)
    if job.proc is not None:
        job.proc.join(timeout=5)


def start_job(sub: Submission, info: ExerciseSet, limits: Limits, workdir: Path | None = None) -> Job:
    import nbformat

    job_dir = Path(tempfile.mkdtemp(prefix="exercise-grading-", dir=workdir))
    for sub_dir in ("record", "tmp", "runtime", "ipython/profile_default/startup", "mpl"):
        (job_dir / sub_dir).mkdir(parents=True)
    (job_dir / "ipython/profile_default/startup/00-grader.py").write_text(KERNEL_STARTUP)
    (job_dir / "autograder.zip").write_bytes(info.zip_bytes)  # a fresh copy for every submission
    nbformat.write(prepare_copy(sub.notebook, info.name), str(job_dir / f"{info.name}.ipynb"))
    job = Job(sub, job_dir, uuid.uuid4().hex)
    env = {
        JOB_MARKER: job.marker,
        "EXERCISES_RECORD_DIR": str(job_dir / "record"),
        "TMPDIR": str(job_dir / "tmp"),
        "JUPYTER_RUNTIME_DIR": str(job_dir / "runtime"),
        "IPYTHONDIR": str(job_dir / "ipython"),
        "MPLCONFIGDIR": str(job_dir / "mpl"),
        "MPLBACKEND": "Agg",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    worker_args = {"job": str(job_dir), "env": env, "memory_mb": limits.memory_mb, "cpu_seconds": limits.cpu_seconds}
    # the worker runs this very file (as WORKER_RUN_NAME) in a process forked from the fork server
    job.proc = worker_context().Process(
        target=runpy.run_path, args=(str(Path(__file__).resolve()),),
        kwargs={"run_name": WORKER_RUN_NAME, "init_globals": {"WORKER_ARGS": worker_args}},
    )
    job.proc.start()
    job.start = time.monotonic()
    return job


def _tail(path: Path, n: int = 4000) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.path.getsize(path) - n))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _fmt_points(x: float) -> str:
    return f"{round(x, 2):g}"


def verify(info: ExerciseSet, record_dir: Path) -> dict[str, float]:
    """Rerun the set's tests in this clean process on the recorded answers; points per question."""
    from otter.test_files import ExceptionTestFile

    checks = info.checks
    previous = sys.modules.get(CHECKS_MODULE)
    sys.modules[CHECKS_MODULE] = checks
    scores = {}
    try:
        for q, source in info.tests.items():
            tf = ExceptionTestFile.from_string(source, path=f"tests/{q}.py")
            env = {name: checks.Replay(name, str(record_dir)) for name in info.answer_names}
            tf.run(env)
            scores[q] = float(tf.score)
    finally:
        if previous is None:
            sys.modules.pop(CHECKS_MODULE, None)
        else:
            sys.modules[CHECKS_MODULE] = previous
    return scores


def finish_job(job: Job, info: ExerciseSet, limits: Limits) -> None:
    """Score a finished (or killed) job and fill in its row."""
    sub = job.sub
    seconds = time.monotonic() - job.start
    verified = verify(info, job.dir / "record")
    result: dict[str, Any] = {}
    try:
        loaded = json.loads((job.dir / "result.json").read_text()[:5_000_000])
        if isinstance(loaded, dict):
            result = loaded
    except (OSError, ValueError):
        result = {}
    claimed = result.get("claimed") if isinstance(result.get("claimed"), dict) else {}
    errors = [e for e in result.get("errors", []) if isinstance(e, dict)] if isinstance(
        result.get("errors"), list) else []
    fatal = str(result.get("fatal", ""))
    output_tail = _tail(job.dir / "worker.out")

    total, possible = sum(verified.values()), sum(info.possible.values())
    try:
        claimed_total = sum(float(claimed.get(q, 0.0)) for q in info.possible)
    except (TypeError, ValueError):
        claimed_total = 0.0
    try:
        kernel_cpu = float(result.get("kernel_cpu", 0.0))
    except (TypeError, ValueError):
        kernel_cpu = 0.0
    cpu_error = next((e for e in errors if e.get("ename") == "TimeoutError"
                      and CPU_LIMIT_MESSAGE in str(e.get("evalue"))), None)
    died = "DeadKernelError" in fatal or "Kernel died" in fatal
    memory_error = any("MemoryError" in str(e.get("ename")) or "allocate" in str(e.get("evalue"))
                       for e in errors) or "MemoryError" in fatal or (not result and "MemoryError" in output_tail)

    details = []
    if job.timed_out:
        status = "timeout"
        details.append(f"still running after {limits.wall_seconds:g} s, stopped; answers checked before then count")
    elif cpu_error or (died and kernel_cpu >= limits.cpu_seconds):
        status = "timeout"
        where = f" in the cell starting `{cpu_error.get('line', '')}`" if cpu_error else ""
        details.append(f"CPU time limit of {limits.cpu_seconds} s reached{where}; "
                       + ("the rest of the notebook ran" if cpu_error and not died else "the kernel was stopped"))
    elif memory_error:
        status = "out of memory"
        where = next((e for e in errors if "MemoryError" in str(e.get("ename")) or "allocate" in str(e.get("evalue"))),
                     None)
        details.append(f"memory limit of {limits.memory_mb} MB reached"
                       + (f" in the cell starting `{where.get('line', '')}`" if where else ""))
    elif claimed and claimed_total > total + 1e-9:
        status = "tampered"
        details.append(f"the notebook's own checks claimed {_fmt_points(claimed_total)}/{_fmt_points(possible)}, "
                       f"its answers are worth {_fmt_points(total)}")
    elif fatal or not result or errors:
        status = "error"
        if fatal:
            details.append("the kernel died (the notebook exited the process or crashed)" if died else fatal)
        elif not result:
            details.append("the grader stopped unexpectedly: " + output_tail.strip().splitlines()[-1][:200]
                           if output_tail.strip() else "the grader stopped unexpectedly")
        if errors:
            e = errors[0]
            more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
            details.append(f"{e.get('ename')}: {str(e.get('evalue'))[:120]} in the cell starting "
                           f"`{e.get('line', '')}`{more}")
    else:
        status = "ok"
    if sub.mentions_library:
        details.append("the code mentions transformer_lib (answers should be the student's own code)")
    sub.row = {
        "submission": sub.name,
        "exercise": info.name,
        "status": status,
        **{q: _fmt_points(v) for q, v in verified.items()},
        "total": _fmt_points(total),
        "possible": _fmt_points(possible),
        "seconds": f"{seconds:.1f}",
        "detail": "; ".join(details),
    }


class ScoreTable:
    """The CSV of grades, written so that nothing a submission does can forge or lose it.

    The path is checked and a journal beside it (``<out>.journal``, one JSON row per line) is
    opened when grading starts, so a bad ``--out`` fails before any notebook runs. Each row goes
    to the journal, flushed to disk, the moment its submission is graded. At the end the CSV is
    written to a temporary file in the same folder and moved into place with ``os.replace`` (a
    reader never sees half a table); if that fails, the table goes to standard output and the
    error says where the journal is. The SHA-256 of the CSV written is kept in ``checksum``:
    ``main`` prints it, so a table changed after the grader exited no longer matches.
    """

    def __init__(self, out: Path) -> None:
        self.out = Path(os.path.abspath(out))
        if self.out.is_dir():
            raise SystemExit(f"--out must be a file path, got the folder {self.out}")
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self.journal_path = self.out.with_name(self.out.name + ".journal")
        try:
            self.journal = open(self.journal_path, "w", encoding="utf-8")
        except OSError as e:
            raise SystemExit(f"--out: cannot write beside {self.out}: {e.strerror or e}") from None
        self.checksum = ""

    def record(self, sub: Submission) -> None:
        row = sub.row or {"submission": sub.name, "status": sub.status, "detail": sub.detail}
        self.journal.write(json.dumps(row) + "\n")
        self.journal.flush()
        os.fsync(self.journal.fileno())

    def finish(self, rows: list[dict[str, Any]], columns: list[str]) -> None:
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=columns, restval="", lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        data = buffer.getvalue().encode("utf-8")
        self.checksum = hashlib.sha256(data).hexdigest()
        self.journal.close()
        tmp = None
        try:
            fd, tmp = tempfile.mkstemp(prefix=f".{self.out.name}.", dir=self.out.parent)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.out)
        except OSError as e:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
            sys.stdout.write(data.decode("utf-8"))
            raise SystemExit(
                f"could not write {self.out} ({e.strerror or e}): the table is printed above, and every "
                f"row is in {self.journal_path}"
            ) from None
        os.unlink(self.journal_path)


def grade_folder(
    submissions: Path,
    out: Path,
    release: Path = DEFAULT_RELEASE,
    jobs: int = 2,
    limits: Limits | None = None,
    keep: bool = False,
    progress: bool = True,
    workdir: Path | None = None,
    table: list | None = None,
) -> list[dict[str, Any]]:
    """Grade every file under ``submissions``; write the CSV ``out``; return its rows.

    ``table``, when given, receives the :class:`ScoreTable` (its ``checksum`` once written).
    """
    import tqdm as tqdm_module
    from tqdm import tqdm

    tqdm_module.tqdm.monitor_interval = 0  # no monitor thread
    limits = limits or Limits()
    if not submissions.is_dir():
        raise SystemExit(f"{submissions} is not a folder")
    journal = ScoreTable(out)  # checked and opened before any submission runs
    if table is not None:
        table.append(journal)
    sets = load_release(release)
    if not sets:
        raise SystemExit(f"no autograders under {release}: run `make exercises` first")
    release_before = snapshot(release)
    subs = discover(submissions, skip={journal.out, journal.journal_path})
    for sub in subs:
        inspect(sub, sets)

    pending = [s for s in subs if not s.status]
    running: list[Job] = []
    bar = tqdm(total=len(subs), desc="grading", unit="notebook", disable=not progress, file=sys.stderr)
    bar.update(len(subs) - len(pending))
    try:
        while pending or running:
            while pending and len(running) < max(1, jobs):
                sub = pending.pop(0)
                try:
                    running.append(start_job(sub, sets[sub.exercise], limits, workdir))
                except Exception as e:  # the copy could not be written: report it, go on
                    sub.status, sub.detail = "not a notebook", f"cannot be prepared for grading: {str(e)[:120]}"
                    bar.update(1)
            time.sleep(0.2)
            for job in list(running):
                finished = not job.proc.is_alive()
                if not finished and time.monotonic() - job.start > limits.wall_seconds:
                    job.timed_out = True
                if finished or job.timed_out:
                    kill_job_processes(job)
                    try:
                        finish_job(job, sets[job.sub.exercise], limits)
                    except Exception as e:  # never lose a row
                        job.sub.row = {}
                        job.sub.status, job.sub.detail = "error", f"the grader failed on it: {str(e)[:200]}"
                    running.remove(job)
                    journal.record(job.sub)
                    if not keep:
                        shutil.rmtree(job.dir, ignore_errors=True)
                    bar.set_postfix_str(f"{job.sub.name}: {job.sub.row.get('status', job.sub.status)}",
                                        refresh=False)
                    bar.update(1)
    finally:
        for job in running:  # interrupted: leave nothing behind
            kill_job_processes(job)
            shutil.rmtree(job.dir, ignore_errors=True)
        bar.close()

    changed = restore_changes(release, release_before)
    if changed:
        print(f"warning: files of the release changed during grading and were restored: {', '.join(changed)}",
              file=sys.stderr)
    questions = sorted({q for s in sets.values() for q in s.possible}, key=_question_key)
    rows = []
    for sub in subs:
        if not sub.row:
            sub.row = {"submission": sub.name, "exercise": sub.exercise, "status": sub.status,
                       "total": "0", "possible": _fmt_points(sum(sets[sub.exercise].possible.values()))
                       if sub.exercise in sets else "", "seconds": "0.0", "detail": sub.detail}
        try:
            if sub.sha256 and hashlib.sha256(sub.path.read_bytes()).hexdigest() != sub.sha256:
                sub.row["detail"] = (sub.row["detail"] + "; " if sub.row["detail"] else "") + \
                    "the file changed while the batch ran"
        except OSError:
            pass
        rows.append(sub.row)
    used = [q for q in questions if any(q in r for r in rows)]
    columns = ["submission", "exercise", "status", *used, "total", "possible", "seconds", "detail"]
    journal.finish(rows, columns)
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("submissions", nargs="?", type=Path, help="folder of submitted notebooks")
    parser.add_argument("--out", type=Path, default=Path("grades.csv"), help="CSV to write (default ./grades.csv)")
    parser.add_argument("--release", type=Path, default=DEFAULT_RELEASE, help="folder built by `make exercises`")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2, help="submissions graded at once")
    parser.add_argument("--timeout", type=int, default=120,
                        help="CPU seconds a notebook may compute (default 120)")
    parser.add_argument("--wall", type=float, default=None,
                        help="wall-clock seconds before a notebook is stopped (default 3 x timeout + 60)")
    parser.add_argument("--memory", type=int, default=4096, help="memory limit per submission, MB (default 4096)")
    parser.add_argument("--keep", action="store_true", help="keep each submission's work folder (debugging)")
    args = parser.parse_args(argv)
    if args.submissions is None:
        parser.error("give the folder of submissions")
    limits = Limits(args.timeout, args.wall or 3 * args.timeout + 60, args.memory)
    table: list[ScoreTable] = []
    rows = grade_folder(args.submissions, args.out, args.release, args.jobs, limits, args.keep, table=table)
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    summary = ", ".join(f"{counts[s]} {s}" for s in STATUS_ORDER if s in counts)
    print(f"graded {len(rows)} submission(s) ({summary}) into {args.out}")
    print(f"sha256 of {args.out}: {table[0].checksum}  (check it with: sha256sum {args.out})")


if __name__ == "__main__":
    main()
elif __name__ == WORKER_RUN_NAME:  # a worker started by start_job
    worker_main(**globals()["WORKER_ARGS"])
