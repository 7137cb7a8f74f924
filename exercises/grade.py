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
   memory, with the checks module inside it, keeps a copy of the release folder, checks the
   output path and opens the journal beside it (:class:`ScoreTable`).
2. The submission is read (never written), and a copy goes into a fresh job folder with a fresh
   copy of its autograder and of ``grade_worker.py``. The worker is started in the job's sandbox
   (:func:`sandbox_kind`): as root, bubblewrap's namespaces and a user of its own, so the job
   sees only its own folder, no repository (so no reference library) and a read-only system; a
   control group and ``RLIMIT_NPROC`` limit its memory and processes as a whole. Per-process
   limits (memory, CPU time, file size) are set before it starts. Without a sandbox, grading
   refuses to start unless ``--trusted`` is given. ``--jobs`` jobs run at once.
3. The kernel starts with an IPython startup file that imports the checks before any cell runs,
   turns the CPU-time signal into a ``TimeoutError`` in the running cell (so the rest of the
   notebook still runs) and installs an audit hook that reports any attempt to import or open
   the reference library through a FIFO this process reads. A job still running after
   ``--wall`` seconds, or whose processes used no CPU for ``IDLE_SECONDS``, is stopped; when a
   job ends, every process of its user and control group is killed.
4. In the kernel, each test records the answer it checks as plain arrays and stops (see
   ``exercise_checks.py``). Back here, where no student code ever runs, the autograder's tests are
   run again by otter's own test runner on the recorded answers, with every expected value
   computed here by transformer_lib and PyTorch. Those are the points. Otter's score from inside
   the kernel is only compared with them: when it claims more, the row says ``tampered``.
5. The row goes to the journal at once; at the end the CSV is moved into place with
   ``os.replace`` and its SHA-256 printed.

So a notebook that rebinds ``np.allclose`` or ``np.testing.assert_allclose``, patches otter or
the checks, overwrites the test files in its folder, reads the hidden tests or forges otter's
results changes what its own kernel claims, not its grade; a notebook that leaves a daemon
behind, writes into other jobs' folders or replaces the output path cannot reach any of them.
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
import shutil
import signal
import sys
import tempfile
import time
import types
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DEFAULT_RELEASE = HERE / "release"
CHECKS_MODULE = "exercise_checks"
STATUS_ORDER = ["ok", "error", "tampered", "out of memory", "timeout", "not a notebook", "empty",
                "unknown exercise"]
