"""Jobs: one submission's folder, its worker started in the sandbox, its processes watched and killed.

:func:`start_job` prepares a fresh job folder (the notebook's copy, a fresh copy of its
autograder, the worker, the kernel's startup file, a stand-in for the course library and a FIFO
through which the kernel reports reaching for it) and starts ``worker.py`` there: in the
sandbox as the job's own user, or, trusted, as the grader's user. :func:`job_processes` finds
every process of a job (its user's, its control group's, the worker's tree), so that
:func:`stop_job` can kill them all, however they were started.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .autograders import CHECKS_MODULE, LIBRARY, ExerciseSet
from .discover import Submission, prepare_copy, quiet_nbformat
from .sandbox import JobCgroup, Limits, apply_limits, bwrap_command

WORKER = Path(__file__).resolve().parent / "worker.py"  # copied into each job folder and run there
CPU_LIMIT_MESSAGE = "the notebook used up its CPU time limit; this cell was stopped"
LIBRARY_FLAG = "library-attempt"  # a FIFO in the job folder: the kernel reports reaching for the library

LIBRARY_STAND_IN = """\
# Written by the grader: what a grading sandbox has in place of the course library.
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
# Written by the grader. IPython runs this when the grading kernel starts, before any cell.
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


@dataclass
class Job:
    """One submission being graded: its folder, its user (None when trusted), what was seen of it."""

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
    """CPU seconds used so far by every process of the job (and their waited-for children)."""
    import psutil

    total = 0.0
    for p in job_processes(job):
        with contextlib.suppress(psutil.Error):
            t = p.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
    return total


def read_library_flags(job: Job) -> None:
    """Collect what the kernel wrote into the library FIFO: every attempt to reach the library."""
    if job.flag_fd is None:
        return
    with contextlib.suppress(BlockingIOError, OSError):
        while chunk := os.read(job.flag_fd, 65536):
            job.library_attempts += [ln for ln in chunk.decode("utf-8", "replace").splitlines() if ln]


def start_job(sub: Submission, info: ExerciseSet, limits: Limits, base: Path, uid: int | None) -> Job:
    """Prepare the job's folder and start its worker (in the sandbox, as the job's user)."""
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
    shutil.copy(WORKER, job_dir / WORKER.name)
    with quiet_nbformat():  # its validation errors would quote the notebook on the console
        nbformat.write(prepare_copy(sub.notebook, info.name), str(job_dir / "work" / f"{info.name}.ipynb"))
    flag = job_dir / LIBRARY_FLAG
    os.mkfifo(flag, 0o622)
    os.chmod(flag, 0o622)
    (job_dir / "stand-in").mkdir(mode=0o755)
    stand_in = LIBRARY_STAND_IN.format(flag=str(flag), library=LIBRARY)
    (job_dir / "stand-in" / "__init__.py").write_text(stand_in)
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
        worker = [str(Path(sys.prefix) / "bin" / "python"), "-I", str(job_dir / WORKER.name), str(job_dir)]
        cmd = bwrap_command(job_dir, base, uid, job_dir / "stand-in", worker)
    else:
        cmd = [sys.executable, str(job_dir / WORKER.name), str(job_dir)]
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
