"""The sandbox: each submission alone, as a user of its own, with limits for the whole job.

- :func:`sandbox_kind`: whether this machine can isolate untrusted notebooks (root and
  bubblewrap); without it grading refuses to start unless the instructor passes ``--trusted``.
- :class:`JobUsers`: the uids of one batch's slots, held with file locks so that two batches
  at once never share one.
- :func:`bwrap_command`: bubblewrap's namespaces, the repository hidden, the course library
  replaced by a stand-in, the system read-only, then ``setpriv`` to the job's user.
- :class:`JobCgroup`: a control group limiting memory and processes of the job as a whole.
- :func:`apply_limits`: the per-process limits (memory, CPU time, file size, tasks).
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import os
import resource
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .autograders import LIBRARY

REPO = Path(__file__).resolve().parents[2]  # hidden from every job: library, instructor notebooks, git
CPU_GRACE_SECONDS = 15  # CPU time left to the rest of the notebook once one cell hit the limit
MAX_TASKS = 512  # processes and threads one job may have (the kernel alone uses about 20)


@dataclass
class Limits:
    """What one submission may use.

    ``cpu_seconds`` is CPU time of the notebook's kernel (RLIMIT_CPU), so a busy machine does not
    cut honest work short; ``wall_seconds`` stops notebooks that wait forever without computing,
    and ``idle_seconds`` those whose processes use no CPU for that long (a ``time.sleep``, an
    ``input()``), so that they give their slot back early.
    """

    cpu_seconds: int = 120
    wall_seconds: float = 420.0
    memory_mb: int = 4096
    idle_seconds: float = 60.0


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
            raise SystemExit(
                f"no free job users: {JOB_UIDS} uids from {JOB_UID_BASE} are all held by other batches")

    def release(self) -> None:
        """Give the uids back (closing a lock file releases its lock)."""
        for lock in self._locks:
            lock.close()
        self._locks, self.uids = [], []


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
    return Path(importlib.util.find_spec(LIBRARY).submodule_search_locations[0])


def bwrap_command(job_dir: Path, base: Path, uid: int, stand_in: Path, inner: list[str]) -> list[str]:
    """bubblewrap, then setpriv to the job's user, then ``inner``: the command that runs one job.

    ``job_dir`` (under ``base``) is the only folder of the batch the job sees, writable where its
    user owns it; ``stand_in`` takes the place of the course library wherever it is installed.
    """
    venv, python_home = Path(sys.prefix), Path(sys.base_prefix)
    cmd = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/dev/shm",
           "--tmpfs", str(REPO)]  # the repository: library, instructor notebooks, git history
    for keep in (venv, python_home):  # the interpreter and its packages, read-only, wherever they are
        reach = _enterable(keep)
        if reach or REPO in keep.parents or keep == REPO:
            cmd += [*reach, "--ro-bind", str(keep), str(keep)]
    # wherever the library is installed, a stand-in that reports and refuses takes its place
    cmd += ["--ro-bind", str(stand_in), str(library_folder())]
    cmd += [*_enterable(base), "--tmpfs", str(base), "--bind", str(job_dir), str(job_dir),  # its folder only
            "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--die-with-parent", "--new-session",
            "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--chdir", str(job_dir / "work"),
            "--", "setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--no-new-privs",
            "--inh-caps=-all", "--bounding-set=-all", *inner]
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