MAX_NOTEBOOK_BYTES = 64_000_000
CPU_GRACE_SECONDS = 15  # CPU time left to the rest of the notebook once one cell hit the limit
CPU_LIMIT_MESSAGE = "the notebook used up its CPU time limit; this cell was stopped"
IDLE_SECONDS = 60  # a job whose processes use no CPU for this long is waiting forever: stopped
MAX_TASKS = 512  # processes and threads one job may have (the kernel alone uses about 20)
LIBRARY = "transformer_lib"
LIBRARY_FLAG = "library-attempt"  # a FIFO in the job folder: the kernel reports reaching for the library
LIBRARY_STAND_IN = """\
# Written by exercises/grade.py: what a grading sandbox has in place of the course library.
import os

try:
    _fd = os.open({flag!r}, os.O_WRONLY | os.O_NONBLOCK)
    os.write(_fd, b"import {library} (the stand-in was loaded)\\n")
    os.close(_fd)
except OSError:
    pass
raise ImportError("the course library is not available while grading: the answers must be your own code")
"""
KERNEL_STARTUP = f"""\
# Written by exercises/grade.py. IPython runs this when the grading kernel starts, before any cell.
import os
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


def _library_guard(event, args, _flag=os.environ.get("EXERCISES_LIBRARY_FLAG", ""), _open=os.open,
                   _write=os.write, _close=os.close, _flags=os.O_WRONLY | os.O_NONBLOCK):
    # The reference library is not in this sandbox (a stand-in that reports and refuses sits in
    # its place, for importlib's calls); this hook, which cannot be removed, reports every import
    # statement that names it, through a FIFO the grader reads.
    if event == "import" and args and str(args[0]).split(".")[0] == "{LIBRARY}":
        what = "import " + str(args[0])
    else:
        return
    try:
        fd = _open(_flag, _flags)
        try:
            _write(fd, (what[:200] + "\\n").encode())
        finally:
            _close(fd)
    except OSError:
        pass


sys.addaudithook(_library_guard)
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
# The sandbox: each submission alone, as its own user, with limits for the whole job
# --------------------------------------------------------------------------------------------


def sandbox_kind() -> str:
    """Which isolation this machine offers for untrusted notebooks.

    ``"user"``: the grader runs as root and bubblewrap (Debian's ``bubblewrap``) is installed.
    Each job then runs as a user of its own (a uid from ``JOB_UID_BASE`` on, held by this batch
    alone through a file lock, no login, no home)
    inside bubblewrap's mount, process and IPC namespaces: it sees its own folder and nothing
    of the other jobs, the repository (the reference library, the instructor notebooks, git's
    history) is replaced by an empty folder, everything else is read-only, and every process of
    the job is found by its user and its control group. ``""``: none; grading untrusted work
    then refuses to start unless the instructor passes ``--trusted``.
    """
    if os.geteuid() == 0 and shutil.which("bwrap") and shutil.which("setpriv"):
        return "user"
    return ""


JOB_UID_BASE = 61000  # job users are uids 61000, 61001, ... (one per slot, never a login user)
JOB_UIDS = 1000  # how many such uids there are, for all the batches running at once


class JobUsers:
    """The uids of one batch's slots, held with file locks so no other batch uses them meanwhile.

    Every process of a job's uid is killed when the job ends, so two batches at once (two
    instructors, or two runs of the tests) must never share a uid.
    """

    def __init__(self, count: int) -> None:
        import fcntl

        folder = Path(tempfile.gettempdir()) / "exercise-grading-uids"
        folder.mkdir(mode=0o700, exist_ok=True)
        self.uids: list[int] = []
        self._locks = []
        for uid in range(JOB_UID_BASE, JOB_UID_BASE + JOB_UIDS):
            if len(self.uids) == count:
                break
            lock = open(folder / f"{uid}.lock", "w")
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                lock.close()
                continue
            self.uids.append(uid)
            self._locks.append(lock)
        if len(self.uids) < count:
            self.release()
            raise SystemExit(f"no free job users: {JOB_UIDS} uids from {JOB_UID_BASE} are all held by other batches")

    def release(self) -> None:
        for lock in self._locks:
            lock.close()
        self._locks, self.uids = [], []
REPO = HERE.parent


def _hidden_ancestor(path: Path) -> Path | None:
    """The highest folder above ``path`` that other users cannot enter (e.g. ``/root``), if any."""
    for parent in reversed(path.parents):
        if parent != Path("/") and not parent.stat().st_mode & 0o001:
            return parent
    return None


def _enterable(path: Path) -> list[str]:
    """bubblewrap arguments that let any user reach ``path`` through folders others cannot enter.

    The highest such folder above it (``/root``, pytest's ``/tmp/pytest-of-root``, ...) is
    replaced by an empty one, with only the folders on the way to ``path`` made inside it.
    """
    hidden = _hidden_ancestor(path)
    if hidden is None:
        return []
    args = ["--tmpfs", str(hidden)]
    for folder in reversed(path.parents):
        if hidden in folder.parents:
            args += ["--perms", "0755", "--dir", str(folder)]
    return args


def library_folder() -> Path:
    """Where the course library is installed (the repository, for the editable install)."""
    import importlib.util

    return Path(importlib.util.find_spec(LIBRARY).submodule_search_locations[0])


def bwrap_command(job_dir: Path, base: Path, uid: int) -> list[str]:
    """bubblewrap, then setpriv to the job's user, then the worker: the command that runs one job."""
    venv, python_home = Path(sys.prefix), Path(sys.base_prefix)
    cmd = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/dev/shm",
           "--tmpfs", str(REPO)]  # the repository: library, instructor notebooks, git history
    for keep in (venv, python_home):  # the interpreter and its packages, read-only, wherever they are
        reach = _enterable(keep)
        if reach or REPO in keep.parents or keep == REPO:
            cmd += [*reach, "--ro-bind", str(keep), str(keep)]
    # wherever the library is installed, a stand-in that reports and refuses takes its place
    cmd += ["--ro-bind", str(job_dir / "stand-in"), str(library_folder())]
    cmd += [*_enterable(base), "--tmpfs", str(base), "--bind", str(job_dir), str(job_dir),  # its folder only
            "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--die-with-parent", "--new-session",
            "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--chdir", str(job_dir / "work"),
            "--", "setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--no-new-privs",
            "--inh-caps=-all", "--bounding-set=-all",
            str(venv / "bin" / "python"), "-I", str(job_dir / "grade_worker.py"), str(job_dir)]
    return cmd


class JobCgroup:
    """A control group holding every process of one job: memory and process count for the job.

    cgroup v2 (``memory.max``, ``pids.max``) where ``/sys/fs/cgroup`` is the unified hierarchy
    with those controllers, else cgroup v1's ``memory`` and ``pids`` hierarchies. ``available``
    is False where neither can be written; the per-process limits still hold then.
    """

    def __init__(self, name: str, memory_bytes: int) -> None:
        self.dirs: list[Path] = []
        root = Path("/sys/fs/cgroup")
        try:
            if "memory" in (root / "cgroup.controllers").read_text().split():
                parent = root / "exercise-grading"
                parent.mkdir(exist_ok=True)
                (root / "cgroup.subtree_control").write_text("+memory +pids")
                (parent / "cgroup.subtree_control").write_text("+memory +pids")
                d = parent / name
                d.mkdir()
                self.dirs = [d]
                (d / "memory.max").write_text(str(memory_bytes))
                (d / "memory.swap.max").write_text("0")
                (d / "pids.max").write_text(str(MAX_TASKS))
                self.version = 2
                return
        except OSError:
            self.remove()
        try:
            mem, pids = root / "memory" / "exercise-grading" / name, root / "pids" / "exercise-grading" / name
            mem.mkdir(parents=True)
            self.dirs.append(mem)
            pids.mkdir(parents=True)
            self.dirs.append(pids)
            (mem / "memory.limit_in_bytes").write_text(str(memory_bytes))
            with contextlib.suppress(OSError):  # absent without swap accounting
                (mem / "memory.memsw.limit_in_bytes").write_text(str(memory_bytes))
            (pids / "pids.max").write_text(str(MAX_TASKS))
            self.version = 1
        except OSError:
            self.remove()

    @property
    def available(self) -> bool:
        return bool(self.dirs)

    def join(self) -> None:
        """Move the calling process into the group (called in the child before it execs)."""
        for d in self.dirs:
            (d / "cgroup.procs").write_text(str(os.getpid()))

    def pids(self) -> set[int]:
        out = set()
        for d in self.dirs:
            with contextlib.suppress(OSError, ValueError):
                out.update(int(x) for x in (d / "cgroup.procs").read_text().split())
        return out

    def oom_kills(self) -> int:
        """How many of the job's processes the kernel killed for want of memory."""
        for d in self.dirs:
            for name in ("memory.events", "memory.oom_control"):
                with contextlib.suppress(OSError):
                    for line in (d / name).read_text().splitlines():
                        key, _, value = line.partition(" ")
                        if key == "oom_kill":
                            return int(value)
        return 0

    def remove(self) -> None:
        for d in self.dirs:
            with contextlib.suppress(OSError):
                d.rmdir()
        self.dirs = []


def apply_limits(memory_mb: int, cpu_seconds: int, tasks: bool = True) -> None:
    """Per-process limits, inherited by everything the job starts: memory, CPU, file size, tasks.

    The kernel gets ``cpu_seconds`` of CPU time (then SIGXCPU, which the kernel's startup file
    turns into a TimeoutError in the running cell) and is killed ``CPU_GRACE_SECONDS`` later.
    ``RLIMIT_NPROC`` counts every process and thread of the job's user, so it is a limit per job.
    """
    memory = memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + CPU_GRACE_SECONDS))
    resource.setrlimit(resource.RLIMIT_FSIZE, (256 * 1024 * 1024, 256 * 1024 * 1024))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if tasks:  # only for a job's own user: for the grader's user it would count all its processes
        resource.setrlimit(resource.RLIMIT_NPROC, (MAX_TASKS, MAX_TASKS))


# --------------------------------------------------------------------------------------------
# Running the batch
# --------------------------------------------------------------------------------------------


@dataclass
class Job:
    sub: Submission
    dir: Path
    uid: int | None  # the job's own user (sandboxed), None when trusted
    proc: Any = None  # a subprocess.Popen
    cgroup: JobCgroup | None = None
    flag_fd: int | None = None  # read end of the library FIFO
    start: float = 0.0
    timed_out: bool = False
    idle: bool = False
    library_attempts: list[str] = field(default_factory=list)
    last_cpu: float = -1.0
    last_busy: float = 0.0
    oom_kills: int = 0
    slot: int = 0


def job_processes(job: Job) -> list[Any]:
    """Every process of the job: its user's, its control group's, the worker's tree."""
    import psutil

    found: dict[int, Any] = {}
    pids = set(job.cgroup.pids()) if job.cgroup else set()
    if job.proc is not None:
        pids.add(job.proc.pid)
        with contextlib.suppress(psutil.Error):
            pids.update(c.pid for c in psutil.Process(job.proc.pid).children(recursive=True))
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            found[pid] = psutil.Process(pid)
    if job.uid is not None:
        for p in psutil.process_iter(["uids"]):
            with contextlib.suppress(psutil.Error, TypeError):
                if p.info["uids"].real == job.uid:
                    found[p.pid] = p
    found.pop(os.getpid(), None)
    return list(found.values())


def kill_job_processes(job: Job) -> None:
    """Kill every process of the job, until none is left (a double fork does not escape a user)."""
    import psutil

    for _ in range(50):
        victims = job_processes(job)
        if not victims:
            break
        for p in victims:
            with contextlib.suppress(psutil.Error):
                p.send_signal(signal.SIGKILL)
        psutil.wait_procs(victims, timeout=2)
    if job.proc is not None:
        with contextlib.suppress(Exception):
            job.proc.wait(timeout=5)


def job_cpu_seconds(job: Job) -> float:
    import psutil

    total = 0.0
    for p in job_processes(job):
        with contextlib.suppress(psutil.Error):
            t = p.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
    return total


def read_library_flags(job: Job) -> None:
    if job.flag_fd is None:
        return
    with contextlib.suppress(BlockingIOError, OSError):
        while chunk := os.read(job.flag_fd, 65536):
            job.library_attempts += [ln for ln in chunk.decode("utf-8", "replace").splitlines() if ln]


def start_job(sub: Submission, info: ExerciseSet, limits: Limits, base: Path, uid: int | None) -> Job:
    """Prepare the job's folder and start its worker (in the sandbox, as the job's user)."""
    import subprocess

    import nbformat

    job_dir = Path(tempfile.mkdtemp(prefix="job-", dir=base))
    os.chmod(job_dir, 0o711)  # the grader's: the job may enter, not change what is here
    own = ("work", "record", "tmp", "runtime", "home", "mpl", "ipython")
    for sub_dir in own:
        (job_dir / sub_dir).mkdir(mode=0o700)
    startup = job_dir / "ipython" / "profile_default" / "startup"
    startup.mkdir(parents=True)
    (startup / "00-grader.py").write_text(KERNEL_STARTUP)
    (job_dir / "autograder.zip").write_bytes(info.zip_bytes)  # a fresh copy for every submission
    shutil.copy(HERE / "grade_worker.py", job_dir / "grade_worker.py")
    nbformat.write(prepare_copy(sub.notebook, info.name), str(job_dir / "work" / f"{info.name}.ipynb"))
    flag = job_dir / LIBRARY_FLAG
    os.mkfifo(flag, 0o622)
    os.chmod(flag, 0o622)
    (job_dir / "stand-in").mkdir(mode=0o755)
    (job_dir / "stand-in" / "__init__.py").write_text(LIBRARY_STAND_IN.format(flag=str(flag), library=LIBRARY))
    env = {
        "EXERCISES_RECORD_DIR": str(job_dir / "record"),
        "EXERCISES_LIBRARY_FLAG": str(flag),
        "TMPDIR": str(job_dir / "tmp"),
        "HOME": str(job_dir / "home"),
        "USER": "exercise-grading",
        "JUPYTER_RUNTIME_DIR": str(job_dir / "runtime"),
        "JUPYTER_CONFIG_DIR": str(job_dir / "home" / ".jupyter"),
        "JUPYTER_DATA_DIR": str(job_dir / "home" / ".local" / "share" / "jupyter"),
        "IPYTHONDIR": str(job_dir / "ipython"),
        "MPLCONFIGDIR": str(job_dir / "mpl"),
        "MPLBACKEND": "Agg",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PATH": f"{Path(sys.prefix) / 'bin'}:/usr/bin:/bin",
    }
    (job_dir / "env.json").write_text(json.dumps(env))
    if uid is not None:
        for sub_dir in own:
            for folder, _, files in os.walk(job_dir / sub_dir):
                os.chown(folder, uid, uid)
                for f in files:
                    os.chown(Path(folder) / f, uid, uid)
    job = Job(sub, job_dir, uid)
    job.flag_fd = os.open(flag, os.O_RDONLY | os.O_NONBLOCK)
    if uid is not None:
        kill_job_processes(job)  # nothing of an earlier job may still run as this user
        job.cgroup = JobCgroup(f"{job_dir.name}", limits.memory_mb * 1024 * 1024)
        cmd = bwrap_command(job_dir, base, uid)
    else:
        cmd = [sys.executable, str(job_dir / "grade_worker.py"), str(job_dir)]
    cgroup = job.cgroup

    def in_child() -> None:  # runs in the new process before it execs bubblewrap
        if cgroup is not None:
            cgroup.join()
        apply_limits(limits.memory_mb, limits.cpu_seconds, tasks=uid is not None)

    job.proc = subprocess.Popen(cmd, preexec_fn=in_child, start_new_session=True, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, close_fds=True,
                                env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
    job.start = job.last_busy = time.monotonic()
    return job


def stop_job(job: Job) -> None:
    """Kill what is left of the job and release its control group and FIFO."""
    kill_job_processes(job)
    read_library_flags(job)
    if job.flag_fd is not None:
        os.close(job.flag_fd)
        job.flag_fd = None
    if job.cgroup is not None:
        job.oom_kills = job.cgroup.oom_kills()
        job.cgroup.remove()


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


def record_folder_is_private(job: Job) -> bool:
    """Whether only this job could write its record folder (its own user, mode 0700, in a 0711 folder).

    Then every recorded answer, and any ``.conflict`` mark, is the submission's own evidence.
    Without the sandbox (``--trusted``) every job runs as one user, and the instructor has
    vouched for every notebook: its records count as its own.
    """
    if job.uid is None:
        return True
    try:
        rec, parent = (job.dir / "record").stat(), job.dir.stat()
    except OSError:
        return False
    return rec.st_uid == job.uid and rec.st_mode & 0o077 == 0 and parent.st_uid == os.geteuid() \
        and parent.st_mode & 0o022 == 0


def finish_job(job: Job, info: ExerciseSet, limits: Limits) -> None:
    """Score a finished (or killed) job and fill in its row."""
    sub = job.sub
    seconds = time.monotonic() - job.start
    verified = verify(info, job.dir / "record")
    result: dict[str, Any] = {}
    try:
        loaded = json.loads((job.dir / "work" / "result.json").read_text()[:5_000_000])
        if isinstance(loaded, dict):
            result = loaded
    except (OSError, ValueError):
        result = {}
    claimed = result.get("claimed") if isinstance(result.get("claimed"), dict) else {}
    errors = [e for e in result.get("errors", []) if isinstance(e, dict)] if isinstance(
        result.get("errors"), list) else []
    fatal = str(result.get("fatal", ""))
    output_tail = _tail(job.dir / "work" / "worker.out")

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
    memory_error = job.oom_kills > 0 or any("MemoryError" in str(e.get("ename")) or "allocate" in str(e.get("evalue"))
                       for e in errors) or "MemoryError" in fatal or (not result and "MemoryError" in output_tail)

    details = []
    private = record_folder_is_private(job)
    if job.library_attempts:
        status = "tampered"
        details.append(f"the notebook reached for the reference library ({job.library_attempts[0]}); "
                       f"{len(job.library_attempts)} attempt(s)")
    elif job.idle:
        status = "timeout"
        details.append(f"no computation for {IDLE_SECONDS} s (the notebook was waiting), stopped; "
                       "answers checked before then count")
    elif job.timed_out:
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
    elif claimed and claimed_total > total + 1e-9 and private:
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
    if not private:
        details.append("its record folder was reachable by other jobs, so a mismatch is not counted as its own")
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
    trusted: bool = False,
) -> list[dict[str, Any]]:
    """Grade every file under ``submissions``; write the CSV ``out``; return its rows.

    Each submission runs in the sandbox of :func:`sandbox_kind`; where there is none, grading
    refuses to start unless ``trusted`` says every submission may run as the grader's own user.
    ``table``, when given, receives the :class:`ScoreTable` (its ``checksum`` once written).
    """
    import tqdm as tqdm_module
    from tqdm import tqdm

    tqdm_module.tqdm.monitor_interval = 0  # no monitor thread
    limits = limits or Limits()
    if not submissions.is_dir():
        raise SystemExit(f"{submissions} is not a folder")
    sandboxed = bool(sandbox_kind())
    if not sandboxed and not trusted:
        raise SystemExit(
            "grading untrusted notebooks needs a sandbox: run the grader as root with bubblewrap installed "
            "(each submission then runs as a user of its own), or in a container with otter's Docker-based "
            "`otter grade`; pass --trusted only if you trust every notebook in the folder"
        )
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
    base = Path(tempfile.mkdtemp(prefix="exercise-grading-", dir=workdir))
    os.chmod(base, 0o711)  # jobs may enter their own folder, never list the others
    users = JobUsers(max(1, jobs)) if sandboxed else None
    bar = tqdm(total=len(subs), desc="grading", unit="notebook", disable=not progress, file=sys.stderr)
    bar.update(len(subs) - len(pending))
    try:
        while pending or running:
            while pending and len(running) < max(1, jobs):
                sub = pending.pop(0)
                slot = min(set(range(max(1, jobs))) - {j.slot for j in running})
                try:
                    uid = users.uids[slot] if users is not None else None
                    job = start_job(sub, sets[sub.exercise], limits, base, uid)
                    job.slot = slot
                    running.append(job)
                except Exception as e:  # the copy could not be written: report it, go on
                    sub.status, sub.detail = "not a notebook", f"cannot be prepared for grading: {str(e)[:120]}"
                    bar.update(1)
            time.sleep(0.2)
            for job in list(running):
                read_library_flags(job)
                finished = job.proc.poll() is not None
                now = time.monotonic()
                if not finished and now - job.start > limits.wall_seconds:
                    job.timed_out = True
                if not finished and now - job.last_busy > 5:  # an idle check every 5 s
                    cpu = job_cpu_seconds(job)
                    if cpu > job.last_cpu + 0.05:
                        job.last_cpu, job.last_busy = cpu, now
                    elif now - job.last_busy > IDLE_SECONDS:
                        job.idle = True
                if finished or job.timed_out or job.idle:
                    stop_job(job)
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
            stop_job(job)
        if users is not None:
            users.release()
        if not keep:
            shutil.rmtree(base, ignore_errors=True)
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
    parser.add_argument("--trusted", action="store_true",
                        help="grade without a sandbox, as your own user (only for notebooks you trust)")
    args = parser.parse_args(argv)
    if args.submissions is None:
        parser.error("give the folder of submissions")
    limits = Limits(args.timeout, args.wall or 3 * args.timeout + 60, args.memory)
    table: list[ScoreTable] = []
    rows = grade_folder(args.submissions, args.out, args.release, args.jobs, limits, args.keep, table=table,
                        trusted=args.trusted)
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    summary = ", ".join(f"{counts[s]} {s}" for s in STATUS_ORDER if s in counts)
    print(f"graded {len(rows)} submission(s) ({summary}) into {args.out}")
    print(f"sha256 of {args.out}: {table[0].checksum}  (check it with: sha256sum {args.out})")


if __name__ == "__main__":
    main()
